// `keel replay` end to end on a tiny model (issue 34, part 4): a spike
// planted in the data (the loss x10 at one data batch) comes back in the
// identical branch and vanishes when its batch is skipped; one planted in the
// optimizer state (first moments x1000 just before a checkpoint) comes back in
// both. The run itself is never written to, the higher-precision branch of
// an fp32 CPU run trains in fp64, and bad input exits 2 naming what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "config/config.h"
#include "replay/replay.h"
#include "test_util.h"
#include "util/error.h"
#include "util/fs.h"

using keel_test::read_file;
using keel_test::run_keel;
using keel_test::write_file;

namespace {

std::string g_dir;

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_file(path)); }

// A 40-step run with checkpoints every 10 steps and a spike detector that
// is active after 8 logged losses; `fault` planted through KEEL_FAULT_INJECT.
std::string train_run(const std::string& name, const std::string& fault) {
  setenv("KEEL_FAULT_INJECT", fault.c_str(), 1);
  std::string log;
  const int rc = run_keel("train " + g_dir + "/base.yaml --set run.name=" + name, &log);
  unsetenv("KEEL_FAULT_INJECT");
  EXPECT_EQ(rc, 0) << log;
  return g_dir + "/runs/" + name;
}

const nlohmann::json& branch(const nlohmann::json& replay, const std::string& name) {
  for (const auto& b : replay["branches"])
    if (b["name"] == name) return b;
  static const nlohmann::json none;
  ADD_FAILURE() << "no branch " << name << " in " << replay.dump();
  return none;
}

class ReplayCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_dir = keel_test::make_temp_dir("replay_cli");
    write_file(g_dir + "/corpus.txt", keel_test::make_sentence_corpus(5, 300));
    write_file(g_dir + "/base.yaml",
               "model: {vocab_size: 320, max_seq_len: 32, d_model: 32, n_layers: 1, n_heads: 2, n_kv_heads: 1}\n"
               "data: {dir: " + g_dir + "/data, sources: [" + g_dir + "/corpus.txt], doc_separator: '%', "
               "val_fraction: 0.1}\n"
               "train: {max_steps: 40, batch_size: 4, lr: 3e-3, min_lr: 1e-4, warmup_steps: 2, log_every: 1, "
               "eval_every: 20, eval_batches: 1}\n"
               "checkpoint: {every: 10, keep_last: 5}\n"
               "monitor: {every: 5, sequences: 1, spike_window: 16, spike_warmup: 8}\n"
               "run: {out_dir: " + g_dir + "/runs}\n");
  }
  static void TearDownTestSuite() { keel::remove_tree(g_dir); }
};

TEST_F(ReplayCli, ADataSpikeComesBackIdenticallyAndGoesWithItsBatch) {
  const std::string run = train_run("data", "loss_x10_at_step:25");
  ASSERT_NE(read_file(run + "/spikes.jsonl").find("\"signal\":\"loss\",\"std\""), std::string::npos);
  const std::string metrics_before = read_file(run + "/metrics.jsonl");
  const auto checkpoints_before = keel::list_directory(run + "/checkpoints");
  // The bad batch is still there for the branches: the fault follows data batch 25.
  setenv("KEEL_FAULT_INJECT", "loss_x10_at_step:25", 1);
  std::string log;
  const int rc = run_keel("replay " + run + " --step 25 --steps 3", &log);
  unsetenv("KEEL_FAULT_INJECT");
  ASSERT_EQ(rc, 0) << log;
  const std::string out = run + "/branches/replay-25";
  const auto replay = read_json(out + "/replay.json");
  EXPECT_EQ(replay["checkpoint_step"], 20);
  EXPECT_EQ(replay["signals"], nlohmann::json({"loss", "grad_norm"}));
  EXPECT_TRUE(branch(replay, "identical")["reproduced"].get<bool>()) << replay.dump(1);
  EXPECT_FALSE(branch(replay, "skip")["reproduced"].get<bool>()) << replay.dump(1);
  EXPECT_EQ(branch(replay, "skip")["what"], "5 batch(es) after step 20 skipped (through the spike's)");
  // The identical branch is the run again, to the last digit logged.
  const double run_loss = replay["losses"]["original"]["25"], identical = branch(replay, "identical")["loss_at_step"];
  EXPECT_DOUBLE_EQ(identical, run_loss);
  EXPECT_LT(branch(replay, "skip")["loss_at_step"].get<double>(), run_loss / 5);
  // The run recorded what "auto" became here; fp64 for an fp32 CPU run: a
  // real fp64 run, whose loss agrees with fp32's.
  const auto compute = read_json(run + "/compute.json");
  EXPECT_EQ(compute["device"], "cpu");
  EXPECT_EQ(compute["precision"], "fp32");
  EXPECT_EQ(branch(replay, "precision")["what"], "fp64 instead of fp32 (CPU): weights, optimizer state and every computation");
  EXPECT_NE(read_file(out + "/precision/train.log").find(", fp64 "), std::string::npos);
  EXPECT_NEAR(branch(replay, "precision")["loss_at_step"].get<double>(), run_loss, 1e-3 * run_loss);
  for (const char* b : {"identical", "skip", "reorder", "lr_half", "precision"})
    EXPECT_TRUE(keel::path_exists(out + "/" + b + "/summary.json")) << b;
  const std::string md = read_file(out + "/replay.md");
  EXPECT_NE(md.find("| identical | nothing: the run's batches, settings and state | **yes** |"), std::string::npos) << md;
  EXPECT_NE(md.find("removed it: the data caused it"), std::string::npos) << md;
  EXPECT_TRUE(keel::path_exists(out + "/plots/replay.png"));
  // The run itself is untouched.
  EXPECT_EQ(read_file(run + "/metrics.jsonl"), metrics_before);
  EXPECT_EQ(keel::list_directory(run + "/checkpoints"), checkpoints_before);
}

TEST_F(ReplayCli, AnOptimizerStateSpikeComesBackInBothBranches) {
  // The moments grow after step 20's update, so checkpoint 20 holds them.
  const std::string run = train_run("state", "momentum_x1000_at_step:20");
  const std::string spikes = read_file(run + "/spikes.jsonl");
  ASSERT_NE(spikes.find("\"step\":22"), std::string::npos) << spikes;
  std::string log;
  ASSERT_EQ(run_keel("replay " + run + " --step 22 --steps 2 --branches identical,skip --from 20 --no-plots", &log), 0)
      << log;
  const auto replay = read_json(run + "/branches/replay-22/replay.json");
  ASSERT_EQ(replay["branches"].size(), 2u);
  EXPECT_TRUE(branch(replay, "identical")["reproduced"].get<bool>()) << replay.dump(1);
  EXPECT_TRUE(branch(replay, "skip")["reproduced"].get<bool>()) << replay.dump(1);
  EXPECT_NE(read_file(run + "/branches/replay-22/replay.md").find("its cause was already in the state at the checkpoint"),
            std::string::npos);
  // A second replay replaces its own branches, and only those.
  write_file(run + "/branches/replay-22/notes.txt", "mine");
  ASSERT_EQ(run_keel("replay " + run + " --step 22 --steps 1 --branches identical --no-plots", &log), 0) << log;
  EXPECT_EQ(read_file(run + "/branches/replay-22/notes.txt"), "mine");
  EXPECT_EQ(read_json(run + "/branches/replay-22/replay.json")["branches"].size(), 1u);
}

const keel::ReplayBranch& precision_branch(const std::vector<keel::ReplayBranch>& branches) {
  for (const auto& b : branches)
    if (b.name == "precision") return b;
  throw std::runtime_error("no precision branch");
}

// A run's config keeps train.device / train.precision "auto"; the branch must
// follow what the run computed in (its compute.json). Before, a GPU run with
// "auto" got an fp64 branch, which keel refuses on CUDA.
TEST(ReplayBranches, ThePrecisionBranchFollowsWhatAutoResolvedTo) {
  keel::Config cfg;  // device and precision auto
  ASSERT_EQ(cfg.train.device, keel::DeviceChoice::automatic);
  ASSERT_EQ(cfg.train.precision, keel::Precision::automatic);
  auto on = [&](bool known, bool cuda, const char* precision) {
    keel::RunCompute c;
    c.known = known, c.cuda = cuda, c.precision = precision;
    return precision_branch(keel::replay_branches(cfg, c, 10, 25, 0, {"precision"}));
  };
  const auto gpu_bf16 = on(true, true, "bf16");
  EXPECT_EQ(gpu_bf16.unavailable, "");
  EXPECT_EQ(gpu_bf16.sets, std::vector<std::string>{"train.precision=fp32"});
  EXPECT_NE(on(true, true, "fp32").unavailable.find("fp32 on a GPU"), std::string::npos);
  EXPECT_EQ(on(true, false, "fp32").sets, std::vector<std::string>{"train.precision=fp64"});
  EXPECT_EQ(on(true, false, "bf16").sets, std::vector<std::string>{"train.precision=fp32"});
  EXPECT_EQ(on(true, false, "fp64").unavailable, "the run is fp64 already");
  // A run without the record: no guess for "auto", a reason instead.
  EXPECT_NE(on(false, false, "").unavailable.find("no compute.json"), std::string::npos);
  // An explicit config needs no record.
  cfg.train.precision = keel::Precision::bf16;
  EXPECT_EQ(on(false, false, "").sets, std::vector<std::string>{"train.precision=fp32"});
}

TEST(ReplayBranches, AHostileComputeRecordIsRefusedNamingTheFile) {
  const std::string dir = keel_test::make_temp_dir("replay_compute");
  EXPECT_FALSE(keel::read_run_compute(dir).known);
  write_file(dir + "/compute.json", "{\"device\": \"tpu\", \"precision\": \"fp32\"}");
  try {
    keel::read_run_compute(dir);
    ADD_FAILURE() << "an unknown device was accepted";
  } catch (const keel::RunDirError& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/compute.json"), std::string::npos) << e.what();
  }
  write_file(dir + "/compute.json", std::string(1 << 17, '['));  // deep and too large: bounded, not parsed
  EXPECT_THROW(keel::read_run_compute(dir), std::exception);
  write_file(dir + "/compute.json", "[[[[");
  EXPECT_THROW(keel::read_run_compute(dir), keel::RunDirError);
  keel::remove_tree(dir);
}

// keel replay --numerics (issue 54): a bf16 run's window against fp32 and
// fp64, layer by layer. Untouched, no quantity differs past the threshold;
// with an fp16 overflow planted in block 1's output of the bf16 run, the
// diff names that block at the window's first step, and block 0 stays close.
TEST_F(ReplayCli, NumericsDiffFindsAPlantedOverflowInItsBlock) {
  std::string out;
  ASSERT_EQ(run_keel("train " + g_dir + "/base.yaml --set run.name=bf16 --set train.precision=bf16 "
                     "--set model.n_layers=3",
                     &out),
            0)
      << out;
  const std::string run = g_dir + "/runs/bf16";
  ASSERT_EQ(run_keel("replay " + run + " --step 22 --numerics --steps 1", &out), 0) << out;
  auto report = read_json(run + "/branches/numerics-22/numerics.json");
  EXPECT_EQ(report["precision"], "bf16");
  EXPECT_EQ(report["compared_with"], nlohmann::json::array({"bf16", "fp32", "fp64"}));
  EXPECT_TRUE(report["first_difference"].is_null()) << report["first_difference"].dump();
  ASSERT_EQ(report["steps"].size(), 3u) << "steps 21 (after the checkpoint of step 20) to 23";
  const auto& s21 = report["steps"][0];
  EXPECT_NEAR(s21["loss"]["bf16"].get<double>(), s21["loss"]["fp32"].get<double>(), 1e-2);
  EXPECT_NEAR(s21["loss"]["fp32"].get<double>(), s21["loss"]["fp64"].get<double>(), 1e-5);
  setenv("KEEL_FAULT_INJECT", "fp16_overflow_block:1", 1);
  const int rc = run_keel("replay " + run + " --step 22 --numerics --steps 1", &out);
  unsetenv("KEEL_FAULT_INJECT");
  ASSERT_EQ(rc, 0) << out;
  report = read_json(run + "/branches/numerics-22/numerics.json");
  const auto& first = report["first_difference"];
  ASSERT_TRUE(first.is_object()) << report.dump();
  EXPECT_EQ(first["step"], 21);
  EXPECT_EQ(first["quantity"], "block1.out");
  EXPECT_EQ(first["against"], "fp32");
  for (const auto& d : report["steps"][0]["vs_fp32"])
    if (d["quantity"] == "block0.out") EXPECT_LT(d["relative_difference"].get<double>(), 0.1) << d.dump();
  EXPECT_NE(read_file(run + "/branches/numerics-22/numerics.md").find("**First difference: step 21, block1.out**"),
            std::string::npos);
  // An fp64 run has nothing higher to compare with.
  ASSERT_EQ(run_keel("train " + g_dir + "/base.yaml --set run.name=f64 --set train.precision=fp64", &out), 0) << out;
  EXPECT_EQ(run_keel("replay " + g_dir + "/runs/f64 --step 22 --numerics", &out), 2) << out;
  EXPECT_NE(out.find("trained in fp64 already"), std::string::npos) << out;
}

TEST_F(ReplayCli, BadInputExitsTwoNamingWhatIsWrong) {
  const std::string run = train_run("plain", "none:0");
  std::string log;
  EXPECT_EQ(run_keel("replay " + run + " --step 5", &log), 2);  // the first checkpoint is step 10's
  EXPECT_NE(log.find("no valid checkpoint of " + run + " before step 5 (checkpoints at: 10, 20, 30, 40)"),
            std::string::npos) << log;
  EXPECT_EQ(run_keel("replay " + run + " --step 25 --from 15", &log), 2);
  EXPECT_NE(log.find("--from 15: " + run + " has no valid checkpoint of that step before step 25"), std::string::npos)
      << log;
  EXPECT_EQ(run_keel("replay " + run + " --step 99", &log), 2);
  EXPECT_NE(log.find("past the run's train.max_steps (40)"), std::string::npos) << log;
  EXPECT_EQ(run_keel("replay " + run + " --step 25 --branches identical,sideways", &log), 2);
  EXPECT_NE(log.find("unknown branch 'sideways'"), std::string::npos) << log;
  EXPECT_EQ(run_keel("replay " + g_dir + " --step 25", &log), 2);
  EXPECT_NE(log.find("is not a keel run directory (no config.yaml)"), std::string::npos) << log;
  EXPECT_FALSE(keel::path_exists(run + "/branches"));
  // keel train's fork options need a named checkpoint, and say which is wrong.
  EXPECT_EQ(run_keel("train " + g_dir + "/base.yaml --set run.name=f --fork-change train.lr", &log), 2);
  EXPECT_NE(log.find("need --resume PATH"), std::string::npos) << log;
  EXPECT_EQ(run_keel("train " + g_dir + "/base.yaml --set run.name=f --resume " + run + "/checkpoints/step_00000010 "
                     "--fork-skip 10:0 --fork-change train.lrr", &log), 2);
  EXPECT_NE(log.find("--fork-skip: entry 0 '10:0' is not AFTER:COUNT"), std::string::npos) << log;
  EXPECT_NE(log.find("--fork-change train.lrr: unknown config key"), std::string::npos) << log;
}

}  // namespace
