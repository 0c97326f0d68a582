// CheckpointStore: save / verify / latest_valid, corruption and fallback,
// kills in the middle of a save or a prune (forked children and
// KEEL_FAULT_INJECT), disk full and unwritable directories, pruning.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>

#include "checkpoint/checkpoint_store.h"
#include "checkpoint/install_dir.h"
#include "checkpoint/safetensors.h"
#include "checkpoint_test_util.h"
#include "test_util.h"
#include "util/fs.h"

namespace {

// POSIX helpers (src/util/fs.h) rather than std::filesystem:
// libtorch.so exports its own std::filesystem functions, and remove_all
// through it crashes.
using keel::is_directory;
using keel::path_exists;
using keel::CheckpointError;
using keel::CheckpointFile;
using keel::CheckpointStore;

using keel_test::read_file;
using keel_test::write_file;

CheckpointFile text_file(const std::string& name, const std::string& content) {
  return {name, [content](const std::string& path) { write_file(path, content); }};
}

// A typical checkpoint: two safetensors files and a JSON state file; the
// contents depend on `step` so that replaced copies can be told apart.
std::vector<CheckpointFile> files_for(int64_t step) {
  return {
      {"model.safetensors",
       [step](const std::string& p) {
         keel::write_safetensors(p, {{"w", torch::full({64}, static_cast<float>(step))}},
                                 {{"step", std::to_string(step)}});
       }},
      {"optimizer.safetensors",
       [step](const std::string& p) { keel::write_safetensors(p, {{"m", torch::full({32}, step, torch::kInt64)}}); }},
      text_file("state.json", "{\"step\": " + std::to_string(step) + "}\n"),
  };
}

// Names in a directory, sorted.
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out = keel::list_directory(dir);
  std::sort(out.begin(), out.end());
  return out;
}

void make_dir(const std::string& dir) { ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << dir; }

// Copies the files of a flat directory.
void copy_dir(const std::string& from, const std::string& to) {
  make_dir(to);
  for (const auto& name : entries(from)) write_file(to + "/" + name, read_file(from + "/" + name));
}

void shrink_file(const std::string& path, uint64_t new_size) {
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(new_size)), 0) << path;
}

bool has_leftover(const std::string& ckpt_dir) {
  for (const auto& n : entries(ckpt_dir))
    if (n[0] == '.') return true;
  return false;
}

// Runs fn in a forked child with KEEL_FAULT_INJECT=fault; returns the wait
// status. The child only writes files; it never returns into GoogleTest.
int run_in_child(const std::string& fault, const std::function<void()>& fn) {
  fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    setenv("KEEL_FAULT_INJECT", fault.c_str(), 1);
    try {
      fn();
    } catch (const std::exception& e) {
      fprintf(stderr, "child: %s\n", e.what());
      _exit(1);
    }
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

bool killed(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL; }

// The pid of a process that has exited and been reaped.
pid_t dead_pid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}


std::vector<int64_t> valid_steps(const CheckpointStore& store) {
  std::vector<int64_t> steps;
  for (const auto& [step, dir] : store.list_valid()) steps.push_back(step);
  return steps;
}

// Flips one byte in the middle of a file, keeping its size.
void flip_byte(const std::string& path) {
  std::string bytes = read_file(path);
  bytes[bytes.size() / 2] ^= 0x01;
  write_file(path, bytes);
}

class CheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { run_dir_ = keel_test::make_temp_dir("ckpt_store"); }
  void TearDown() override {
    if (!HasFailure()) keel::remove_tree(run_dir_);  // kept for a look when a test fails
  }
  std::string run_dir_;
};

// ------------------------------------------------------------ save and verify

TEST_F(CheckpointStoreTest, SaveVerifyLatest) {
  CheckpointStore store(run_dir_);
  EXPECT_FALSE(store.latest_valid().has_value());
  const std::string dir = store.save(100, files_for(100));

  EXPECT_EQ(dir, run_dir_ + "/checkpoints/step_00000100");
  EXPECT_EQ(entries(store.checkpoints_dir()), std::vector<std::string>{"step_00000100"});
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"manifest.json", "model.safetensors", "optimizer.safetensors",
                                                     "state.json"}));
  keel::Manifest m = CheckpointStore::verify(dir);
  EXPECT_EQ(m.step, 100);
  ASSERT_EQ(m.files.size(), 3u);
  EXPECT_EQ(m.files[0].name, "model.safetensors");
  EXPECT_EQ(m.files[2].size, keel::file_size(dir + "/state.json"));
  EXPECT_EQ(store.latest_valid(), dir);
  EXPECT_EQ(valid_steps(store), std::vector<int64_t>{100});

  std::map<std::string, std::string> meta;
  auto tensors = keel::read_safetensors(dir + "/model.safetensors", &meta);
  EXPECT_TRUE(torch::equal(tensors.at(0).second, torch::full({64}, 100.0f)));
  EXPECT_EQ(meta.at("step"), "100");
}

TEST_F(CheckpointStoreTest, NewestIsByStepNumber) {
  CheckpointStore store(run_dir_ + "/");  // trailing slash is fine
  store.save(9, files_for(9));
  store.save(123456789, files_for(123456789));  // more than 8 digits
  store.save(10, files_for(10));
  EXPECT_EQ(store.latest_valid(), run_dir_ + "/checkpoints/step_123456789");
  EXPECT_EQ(valid_steps(store), (std::vector<int64_t>{9, 10, 123456789}));
}

TEST_F(CheckpointStoreTest, StepDirNames) {
  EXPECT_EQ(CheckpointStore::step_dir_name(7), "step_00000007");
  EXPECT_EQ(CheckpointStore::parse_step_dir_name("step_00000007"), 7);
  EXPECT_EQ(CheckpointStore::parse_step_dir_name("step_123456789"), 123456789);
  EXPECT_FALSE(CheckpointStore::parse_step_dir_name("step_007").has_value());
  EXPECT_FALSE(CheckpointStore::parse_step_dir_name("step_000000007").has_value());  // not canonical
  EXPECT_FALSE(CheckpointStore::parse_step_dir_name("step_0000000x").has_value());
  EXPECT_FALSE(CheckpointStore::parse_step_dir_name(".tmp-step_00000007-12").has_value());
}

// ------------------------------------------------- corruption and fallback

TEST_F(CheckpointStoreTest, CorruptByteFallsBackToPrevious) {
  CheckpointStore store(run_dir_);
  const std::string first = store.save(1, files_for(1));
  const std::string second = store.save(2, files_for(2));
  flip_byte(second + "/optimizer.safetensors");

  expect_error([&] { CheckpointStore::verify(second); }, {second + "/optimizer.safetensors", "CRC-32", "corrupted"});
  EXPECT_NO_THROW(CheckpointStore::verify(second, keel::VerifyLevel::sizes));  // sizes alone cannot see it
  std::vector<std::string> rejected;
  EXPECT_EQ(store.latest_valid(&rejected), first);
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_NE(rejected[0].find(second + "/optimizer.safetensors"), std::string::npos) << rejected[0];
  EXPECT_EQ(valid_steps(store), std::vector<int64_t>{1});
}

TEST_F(CheckpointStoreTest, TruncatedOrMissingFileRejected) {
  CheckpointStore store(run_dir_);
  const std::string first = store.save(1, files_for(1));
  const std::string second = store.save(2, files_for(2));
  const std::string model = second + "/model.safetensors";
  shrink_file(model, keel::file_size(model) - 3);
  expect_error([&] { CheckpointStore::verify(second, keel::VerifyLevel::sizes); }, {model, "bytes, the manifest says"});
  EXPECT_EQ(store.latest_valid(), first);

  keel::remove_file(model);
  expect_error([&] { CheckpointStore::verify(second); }, {model, "missing"});
  EXPECT_EQ(store.latest_valid(), first);
}

// A state.json the save wrote empty (a write error nobody checked) is
// consistent with its manifest but unusable: verification parses it, so
// resume falls back to the previous checkpoint and pruning never counts it.
TEST_F(CheckpointStoreTest, UnparsableStateJsonRejected) {
  CheckpointStore store(run_dir_);
  const std::string first = store.save(1, files_for(1));
  for (const std::string& bad : std::vector<std::string>{"", "{\"step\": 2", "[1, 2]",
                                                          std::string(5000, '[') + std::string(5000, ']')}) {
    auto files = files_for(2);
    files.back() = text_file("state.json", bad);
    const std::string second = store.save(2, files);
    std::vector<std::string> rejected;
    EXPECT_EQ(store.latest_valid(&rejected), first) << "state.json '" << bad.substr(0, 20) << "'";
    ASSERT_EQ(rejected.size(), 1u);
    EXPECT_NE(rejected[0].find(second + "/state.json"), std::string::npos) << rejected[0];
    EXPECT_LT(rejected[0].size(), 1000u) << "a hostile file must not be quoted whole";
    EXPECT_EQ(store.prune(1, 0), std::vector<std::string>{}) << "the good checkpoint must not be pruned";
    EXPECT_TRUE(path_exists(first));
  }
}

// A manifest nested thousands of levels deep (a hostile file) is rejected,
// not a crash: nesting is bounded before anything prints it.
TEST_F(CheckpointStoreTest, DeeplyNestedManifestRejected) {
  CheckpointStore store(run_dir_);
  const std::string first = store.save(1, files_for(1));
  const std::string second = store.save(2, files_for(2));
  write_file(second + "/manifest.json", std::string(200000, '[') + std::string(200000, ']'));
  std::vector<std::string> rejected;
  EXPECT_EQ(store.latest_valid(&rejected), first);
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_NE(rejected[0].find("nested deeper than"), std::string::npos) << rejected[0].substr(0, 300);
}

TEST_F(CheckpointStoreTest, NoManifestNoCheckpoint) {
  CheckpointStore store(run_dir_);
  const std::string first = store.save(1, files_for(1));
  const std::string second = store.save(2, files_for(2));
  keel::remove_file(second + "/manifest.json");
  std::vector<std::string> rejected;
  EXPECT_EQ(store.latest_valid(&rejected), first);
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_NE(rejected[0].find(second + "/manifest.json: missing"), std::string::npos) << rejected[0];
  EXPECT_EQ(valid_steps(store), std::vector<int64_t>{1});
}

TEST_F(CheckpointStoreTest, BadManifestRejected) {
  CheckpointStore store(run_dir_);
  const std::string dir = store.save(3, files_for(3));
  const std::string manifest = dir + "/manifest.json";
  const std::string good = read_file(manifest);

  write_file(manifest, good.substr(0, good.size() / 2));
  expect_error([&] { CheckpointStore::verify(dir); }, {manifest, "bad manifest", "not valid JSON"});
  write_file(manifest, std::string(good).replace(good.find("\"step\": 3"), 9, "\"step\": 4"));
  expect_error([&] { CheckpointStore::verify(dir); }, {manifest, "says step 4", "step_00000003"});
  write_file(manifest, std::string(good).replace(good.find("\"version\": 1"), 12, "\"version\": 2"));
  expect_error([&] { CheckpointStore::verify(dir); }, {manifest, "version 2"});
  write_file(manifest, std::string(good).replace(good.find("\"step\": 3"), 9, "\"step\": \"3\""));
  expect_error([&] { CheckpointStore::verify(dir); }, {manifest, "step"});
  write_file(manifest, std::string(good).replace(good.find("state.json"), 10, "../x.json"));
  expect_error([&] { CheckpointStore::verify(dir); }, {manifest, "'../x.json'", "'/'"});
  EXPECT_FALSE(store.latest_valid().has_value());
  write_file(manifest, good);
  EXPECT_EQ(store.latest_valid(), dir);
}

// -------------------------------------------------------- kills during save

// A kill right after each file of a save, and right after the manifest (the
// directory complete but not yet renamed), leaves the previous checkpoint as
// the latest; the half-written temporary directory is ignored, then pruned.
TEST_F(CheckpointStoreTest, KillDuringSaveKeepsPrevious) {
  for (const std::string point : {"model.safetensors", "state.json", "manifest.json"}) {
    SCOPED_TRACE(point);
    const std::string run = run_dir_ + "/" + point;
    CheckpointStore store(run);
    const std::string first = store.save(1, files_for(1));

    int status = run_in_child("save_crash_after:" + point, [&] { store.save(2, files_for(2)); });
    ASSERT_TRUE(killed(status)) << "child status " << status;

    EXPECT_EQ(store.latest_valid(), first);
    EXPECT_EQ(valid_steps(store), std::vector<int64_t>{1});
    EXPECT_FALSE(path_exists(store.step_dir(2)));
    // The dead save's directory is there, with the manifest only if the kill came after it.
    std::vector<std::string> names = entries(store.checkpoints_dir());
    ASSERT_EQ(names.size(), 2u);
    ASSERT_EQ(names[0].rfind(".tmp-step_00000002-", 0), 0u) << names[0];
    EXPECT_EQ(path_exists(store.checkpoints_dir() + "/" + names[0] + "/manifest.json"), point == "manifest.json");

    EXPECT_EQ(store.prune(5, 0).size(), 1u);  // the dead child's temporary directory
    EXPECT_FALSE(has_leftover(store.checkpoints_dir()));
    EXPECT_EQ(store.save(2, files_for(2)), store.step_dir(2));
    EXPECT_EQ(valid_steps(store), (std::vector<int64_t>{1, 2}));
  }
}

// Replacing a step and dying before the replaced copy is deleted: the new
// copy is in place and valid, the old one is a leftover for prune.
TEST_F(CheckpointStoreTest, KillAfterReplacingRenameLeavesNewCopy) {
  CheckpointStore store(run_dir_);
  const std::string dir = store.save(1, files_for(1));
  int status = run_in_child("save_crash_after:rename", [&] { store.save(1, files_for(7)); });
  ASSERT_TRUE(killed(status));
  EXPECT_EQ(store.latest_valid(), dir);
  EXPECT_EQ(read_file(dir + "/state.json"), "{\"step\": 7}\n");
  EXPECT_TRUE(has_leftover(store.checkpoints_dir()));
  store.prune(1, 0);
  EXPECT_FALSE(has_leftover(store.checkpoints_dir()));
}

TEST_F(CheckpointStoreTest, FaultForAnotherFileDoesNotFire) {
  CheckpointStore store(run_dir_);
  int status = run_in_child("save_crash_after:other.bin", [&] { store.save(1, files_for(1)); });
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(store.latest_valid(), store.step_dir(1));
}

TEST_F(CheckpointStoreTest, SavingTheSameStepTwiceReplacesIt) {
  CheckpointStore store(run_dir_);
  store.save(5, files_for(5));
  const std::string dir = store.save(5, {text_file("state.json", "{\"copy\": 2}"), text_file("extra.txt", "x")});
  EXPECT_EQ(read_file(dir + "/state.json"), "{\"copy\": 2}");
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"extra.txt", "manifest.json", "state.json"}));
  EXPECT_EQ(entries(store.checkpoints_dir()), std::vector<std::string>{"step_00000005"});  // old copy deleted
  EXPECT_EQ(store.latest_valid(), dir);
}

TEST_F(CheckpointStoreTest, InstallDirectoryBothModes) {
  for (auto mode : {keel::InstallMode::exchange_if_supported, keel::InstallMode::two_renames}) {
    const std::string base = run_dir_ + (mode == keel::InstallMode::two_renames ? "/two" : "/exchange");
    make_dir(base);
    make_dir(base + "/new");
    make_dir(base + "/final");
    write_file(base + "/new/f", "new");
    write_file(base + "/final/f", "old");
    std::string old = keel::install_directory(base + "/new", base + "/final", base + "/aside", mode);
    EXPECT_EQ(read_file(base + "/final/f"), "new");
    EXPECT_EQ(read_file(old + "/f"), "old");
    EXPECT_EQ(old, mode == keel::InstallMode::two_renames ? base + "/aside" : base + "/new");
    // Nothing to replace: a plain rename.
    make_dir(base + "/third");
    EXPECT_EQ(keel::install_directory(base + "/third", base + "/fourth", base + "/aside2", mode), "");
    EXPECT_TRUE(is_directory(base + "/fourth"));
  }
}

// ------------------------------------------ disk full, unwritable, bad input

TEST_F(CheckpointStoreTest, DiskFullFailsCleanlyAndKeepsPrevious) {
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full";
  CheckpointStore store(run_dir_);
  const std::string first = store.save(1, files_for(1));
  // The model file's path points at /dev/full, where every write fails with ENOSPC.
  std::vector<CheckpointFile> files = files_for(2);
  files[1].write = [](const std::string& p) {
    ASSERT_EQ(symlink("/dev/full", p.c_str()), 0);
    keel::write_safetensors(p, {{"m", torch::zeros({1 << 16})}});
  };
  expect_error([&] { store.save(2, files); },
               {store.step_dir(2), "'optimizer.safetensors'", "No space left on device", "disk is full", "untouched"});
  EXPECT_EQ(store.latest_valid(), first);
  EXPECT_EQ(entries(store.checkpoints_dir()), std::vector<std::string>{"step_00000001"});  // temp dir cleaned up
}

TEST_F(CheckpointStoreTest, WriterFailuresAreReportedAndCleanedUp) {
  CheckpointStore store(run_dir_);
  const std::string first = store.save(1, files_for(1));
  std::vector<CheckpointFile> files = files_for(2);
  files[2].write = [](const std::string&) { throw std::runtime_error("boom"); };
  expect_error([&] { store.save(2, files); }, {store.step_dir(2), "'state.json'", "boom"});
  files[2].write = [](const std::string&) {};
  expect_error([&] { store.save(2, files); }, {"state.json", "without creating the file"});
  EXPECT_EQ(store.latest_valid(), first);
  EXPECT_EQ(entries(store.checkpoints_dir()), std::vector<std::string>{"step_00000001"});
}

TEST_F(CheckpointStoreTest, UnwritableCheckpointsDirectory) {
  // Tests run as root, where modes do not stop writes; a regular file where
  // the directory should be fails for everyone.
  write_file(run_dir_ + "/checkpoints", "not a directory");
  CheckpointStore store(run_dir_);
  expect_error([&] { store.save(1, files_for(1)); }, {run_dir_ + "/checkpoints", "not a directory"});

  CheckpointStore below_file(run_dir_ + "/checkpoints/run");
  expect_error([&] { below_file.save(1, files_for(1)); }, {run_dir_ + "/checkpoints/run", "not a directory"});
  EXPECT_FALSE(below_file.latest_valid().has_value());
}

TEST_F(CheckpointStoreTest, BadFileNamesRejectedBeforeWriting) {
  CheckpointStore store(run_dir_);
  expect_error([&] { store.save(1, {text_file("manifest.json", "x")}); }, {"reserved for the manifest"});
  expect_error([&] { store.save(1, {text_file("a/b", "x")}); }, {"'a/b'", "'/'"});
  expect_error([&] { store.save(1, {text_file(".hidden", "x")}); }, {"'.hidden'"});
  expect_error([&] { store.save(1, {text_file("a", "x"), text_file("a", "y")}); }, {"'a'", "twice"});
  expect_error([&] { store.save(-1, {text_file("a", "x")}); }, {"step must be >= 0"});
  expect_error([&] { store.save(1, {{"a", nullptr}}); }, {"'a'", "no write function"});
  EXPECT_FALSE(path_exists(store.checkpoints_dir()));
}

// -------------------------------------------------------------------- prune

TEST_F(CheckpointStoreTest, PruneKeepsLastAndMilestones) {
  CheckpointStore store(run_dir_);
  for (int64_t s = 10; s <= 100; s += 10)
    store.save(s, {text_file("state.json", "{\"step\": " + std::to_string(s) + "}")});
  store.save(15, {text_file("state.json", "{\"step\": 15}")});
  auto removed = store.prune(/*keep_last=*/2, /*keep_every=*/50);
  EXPECT_EQ(valid_steps(store), (std::vector<int64_t>{50, 90, 100}));
  EXPECT_EQ(removed.size(), 8u);
  EXPECT_EQ(entries(store.checkpoints_dir()).size(), 3u);  // deleted whole, not just un-marked
  EXPECT_TRUE(store.prune(2, 50).empty());                 // idempotent
  store.save(110, {text_file("state.json", "{\"step\": 110}")});
  store.prune(2, 0);
  EXPECT_EQ(valid_steps(store), (std::vector<int64_t>{100, 110}));
}

TEST_F(CheckpointStoreTest, PruneNeverRemovesNewestValid) {
  CheckpointStore store(run_dir_);
  for (int64_t s : {10, 20, 30}) store.save(s, files_for(s));
  // 30 is corrupt but complete in size: it takes no keep_last slot, and 20,
  // the one a resume would use, is kept.
  flip_byte(store.step_dir(30) + "/model.safetensors");
  store.prune(1, 0);
  EXPECT_EQ(store.latest_valid(), store.step_dir(20));
  EXPECT_FALSE(path_exists(store.step_dir(10)));
  EXPECT_TRUE(path_exists(store.step_dir(30)));  // kept for inspection

  // Truncated: not complete, so not counted and not deleted; 20 holds the slot.
  store.save(5, files_for(5));
  shrink_file(store.step_dir(30) + "/state.json", 1);
  store.prune(1, 0);
  EXPECT_EQ(valid_steps(store), std::vector<int64_t>{20});
  EXPECT_TRUE(path_exists(store.step_dir(30)));
}

// A checkpoint whose sizes are right but whose bytes are not takes no
// keep_last slot: the two newest good ones stay (issue 20, defect 12).
TEST_F(CheckpointStoreTest, CorruptCheckpointTakesNoKeepLastSlot) {
  CheckpointStore store(run_dir_);
  for (int64_t s : {10, 20, 30}) store.save(s, files_for(s));
  flip_byte(store.step_dir(30) + "/model.safetensors");
  EXPECT_TRUE(store.prune(2, 0).empty());
  EXPECT_EQ(valid_steps(store), (std::vector<int64_t>{10, 20}));
  EXPECT_TRUE(path_exists(store.step_dir(30)));  // kept for inspection
  store.save(40, files_for(40));
  store.prune(2, 0);
  EXPECT_EQ(valid_steps(store), (std::vector<int64_t>{20, 40}));
  EXPECT_TRUE(path_exists(store.step_dir(30)));
}

// A prune killed after deleting a manifest leaves a directory that no longer
// counts; the next prune finishes the job.
TEST_F(CheckpointStoreTest, KillDuringPruneLeavesNoFalseCheckpoint) {
  CheckpointStore store(run_dir_);
  for (int64_t s : {10, 20, 30}) store.save(s, files_for(s));
  int status = run_in_child("prune_crash_after:unmark", [&] { store.prune(1, 0); });
  ASSERT_TRUE(killed(status));
  // Newest first: 20 was the first to go, un-marked but its files still there.
  EXPECT_TRUE(path_exists(store.step_dir(20) + "/model.safetensors"));
  EXPECT_FALSE(path_exists(store.step_dir(20) + "/manifest.json"));
  EXPECT_EQ(valid_steps(store), (std::vector<int64_t>{10, 30}));
  EXPECT_EQ(store.latest_valid(), store.step_dir(30));
  store.prune(1, 0);
  EXPECT_EQ(entries(store.checkpoints_dir()), std::vector<std::string>{"step_00000030"});
}

TEST_F(CheckpointStoreTest, StaleTempDirsIgnoredThenPruned) {
  CheckpointStore store(run_dir_);
  const std::string ten = store.save(10, files_for(10));
  const std::string ckpt = store.checkpoints_dir();
  // A dead save of a newer step, complete down to the manifest: still ignored.
  const std::string dead_tmp = ckpt + "/.tmp-step_00000050-" + std::to_string(dead_pid());
  copy_dir(ten, dead_tmp);
  const std::string dead_old = ckpt + "/.old-step_00000010-" + std::to_string(dead_pid());
  copy_dir(ten, dead_old);
  // A save in progress in a live process (our parent) must survive.
  const std::string live_tmp = ckpt + "/.tmp-step_00000060-" + std::to_string(getppid());
  make_dir(live_tmp);

  EXPECT_EQ(store.latest_valid(), ten);
  EXPECT_EQ(valid_steps(store), std::vector<int64_t>{10});
  auto removed = store.prune(3, 0);
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{dead_old, dead_tmp}));
  EXPECT_TRUE(path_exists(live_tmp));
  EXPECT_EQ(store.latest_valid(), ten);
}

TEST_F(CheckpointStoreTest, PruneArguments) {
  CheckpointStore store(run_dir_);
  EXPECT_TRUE(store.prune(1, 0).empty());  // nothing saved yet
  expect_error([&] { store.prune(0, 0); }, {"keep_last must be >= 1"});
}

}  // namespace
