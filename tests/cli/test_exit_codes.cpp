// The exit-code contract (src/util/error.h, docs/reliability.md#exit-codes),
// checked through the binary: what a job script or a scheduler sees. Codes
// that other suites already reach are cross-referenced, not rerun:
//   2  everywhere (config, data, checkpoint, run-directory tests)
//   3  TrainCli.DivergenceIsMarkedAndCanStopTheRun, RewindsStopAtMaxRewinds,
//      LogitInstabilityIsFlaggedAndStopsOnlyWhenAsked, the non-finite tests
//   4  DataParallel.KilledWorkerEndsTheOtherWithinTheTimeout (a failed peer),
//      the full-disk tests of tests/train and tests/util (errno decides)
//   143 TrainCli's SIGTERM test, SweepCli.SignalStopsTheSweepResumably
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "test_util.h"
#include "util/fs.h"

using keel_test::read_file;
using keel_test::run_keel;
using keel_test::spawn_keel;
using keel_test::write_file;

namespace {

std::string g_dir;

// Waits (at most `seconds`) until `path` holds `text`.
bool wait_for_text(const std::string &path, const std::string &text,
                   int seconds) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (read_file(path).find(text) != std::string::npos)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// The exit code of a process that exited; 1000 + the signal if one killed it
// (keel's own 143 after a clean stop must not pass for a SIGTERM death).
int reap(int pid) {
  bool killed = false;
  const int code = keel_test::wait_exit(pid, &killed);
  return killed ? 1000 + code - 128 : code;
}

class ExitCodes : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    g_dir = keel_test::make_temp_dir("exit_codes");
    write_file(g_dir + "/corpus.txt", keel_test::make_sentence_corpus(5, 300));
    write_file(g_dir + "/base.yaml",
               "model: {vocab_size: 320, max_seq_len: 32, d_model: 32, "
               "n_layers: 1, n_heads: 2, n_kv_heads: 1}\n"
               "data: {dir: " +
                   g_dir + "/data, sources: [" + g_dir +
                   "/corpus.txt], doc_separator: '%', "
                   "val_fraction: 0.1}\n"
                   "train: {max_steps: 6, batch_size: 4, lr: 1e-3, "
                   "warmup_steps: 1, log_every: 1, eval_every: 0, "
                   "threads: 1}\n"
                   "checkpoint: {every: 3, keep_last: 2}\n"
                   "monitor: {every: 0}\n");
  }
  static void TearDownTestSuite() { keel::remove_tree(g_dir); }
  static std::string train(const std::string &name,
                           const std::string &extra = "") {
    return "train " + g_dir + "/base.yaml --set run.out_dir=" + g_dir +
           "/runs --set run.name=" + name + " " + extra;
  }
};

TEST_F(ExitCodes, HelpPrintsTheTable) {
  std::string out;
  ASSERT_EQ(run_keel("--help", &out), 0) << out;
  for (const char *line :
       {"Exit codes", "  0    done", "  1    internal error",
        "  2    bad input", "  3    training stopped by its own rule",
        "  4    environment", "  5    keel sweep", "128+N",
        "130 SIGINT, 143 SIGTERM"})
    EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
}

TEST_F(ExitCodes, FinishedAndAskedForStopsAreZeroBadInputIsTwo) {
  std::string out;
  EXPECT_EQ(run_keel(train("done", "--stop-after-step 2"), &out), 0) << out;
  EXPECT_EQ(run_keel(train("done", "--resume auto"), &out), 0) << out;
  EXPECT_EQ(run_keel(train("bad", "--set train.lr=-1"), &out), 2) << out;
  EXPECT_NE(out.find("train.lr"), std::string::npos) << out;
}

// SIGINT: the step finishes, a checkpoint and the summary are written, and
// the code says "interrupted" (130), so `keel train && next` does not go on.
TEST_F(ExitCodes, SigintStopsTrainingCleanlyWith130) {
  const std::string log = g_dir + "/sigint.log";
  const std::string run = g_dir + "/runs/sigint";
  const pid_t pid = spawn_keel(
      {"train", g_dir + "/base.yaml", "--set", "run.out_dir=" + g_dir + "/runs",
       "--set", "run.name=sigint", "--set", "train.max_steps=100000", "--set",
       "checkpoint.every=0"},
      log);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_text(run + "/metrics.jsonl", "\"step\"", 120))
      << read_file(log);
  kill(pid, SIGINT);
  EXPECT_EQ(reap(pid), 128 + SIGINT) << read_file(log);
  const std::string summary = read_file(run + "/summary.json");
  EXPECT_NE(summary.find("\"stopped_by\": \"signal\""), std::string::npos)
      << summary;
  EXPECT_FALSE(keel::list_directory(run + "/checkpoints").empty())
      << "no checkpoint written on the way out";
}

// The threads that compute never take SIGINT or SIGTERM: every keel thread
// blocks both, and one thread of its own ("keel-signals") waits for them.
// oneDNN's JIT GEMM kernels point the stack pointer into the heap while they
// run, so a signal frame written on a computing thread corrupts the heap
// (src/util/stop_signal.h, route_stop_signals).
TEST_F(ExitCodes, StopSignalsAreBlockedInEveryComputingThread) {
  const std::string run = g_dir + "/runs/masks";
  const pid_t pid = spawn_keel({"train", g_dir + "/base.yaml", "--set", "run.out_dir=" + g_dir + "/runs", "--set",
                                "run.name=masks", "--set", "train.max_steps=100000", "--set", "train.threads=2"},
                               g_dir + "/masks.log");
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_text(run + "/metrics.jsonl", "\"step\"", 120)) << read_file(g_dir + "/masks.log");
  const uint64_t stop_bits = (1ull << (SIGINT - 1)) | (1ull << (SIGTERM - 1));
  int computing = 0, waiting = 0;
  for (const auto &tid : keel::list_directory("/proc/" + std::to_string(pid) + "/task")) {
    const std::string status = "\n" + read_file("/proc/" + std::to_string(pid) + "/task/" + tid + "/status");
    const auto field = [&](const std::string &key) {  // "\nKey:\tvalue\n"
      const size_t at = status.find("\n" + key + ":\t");
      if (at == std::string::npos) return std::string();
      const size_t begin = at + key.size() + 3;
      return status.substr(begin, status.find('\n', begin) - begin);
    };
    const std::string name = field("Name");
    if (name == "keel-signals") {
      ++waiting;
    } else if (name == "keel") {  // the main thread, OpenMP's, the data loader's
      ++computing;
      EXPECT_EQ(std::stoull(field("SigBlk"), nullptr, 16) & stop_bits, stop_bits) << "thread " << tid << "\n" << status;
    }
  }
  kill(pid, SIGINT);
  EXPECT_EQ(reap(pid), 128 + SIGINT) << read_file(g_dir + "/masks.log");
  EXPECT_GE(computing, 2);  // main and at least one more (threads 2)
  EXPECT_EQ(waiting, 1);
}

// A stream of SIGINTs, one every 50 us through a step of a few tens of ms,
// still ends in a clean stop. With the signals landing on the computing
// threads this died of heap corruption in 6 runs of 6.
TEST_F(ExitCodes, AStreamOfSigintsStillStopsCleanly) {
  const std::string run = g_dir + "/runs/stream";
  const pid_t pid = spawn_keel({"train", g_dir + "/base.yaml", "--set", "run.out_dir=" + g_dir + "/runs", "--set",
                                "run.name=stream", "--set", "train.max_steps=100000", "--set", "checkpoint.every=0",
                                "--set", "model.d_model=128", "--set", "model.max_seq_len=64", "--set",
                                "train.batch_size=16"},
                               g_dir + "/stream.log");
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_text(run + "/metrics.jsonl", "\"step\"", 120)) << read_file(g_dir + "/stream.log");
  int status = 0, sent = 0;
  while (waitpid(pid, &status, WNOHANG) == 0 && sent < 200000) {
    kill(pid, SIGINT);
    ++sent;
    usleep(50);
  }
  ASSERT_LT(sent, 200000) << "still running after " << sent << " signals";
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status) << " after " << sent << " SIGINTs\n"
                                 << read_file(g_dir + "/stream.log");
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT) << read_file(g_dir + "/stream.log");
  EXPECT_GT(sent, 100);  // the step outlasted many of them
  EXPECT_NE(read_file(run + "/summary.json").find("\"stopped_by\": \"signal\""), std::string::npos);
}

// A sweep whose points fail (killed, not diverged): 5, and each failure named.
TEST_F(ExitCodes, SweepWithFailedPointsIsFive) {
  write_file(g_dir + "/fails.yaml",
             "base: base.yaml\nout_dir: " + g_dir +
                 "/fails\ngrid:\n  train.lr: [1e-3, 2e-3]\n");
  setenv("KEEL_FAULT_INJECT", "kill_rank_at_step:0:2", 1);
  std::string out;
  const int rc = run_keel("sweep " + g_dir + "/fails.yaml", &out);
  unsetenv("KEEL_FAULT_INJECT");
  EXPECT_EQ(rc, 5) << out;
  EXPECT_NE(out.find("2 failed"), std::string::npos) << out;
  EXPECT_NE(out.find("exit code 137"), std::string::npos)
      << out; // each point's own code
}

// SIGTERM during `keel prepare`: 143, no data.dir, no staging directory left.
TEST_F(ExitCodes, SigtermStopsPrepareAndLeavesNothingHalfMade) {
  // Big enough that encoding outlasts the signal: it arrives while the
  // tokenizer trains, and encoding stops at its first chunk.
  std::string big;
  for (unsigned seed = 0; big.size() < (8u << 20); ++seed)
    big += keel_test::make_sentence_corpus(seed, 500);
  write_file(g_dir + "/big.txt", big);
  const std::string data = g_dir + "/prep/data";
  keel::ensure_directory(g_dir + "/prep");
  const std::string log = g_dir + "/prepare.log";
  const pid_t pid = spawn_keel(
      {"prepare", g_dir + "/base.yaml", "--set", "data.dir=" + data, "--set",
       "data.sources=[" + g_dir + "/big.txt]", "--set", "data.threads=1"},
      log);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for_text(log, "tokenizer", 60)) << read_file(log);
  kill(pid, SIGTERM);
  const int rc = reap(pid);
  const std::string out = read_file(log);
  EXPECT_EQ(rc, 128 + SIGTERM) << out;
  EXPECT_NE(out.find("keel: interrupted: SIGTERM during"), std::string::npos)
      << out;
  EXPECT_FALSE(keel::path_exists(data)) << "a half-made data.dir";
  for (const auto &name : keel::list_directory(g_dir + "/prep"))
    EXPECT_EQ(name.find("data.tmp-"), std::string::npos)
        << "staging directory left behind: " << name;
  // The same command afterwards builds it whole.
  std::string again;
  EXPECT_EQ(run_keel("prepare " + g_dir + "/base.yaml --set data.dir=" + data +
                         " --set data.sources=[" + g_dir +
                         "/corpus.txt] --quiet",
                     &again),
            0)
      << again;
}

} // namespace
