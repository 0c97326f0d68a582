// End-to-end `keel train` on a tiny generated corpus: loss falls, exact
// resume, signals, kill during a save, corrupted checkpoints, refused
// architecture changes, non-finite policies, accumulation equivalence, and
// the run-directory guard.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "checkpoint/safetensors.h"
#include "test_util.h"
#include "util/dir_lock.h"
#include "util/fs.h"

using keel_test::run_keel;

namespace {

std::string g_dir;  // temp dir with corpus, prepared data and base config

std::string base_config() { return g_dir + "/base.yaml"; }

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

struct Metric {
  int64_t step;
  double loss;
};

std::vector<Metric> read_metrics(const std::string& run) {
  std::vector<Metric> out;
  std::ifstream in(run + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    out.push_back({j["step"].get<int64_t>(), j["loss"].get<double>()});
  }
  return out;
}

bool read_metrics_size_ok(const std::string& run) {
  std::ifstream in(run + "/metrics.jsonl");
  std::string line;
  return static_cast<bool>(std::getline(in, line)) && !line.empty();
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Common overrides: tiny model, log every step, checkpoint every 4 steps.
std::string args(const std::string& name, const std::string& extra = "") {
  return "train " + base_config() + " --set run.name=" + name + " --set run.out_dir=" + g_dir + "/runs " + extra;
}

std::string run_path(const std::string& name) { return g_dir + "/runs/" + name; }

class TrainCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_dir = keel_test::make_temp_dir("train_cli");
    write(g_dir + "/corpus.txt", keel_test::make_sentence_corpus(7, 400));
    write(base_config(),
          "model: {vocab_size: 320, max_seq_len: 32, d_model: 32, n_layers: 2, n_heads: 2, n_kv_heads: 1}\n"
          "data: {dir: " + g_dir + "/data, sources: [" + g_dir + "/corpus.txt], doc_separator: '%', "
          "val_fraction: 0.1}\n"
          "train: {max_steps: 12, batch_size: 4, lr: 3.0e-3, warmup_steps: 2, log_every: 1, eval_every: 6, "
          "eval_batches: 2, threads: 1}\n"
          "checkpoint: {every: 4, keep_last: 5}\n"
          "monitor: {every: 3, sequences: 2}\n");
    std::string out;
    ASSERT_EQ(run_keel("prepare " + base_config() + " --quiet", &out), 0) << out;
  }
  static void TearDownTestSuite() { keel::remove_tree(g_dir); }
};

}  // namespace

TEST_F(TrainCli, LossFallsAndFilesAreWritten) {
  std::string out;
  ASSERT_EQ(run_keel(args("falls", "--set train.max_steps=40 --set checkpoint.every=0 "
                                   "--set monitor.layer_grad_norms=true"),
                     &out),
            0)
      << out;
  auto m = read_metrics(run_path("falls"));
  ASSERT_EQ(m.size(), 40u);
  EXPECT_LT(m.back().loss, m.front().loss - 1.5) << out;
  auto summary = read_json(run_path("falls") + "/summary.json");
  EXPECT_EQ(summary["stopped_by"], "completed");
  EXPECT_EQ(summary["steps"], 40);
  EXPECT_TRUE(summary["final_val_loss"].is_number());
  EXPECT_TRUE(keel::path_exists(run_path("falls") + "/config.yaml"));
  EXPECT_TRUE(keel::path_exists(run_path("falls") + "/train.log"));
  EXPECT_NE(out.find("MFU"), std::string::npos) << out;
  std::ifstream in(run_path("falls") + "/metrics.jsonl");
  std::string first;
  std::getline(in, first);
  auto j = nlohmann::json::parse(first);
  for (const char* key : {"step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s", "step_ms"})
    EXPECT_TRUE(j.contains(key)) << key;
  // Monitoring (every 3 steps): per-layer attention and output-logit statistics;
  // parameter norm and update ratio on every logged step.
  EXPECT_TRUE(j.contains("param_norm"));
  ASSERT_EQ(j["layer_grad_norms"]["blocks"].size(), 2u);
  EXPECT_GT(j["layer_grad_norms"]["blocks"][0].get<double>(), 0.0);
  EXPECT_GT(j["layer_grad_norms"]["other"].get<double>(), 0.0);
  {  // the per-layer norms add up (in squares) to the global one
    double sq = std::pow(j["layer_grad_norms"]["other"].get<double>(), 2);
    for (const auto& b : j["layer_grad_norms"]["blocks"]) sq += std::pow(b.get<double>(), 2);
    EXPECT_NEAR(std::sqrt(sq), j["grad_norm"].get<double>(), 1e-4 * j["grad_norm"].get<double>());
  }
  EXPECT_GT(j["update_ratio"].get<double>(), 0.0);
  std::string line;
  std::getline(in, line);
  std::getline(in, line);
  auto third = nlohmann::json::parse(line);
  ASSERT_EQ(third["step"], 3);
  ASSERT_EQ(third["attn"].size(), 2u);
  EXPECT_GT(third["attn"][0]["max_logit"].get<double>(), 0.0);
  EXPECT_GT(third["output"]["mean_log_z"].get<double>(), 0.0);
  // Per-matrix optimizer statistics and activations on monitor steps (monitor.param_stats).
  ASSERT_TRUE(third.contains("params")) << line;
  const auto& wq = third["params"]["blocks.1.attn.wq"];
  EXPECT_GT(wq["update_rms"].get<double>(), 0.0);
  EXPECT_GT(wq["m_rms"].get<double>(), 0.0);
  EXPECT_GE(wq["v_below_eps"].get<double>(), 0.0);
  EXPECT_NEAR(wq["update_ratio"].get<double>(), wq["update_rms"].get<double>() / wq["weight_rms"].get<double>(), 1e-9);
  EXPECT_GT(third["activations"]["block1.out"]["max_abs"].get<double>(),
            third["activations"]["block1.out"]["rms"].get<double>());
  EXPECT_EQ(read_json(run_path("falls") + "/summary.json")["max_attn_logit_per_layer"].size(), 2u);
  // Sampling is deterministic for a seed.
  std::string s1, s2, s3;
  ASSERT_EQ(run_keel("sample " + run_path("falls") + " --prompt 'The cat' --tokens 12 --seed 5", &s1), 0) << s1;
  run_keel("sample " + run_path("falls") + " --prompt 'The cat' --tokens 12 --seed 5", &s2);
  run_keel("sample " + run_path("falls") + " --prompt 'The cat' --tokens 12 --seed 6", &s3);
  EXPECT_EQ(s1, s2);
  EXPECT_EQ(s1.rfind("The cat", 0), 0u) << s1;
}

TEST_F(TrainCli, ResumeIsBitExact) {
  std::string out;
  ASSERT_EQ(run_keel(args("straight"), &out), 0) << out;
  ASSERT_EQ(run_keel(args("halves", "--stop-after-step 6"), &out), 0) << out;
  EXPECT_EQ(read_json(run_path("halves") + "/summary.json")["steps"], 6);
  ASSERT_EQ(run_keel(args("halves", "--resume auto"), &out), 0) << out;
  EXPECT_NE(out.find("resumed from"), std::string::npos) << out;
  auto a = read_metrics(run_path("straight")), b = read_metrics(run_path("halves"));
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].step, b[i].step);
    EXPECT_EQ(a[i].loss, b[i].loss) << "step " << a[i].step;  // exact equality, not a tolerance
  }
}

// Muon (issue 21): its momentum is part of the checkpoint, so a run stopped
// and resumed equals the uninterrupted one bit for bit; the settings table
// says which parameters each part trains.
TEST_F(TrainCli, MuonResumeIsBitExact) {
  const std::string muon = "--set train.optimizer=muon --set train.lr=0.02 --set train.muon.split_qkv_heads=true ";
  std::string out;
  ASSERT_EQ(run_keel(args("muon_straight", muon), &out), 0) << out;
  EXPECT_NE(out.find("Muon on 14 matrices"), std::string::npos) << out;
  EXPECT_NE(out.find("AdamW on "), std::string::npos) << out;
  ASSERT_EQ(run_keel(args("muon_halves", muon + "--stop-after-step 6"), &out), 0) << out;
  std::set<std::string> names;
  for (const auto& [name, t] :
       keel::read_safetensors(run_path("muon_halves") + "/checkpoints/step_00000006/optimizer.safetensors"))
    names.insert(name);
  EXPECT_TRUE(names.count("muon_momentum.blocks.0.attn.wq")) << out;
  EXPECT_TRUE(names.count("exp_avg.wte")) << out;
  EXPECT_FALSE(names.count("exp_avg.blocks.0.attn.wq")) << out;
  ASSERT_EQ(run_keel(args("muon_halves", muon + "--resume auto"), &out), 0) << out;
  auto a = read_metrics(run_path("muon_straight")), b = read_metrics(run_path("muon_halves"));
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].loss, b[i].loss) << "step " << a[i].step;
  EXPECT_LT(a.back().loss, a.front().loss - 1.0);  // it trains
  // An AdamW checkpoint does not resume as Muon: the config differs, and says so.
  ASSERT_EQ(run_keel(args("straight_adamw", "--stop-after-step 4"), &out), 0) << out;
  EXPECT_EQ(run_keel(args("straight_adamw", muon + "--resume auto"), &out), 2) << out;
  EXPECT_NE(out.find("train.optimizer"), std::string::npos) << out;
}

// A crash inside a logging interval: after the resume every record equals an
// uninterrupted run's in each value that is not a wall time (issue 20, defect 9).
TEST_F(TrainCli, ResumeInsideALoggingIntervalLogsTheSameValues) {
  std::string out;
  const std::string opts = "--set train.log_every=4 --set checkpoint.every=5";
  ASSERT_EQ(run_keel(args("log4_straight", opts), &out), 0) << out;
  setenv("KEEL_FAULT_INJECT", "kill_rank_at_step:0:8", 1);  // after step 7: the checkpoint is step 5's
  const int rc = run_keel(args("log4_crashed", opts), &out);
  unsetenv("KEEL_FAULT_INJECT");
  ASSERT_EQ(rc, 128 + SIGKILL) << out;
  ASSERT_EQ(run_keel(args("log4_crashed", opts + " --resume auto"), &out), 0) << out;
  EXPECT_NE(out.find("step_00000005"), std::string::npos) << out;
  auto records = [](const std::string& run) {
    std::vector<nlohmann::json> out;
    std::ifstream in(run + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  };
  const auto a = records(run_path("log4_straight")), b = records(run_path("log4_crashed"));
  ASSERT_GE(a.size(), 3u);  // steps 4, 8, 12 at least
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("step " + a[i]["step"].dump());
    EXPECT_EQ(a[i]["step"], b[i]["step"]);
    for (const char* key : {"loss", "grad_norm", "lr", "val_loss", "param_norm", "update_ratio", "attn", "output",
                            "params", "activations", "spikes", "spike_score_percent"})
      EXPECT_EQ(a[i].value(key, nlohmann::json()), b[i].value(key, nlohmann::json())) << key;
  }
  // The elapsed time continues across the attempts instead of restarting at 0.
  EXPECT_GT(b.back()["elapsed_s"].get<double>(), b[1]["elapsed_s"].get<double>());
}

// A run stopped right after its last checkpoint (a SIGTERM just after the
// final save) and started again reports the same summary, final losses
// included, as the run that finished (issue 20, defect 11).
TEST_F(TrainCli, ResumingAFinishedRunKeepsItsSummary) {
  std::string out;
  ASSERT_EQ(run_keel(args("finished"), &out), 0) << out;
  auto before = read_json(run_path("finished") + "/summary.json");
  ASSERT_EQ(run_keel(args("finished", "--resume auto"), &out), 0) << out;
  EXPECT_NE(out.find("nothing to do"), std::string::npos) << out;
  auto after = read_json(run_path("finished") + "/summary.json");
  EXPECT_TRUE(after["final_loss"].is_number()) << after.dump();
  EXPECT_TRUE(after["final_val_loss"].is_number()) << after.dump();
  // The training time up to the final checkpoint (the save itself is not in
  // it, so it is a little below the first summary's), not a fresh 0.
  EXPECT_GT(after["time_s"].get<double>(), 0.0);
  before.erase("time_s");
  after.erase("time_s");
  EXPECT_EQ(before, after);
}

// A second writer of a live run (a requeued job, the same command twice) is
// refused before it touches anything, even with run.overwrite (issue 20,
// defect 4).
TEST_F(TrainCli, ALiveRunIsNotTouchedByASecondWriter) {
  std::string out;
  ASSERT_EQ(run_keel(args("held", "--stop-after-step 4"), &out), 0) << out;
  const std::string metrics = keel_test::read_file(run_path("held") + "/metrics.jsonl");
  {
    keel::DirLock live(run_path("held"), "run directory");  // stands in for the running keel
    for (const char* extra : {"--resume auto", "--set run.overwrite=true"}) {
      SCOPED_TRACE(extra);
      EXPECT_EQ(run_keel(args("held", extra), &out), 2) << out;
      EXPECT_NE(out.find("is in use by keel pid " + std::to_string(::getpid())), std::string::npos) << out;
      EXPECT_EQ(keel_test::read_file(run_path("held") + "/metrics.jsonl"), metrics);
      EXPECT_TRUE(keel::path_exists(run_path("held") + "/checkpoints/step_00000004"));
    }
  }
  ASSERT_EQ(run_keel(args("held", "--resume auto"), &out), 0) << out;  // the lock went with its holder
  EXPECT_NE(out.find("resumed from"), std::string::npos) << out;
}

// Resuming from an older checkpoint starts a new branch: the newer
// checkpoints and log records are moved aside, not deleted, and --resume
// auto then follows the new branch (issue 20, defect 2).
TEST_F(TrainCli, ResumingFromAnOlderCheckpointStartsABranch) {
  std::string out;
  ASSERT_EQ(run_keel(args("branchy"), &out), 0) << out;  // checkpoints 4, 8, 12
  ASSERT_EQ(run_keel(args("branchy", "--resume " + run_path("branchy") + "/checkpoints/step_00000004 "
                                     "--stop-after-step 6 --set checkpoint.keep_last=2"), &out), 0) << out;
  EXPECT_NE(out.find("starts a new branch"), std::string::npos) << out;
  std::vector<int64_t> steps;
  for (const auto& m : read_metrics(run_path("branchy"))) steps.push_back(m.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  const auto listing = nlohmann::json::parse(keel_test::read_file(run_path("branchy") + "/branches.jsonl"));
  EXPECT_EQ(listing["resumed_from_step"], 4);
  EXPECT_EQ(listing["abandoned_checkpoints"], (std::vector<int64_t>{8, 12}));
  const std::string branch = run_path("branchy") + "/" + listing["branch"].get<std::string>();
  EXPECT_TRUE(keel::path_exists(branch + "/checkpoints/step_00000008/manifest.json"));
  EXPECT_TRUE(keel::path_exists(branch + "/checkpoints/step_00000012/manifest.json"));
  std::vector<int64_t> abandoned;
  for (const auto& m : read_metrics(branch)) abandoned.push_back(m.step);
  EXPECT_EQ(abandoned, (std::vector<int64_t>{5, 6, 7, 8, 9, 10, 11, 12}));
  EXPECT_FALSE(keel::path_exists(run_path("branchy") + "/checkpoints/step_00000012"));
  // --resume auto continues the new branch from step 6, not the old one from 12.
  ASSERT_EQ(run_keel(args("branchy", "--resume auto"), &out), 0) << out;
  EXPECT_NE(out.find("step_00000006"), std::string::npos) << out;
  steps.clear();
  for (const auto& m : read_metrics(run_path("branchy"))) steps.push_back(m.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  EXPECT_TRUE(keel::path_exists(branch + "/checkpoints/step_00000012/manifest.json"));  // pruning left it alone
}

TEST_F(TrainCli, KillDuringSaveLeavesPreviousCheckpoint) {
  std::string out;
  ASSERT_EQ(run_keel(args("killed", "--stop-after-step 4"), &out), 0) << out;
  // The next save (step 8) dies after writing the weights, before its manifest.
  setenv("KEEL_FAULT_INJECT", "save_crash_after:model.safetensors", 1);
  int rc = run_keel(args("killed", "--resume auto"), &out);
  unsetenv("KEEL_FAULT_INJECT");
  EXPECT_EQ(rc, 128 + SIGKILL) << out;
  ASSERT_EQ(run_keel(args("killed", "--resume auto"), &out), 0) << out;
  EXPECT_NE(out.find("at step 4"), std::string::npos) << out;
  auto m = read_metrics(run_path("killed"));
  ASSERT_EQ(m.size(), 12u);  // steps 5..8 logged by the killed process were dropped and redone
  ASSERT_EQ(run_keel(args("killed_ref"), &out), 0) << out;
  auto ref = read_metrics(run_path("killed_ref"));
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i].loss, ref[i].loss) << "step " << m[i].step;
}

// A kill while a record is being appended can leave its line cut short (a
// write crossing a page stops part-way under SIGKILL). Resuming drops that
// line, with a warning naming the file, so the logs hold whole records only
// and each step once.
TEST_F(TrainCli, ResumeDropsARecordCutShortByAKill) {
  std::string out;
  ASSERT_EQ(run_keel(args("torn", "--stop-after-step 4"), &out), 0) << out;
  const std::string torn = "{\"step\":5,\"loss\":3.25,\"lr\":0.00";  // no closing brace, no newline
  std::ofstream(run_path("torn") + "/metrics.jsonl", std::ios::app) << torn;
  std::ofstream(run_path("torn") + "/spikes.jsonl", std::ios::app) << "{\"step\":2,\"event\":\"spike\"}\n" << torn;
  ASSERT_EQ(run_keel(args("torn", "--resume auto"), &out), 0) << out;
  EXPECT_NE(out.find("metrics.jsonl: dropped 1 line(s) that are not JSON"), std::string::npos) << out;
  EXPECT_NE(out.find("spikes.jsonl: dropped 1 line(s) that are not JSON"), std::string::npos) << out;
  std::vector<int64_t> steps;
  for (const auto& m : read_metrics(run_path("torn"))) steps.push_back(m.step);  // throws on a line that is not JSON
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(keel_test::read_file(run_path("torn") + "/spikes.jsonl"), "{\"step\":2,\"event\":\"spike\"}\n")
      << "the whole record up to the checkpoint stays";
}

TEST_F(TrainCli, CorruptCheckpointFallsBackToPrevious) {
  std::string out;
  ASSERT_EQ(run_keel(args("corrupt", "--stop-after-step 8"), &out), 0) << out;
  const std::string victim = run_path("corrupt") + "/checkpoints/step_00000008/model.safetensors";
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    char c;
    f.read(&c, 1);
    c ^= 0x5a;
    f.seekp(200);
    f.write(&c, 1);
  }
  ASSERT_EQ(run_keel(args("corrupt", "--resume auto"), &out), 0) << out;
  EXPECT_NE(out.find("skipping invalid checkpoint"), std::string::npos) << out;
  EXPECT_NE(out.find("step_00000008"), std::string::npos) << out;
  EXPECT_NE(out.find("at step 4"), std::string::npos) << out;
  // Resuming explicitly from a corrupted checkpoint is an error naming the file.
  {
    std::fstream f(run_path("corrupt") + "/checkpoints/step_00000012/model.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(300);
    f.write("XXXX", 4);
  }
  EXPECT_EQ(run_keel(args("corrupt2", "--resume " + run_path("corrupt") + "/checkpoints/step_00000012"), &out), 2)
      << out;
  EXPECT_NE(out.find("model.safetensors"), std::string::npos) << out;
}

TEST_F(TrainCli, ArchitectureChangeIsRefused) {
  std::string out;
  ASSERT_EQ(run_keel(args("arch", "--stop-after-step 4"), &out), 0) << out;
  EXPECT_EQ(run_keel(args("arch", "--resume auto --set model.d_model=48"), &out), 2) << out;
  EXPECT_NE(out.find("model.d_model: 32 -> 48"), std::string::npos) << out;
  ASSERT_EQ(run_keel(args("arch", "--resume auto --set train.max_steps=14"), &out), 0) << out;
  EXPECT_NE(out.find("config change allowed: train.max_steps: 12 -> 14"), std::string::npos) << out;
}

TEST_F(TrainCli, SigtermSavesAndExitsCleanly) {
  const std::string name = "sigterm";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string cmd = std::string(KEEL_BINARY) + " " + args(name, "--set train.max_steps=100000 --set checkpoint.every=0") +
                      " > /dev/null 2>&1";
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until it is training (first metrics line), then ask it to stop.
  for (int i = 0; i < 600 && read_metrics_size_ok(run_path(name)) == false; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal instead of stopping cleanly";
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);  // interrupted, not finished: `keel train && next` stops
  auto summary = read_json(run_path(name) + "/summary.json");
  EXPECT_EQ(summary["stopped_by"], "signal");
  const int64_t steps = summary["steps"].get<int64_t>();
  EXPECT_TRUE(keel::path_exists(run_path(name) + "/checkpoints/step_" + std::string(8 - std::to_string(steps).size(), '0') +
                                std::to_string(steps) + "/manifest.json"));
}

TEST_F(TrainCli, NonFiniteSkipAndHalt) {
  std::string out;
  setenv("KEEL_FAULT_INJECT", "nan_loss_at_step:5", 1);
  // Steps 4-6 share one logging interval (log_every 6, monitor every 3): a
  // bad step 5 must not also skip step 6, whose own loss is finite.
  int skip_rc = run_keel(args("nan_skip", "--set train.nonfinite=skip --set checkpoint.every=0 --set train.log_every=6"),
                         &out);
  std::string skip_out = out;
  int halt_rc = run_keel(args("nan_halt", "--set train.nonfinite=halt"), &out);
  unsetenv("KEEL_FAULT_INJECT");
  EXPECT_EQ(skip_rc, 0) << skip_out;
  auto s = read_json(run_path("nan_skip") + "/summary.json");
  EXPECT_EQ(s["nonfinite_steps"], 1);
  EXPECT_EQ(s["stopped_by"], "completed");
  EXPECT_TRUE(s["final_loss"].is_number());

  EXPECT_EQ(halt_rc, 3) << out;
  auto h = read_json(run_path("nan_halt") + "/summary.json");
  EXPECT_EQ(h["stopped_by"], "nonfinite");
  EXPECT_EQ(h["steps"], 5);
  EXPECT_TRUE(keel::path_exists(run_path("nan_halt") + "/nonfinite.jsonl"));
  // The checkpoint at step 4 exists; nothing was saved after the bad step.
  EXPECT_TRUE(keel::path_exists(run_path("nan_halt") + "/checkpoints/step_00000004/manifest.json"));
  EXPECT_FALSE(keel::path_exists(run_path("nan_halt") + "/checkpoints/step_00000005"));
}

// A job killed before its first save is requeued with --resume auto: there is
// no checkpoint, so it starts afresh, and its logs must not keep the
// abandoned attempt's steps (metrics.jsonl read 1,2,3,4,1,2,3,4 before).
TEST_F(TrainCli, ResumeAutoWithoutCheckpointStartsTheLogsAfresh) {
  const std::string no_saves = "--set checkpoint.every=0 --set checkpoint.at_end=false --set train.max_steps=4 "
                               "--set train.nonfinite=skip";
  std::string out;
  setenv("KEEL_FAULT_INJECT", "nan_loss_at_step:2", 1);
  const int first = run_keel(args("requeued", no_saves), &out);
  const int second = run_keel(args("requeued", no_saves + " --resume auto"), &out);
  unsetenv("KEEL_FAULT_INJECT");
  ASSERT_EQ(first, 0) << out;
  ASSERT_EQ(second, 0) << out;
  std::vector<int64_t> steps;  // (step 2's loss is NaN, written as null)
  std::ifstream metrics(run_path("requeued") + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);)
    steps.push_back(nlohmann::json::parse(line)["step"].get<int64_t>());
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4}));
  std::ifstream nonfinite(run_path("requeued") + "/nonfinite.jsonl");
  int lines = 0;
  for (std::string line; std::getline(nonfinite, line);) lines += !line.empty();
  EXPECT_EQ(lines, 1) << "nonfinite.jsonl keeps the abandoned attempt's record";
}

TEST_F(TrainCli, CudaGraphOnCpuIsRefusedBeforeAnythingIsWritten) {
  std::string out;
  EXPECT_EQ(run_keel(args("graph_cpu", "--set train.cuda_graph=true --set train.device=cpu"), &out), 2) << out;
  EXPECT_NE(out.find("train.cuda_graph"), std::string::npos) << out;
  EXPECT_NE(out.find("needs a CUDA device"), std::string::npos) << out;
  EXPECT_FALSE(keel::path_exists(run_path("graph_cpu")));
}

TEST_F(TrainCli, AccumulationGivesTheSameLosses) {
  std::string out;
  ASSERT_EQ(run_keel(args("acc1", "--set train.batch_size=8 --set train.max_steps=6 --set checkpoint.every=0"), &out), 0)
      << out;
  ASSERT_EQ(run_keel(args("acc4", "--set train.batch_size=8 --set train.micro_batch_size=2 --set train.max_steps=6 "
                                  "--set checkpoint.every=0"),
                     &out),
            0)
      << out;
  auto a = read_metrics(run_path("acc1")), b = read_metrics(run_path("acc4"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i].loss, b[i].loss, 1e-4) << "step " << a[i].step;
}

TEST_F(TrainCli, RefusesToOverwriteAnotherRun) {
  std::string out;
  ASSERT_EQ(run_keel(args("guard", "--set train.max_steps=2 --set train.warmup_steps=1 --set checkpoint.every=0"), &out), 0)
      << out;
  EXPECT_EQ(run_keel(args("guard", "--set train.max_steps=2 --set train.warmup_steps=1"), &out), 2) << out;
  EXPECT_NE(out.find("already holds a run"), std::string::npos) << out;
  EXPECT_TRUE(keel::path_exists(run_path("guard") + "/summary.json"));
}

// run.overwrite empties only what is recognisably a keel run (issue 31): a
// directory of someone's files, or a link, is refused with exit 2 naming the
// path, and left exactly as it was (not even a lock file is added).
namespace {

const char* kQuickRun = "--set train.max_steps=2 --set train.warmup_steps=1 --set checkpoint.every=0 ";
const char* kOverwrite = "--set run.overwrite=true ";

void make_link(const std::string& target, const std::string& at) {
  // Under CTest each test runs in a process of its own: the runs directory
  // may not exist yet.
  keel::ensure_directory(at.substr(0, at.rfind('/')));
  ASSERT_EQ(::symlink(target.c_str(), at.c_str()), 0) << at << ": " << std::strerror(errno);
}

}  // namespace

TEST_F(TrainCli, OverwriteRefusesADirectoryThatIsNotARun) {
  std::string out;
  const std::string dir = run_path("plainnotrun");
  keel::ensure_directory(dir);
  write(dir + "/a.txt", "not keel's");
  for (const std::string& extra : {std::string(kQuickRun) + kOverwrite, std::string(kQuickRun)}) {
    SCOPED_TRACE(extra);
    EXPECT_EQ(run_keel(args("plainnotrun", extra), &out), 2) << out;
    EXPECT_NE(out.find(dir), std::string::npos) << out;
    EXPECT_NE(out.find("does not look like a keel run"), std::string::npos) << out;
    EXPECT_EQ(keel::list_directory(dir), std::vector<std::string>{"a.txt"});
    EXPECT_EQ(keel_test::read_file(dir + "/a.txt"), "not keel's");
  }
}

TEST_F(TrainCli, OverwriteNeverDeletesThroughALink) {
  std::string out;
  const std::string elsewhere = g_dir + "/elsewhere";
  keel::ensure_directory(elsewhere + "/notarun");
  write(elsewhere + "/notarun/b.txt", "not keel's");
  make_link(elsewhere + "/notarun", run_path("symhome"));
  EXPECT_EQ(run_keel(args("symhome", std::string(kQuickRun) + kOverwrite), &out), 2) << out;
  EXPECT_NE(out.find(run_path("symhome") + ": it is a symbolic link"), std::string::npos) << out;
  EXPECT_EQ(keel::list_directory(elsewhere + "/notarun"), std::vector<std::string>{"b.txt"});

  // A run outside run.out_dir, reached through a link: a run, but still not
  // emptied through the link.
  ASSERT_EQ(run_keel("train " + base_config() + " --set run.name=realrun --set run.out_dir=" + elsewhere + " " +
                         kQuickRun, &out), 0) << out;
  const std::string target = elsewhere + "/realrun";
  const auto before = keel::list_directory(target);
  const std::string metrics = keel_test::read_file(target + "/metrics.jsonl");
  make_link(target, run_path("symrun"));
  EXPECT_EQ(run_keel(args("symrun", std::string(kQuickRun) + kOverwrite), &out), 2) << out;
  EXPECT_NE(out.find("symbolic link"), std::string::npos) << out;
  EXPECT_EQ(keel::list_directory(target), before);
  EXPECT_EQ(keel_test::read_file(target + "/metrics.jsonl"), metrics);
}

TEST_F(TrainCli, OverwriteStillReplacesARunAndRemovesLinksInsideIt) {
  std::string out;
  const std::string dir = run_path("overwritten");
  ASSERT_EQ(run_keel(args("overwritten", kQuickRun), &out), 0) << out;
  keel::ensure_directory(g_dir + "/kept");
  write(g_dir + "/kept/c.txt", "not keel's");
  make_link(g_dir + "/kept", dir + "/linked");  // inside the run: removed, not followed
  write(dir + "/metrics.jsonl", keel_test::read_file(dir + "/metrics.jsonl") + "{\"step\": 99, \"loss\": 1.0}\n");
  ASSERT_EQ(run_keel(args("overwritten", std::string(kQuickRun) + kOverwrite), &out), 0) << out;
  EXPECT_FALSE(keel::path_exists(dir + "/linked"));
  EXPECT_EQ(keel::list_directory(g_dir + "/kept"), std::vector<std::string>{"c.txt"});
  const auto metrics = read_metrics(dir);
  ASSERT_EQ(metrics.size(), 2u);  // the new run's records alone
  EXPECT_EQ(metrics.back().step, 2);
}

namespace {

const char* kSpikeSettings =
    "--set monitor.spike_window=8 --set monitor.spike_warmup=4 --set monitor.spike_threshold=3 "
    "--set monitor.diverge_loss_factor=100 ";

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

TEST_F(TrainCli, PlantedSpikeIsFlaggedAndSkipStepKeepsWeights) {
  std::string out;
  setenv("KEEL_FAULT_INJECT", "loss_x10_at_step:9", 1);
  int rc_skip = run_keel(args("spike_skip", std::string(kSpikeSettings) +
                                                "--set monitor.skip_on_spike=true --set checkpoint.every=1 "
                                                "--set checkpoint.keep_last=20"),
                         &out);
  std::string skip_out = out;
  int rc_plain = run_keel(args("spike_plain", std::string(kSpikeSettings) + "--set checkpoint.every=0"), &out);
  unsetenv("KEEL_FAULT_INJECT");
  ASSERT_EQ(rc_skip, 0) << skip_out;
  ASSERT_EQ(rc_plain, 0) << out;
  auto skip_events = read_jsonl(run_path("spike_skip") + "/spikes.jsonl");
  auto plain_events = read_jsonl(run_path("spike_plain") + "/spikes.jsonl");
  ASSERT_FALSE(plain_events.empty());
  // The planted step is flagged on the loss, the same way with and without skipping.
  const nlohmann::json* plain9 = nullptr;
  for (const auto& e : plain_events)
    if (e["step"] == 9 && e["signal"] == "loss") plain9 = &e;
  ASSERT_NE(plain9, nullptr) << out;
  EXPECT_GT((*plain9)["z"].get<double>(), 3.0);
  EXPECT_NEAR((*plain9)["value"].get<double>(), 10 * (*plain9)["mean"].get<double>(),
              3 * (*plain9)["mean"].get<double>());
  bool skip9 = false;
  for (const auto& e : skip_events)
    if (e["step"] == 9 && e["signal"] == "loss") {
      skip9 = true;
      // Earlier flagged steps may have been skipped too, so the histories (and z) differ.
      EXPECT_GT(e["z"].get<double>(), 3.0);
    }
  EXPECT_TRUE(skip9) << skip_out;
  auto summary = read_json(run_path("spike_skip") + "/summary.json");
  EXPECT_GE(summary["spike_skipped_steps"].get<int64_t>(), 1);
  EXPECT_GE(summary["spikes"]["loss"].get<int64_t>(), 1);
  // The update of the flagged step was skipped: weights after step 9 equal those after step 8.
  auto w8 = keel_test::read_file(run_path("spike_skip") + "/checkpoints/step_00000008/model.safetensors");
  auto w9 = keel_test::read_file(run_path("spike_skip") + "/checkpoints/step_00000009/model.safetensors");
  auto w10 = keel_test::read_file(run_path("spike_skip") + "/checkpoints/step_00000010/model.safetensors");
  // Identical bytes apart from the "step" metadata in the header.
  EXPECT_EQ(w8.size(), w9.size());
  EXPECT_EQ(w8.substr(w8.size() - 4096), w9.substr(w9.size() - 4096));
  EXPECT_NE(w9.substr(w9.size() - 4096), w10.substr(w10.size() - 4096));
}

TEST_F(TrainCli, SpikeDetectorStateSurvivesResume) {
  std::string out;
  setenv("KEEL_FAULT_INJECT", "loss_x10_at_step:10", 1);
  int a = run_keel(args("spike_straight", kSpikeSettings), &out);
  int b = run_keel(args("spike_resumed", std::string(kSpikeSettings) + "--stop-after-step 6"), &out);
  int c = run_keel(args("spike_resumed", std::string(kSpikeSettings) + "--resume auto"), &out);
  unsetenv("KEEL_FAULT_INJECT");
  ASSERT_EQ(a + b + c, 0) << out;
  auto straight = read_jsonl(run_path("spike_straight") + "/spikes.jsonl");
  auto resumed = read_jsonl(run_path("spike_resumed") + "/spikes.jsonl");
  ASSERT_FALSE(straight.empty());
  ASSERT_EQ(straight.size(), resumed.size());
  for (size_t i = 0; i < straight.size(); ++i) EXPECT_EQ(straight[i], resumed[i]);
  EXPECT_EQ(read_json(run_path("spike_straight") + "/summary.json")["spike_score_percent"],
            read_json(run_path("spike_resumed") + "/summary.json")["spike_score_percent"]);
}

TEST_F(TrainCli, DivergenceIsMarkedAndCanStopTheRun) {
  std::string out;
  setenv("KEEL_FAULT_INJECT", "loss_x10_at_step:5", 1);
  int rc = run_keel(args("diverge", "--set monitor.diverge_loss_factor=1.5 --set monitor.stop_on_divergence=true"),
                    &out);
  unsetenv("KEEL_FAULT_INJECT");
  ASSERT_EQ(rc, 3) << out;  // stopped by its own rule, not finished
  auto s = read_json(run_path("diverge") + "/summary.json");
  EXPECT_EQ(s["diverged"], true);
  EXPECT_EQ(s["diverged_step"], 5);
  EXPECT_EQ(s["stopped_by"], "diverged");
  EXPECT_NE(s["diverged_reason"].get<std::string>().find("initial loss"), std::string::npos);
  EXPECT_EQ(s["steps"], 5);
}

// Attention-logit instability is flagged and the run trains on; only
// monitor.stop_on_logit_instability stops it there (issue 17).
TEST_F(TrainCli, LogitInstabilityIsFlaggedAndStopsOnlyWhenAsked) {
  std::string out;
  const std::string low = "--set monitor.diverge_attn_logit=1e-3 --set checkpoint.every=0";  // passed at step 3
  ASSERT_EQ(run_keel(args("unstable", low), &out), 0) << out;
  EXPECT_NE(out.find("attention logits unstable at step 3"), std::string::npos) << out;
  auto s = read_json(run_path("unstable") + "/summary.json");
  EXPECT_EQ(s["stopped_by"], "completed");
  EXPECT_EQ(s["steps"], 12);
  EXPECT_EQ(s["attn_logit_unstable"], true);
  EXPECT_EQ(s["attn_logit_unstable_step"], 3);
  EXPECT_EQ(s["diverged"], false);
  ASSERT_EQ(run_keel(args("unstable_stop", low + " --set monitor.stop_on_logit_instability=true"), &out), 3) << out;
  s = read_json(run_path("unstable_stop") + "/summary.json");
  EXPECT_EQ(s["stopped_by"], "logit_unstable");
  EXPECT_EQ(s["steps"], 3);
  EXPECT_EQ(s["diverged"], false);
}

// Wortsman et al. 2023: at a very high learning rate without QK-Norm the
// attention logits grow; the monitor must show it in metrics.jsonl.
TEST_F(TrainCli, HighLearningRateGrowsLayerZeroAttentionLogits) {
  std::string out;
  ASSERT_EQ(run_keel(args("high_lr", "--set train.lr=0.1 --set train.min_lr=0.01 --set train.max_steps=40 "
                                     "--set train.warmup_steps=4 --set monitor.every=4 --set checkpoint.every=0 "
                                     "--set train.nonfinite=skip"),
                     &out),
            0)
      << out;
  std::vector<double> layer0;
  std::ifstream in(run_path("high_lr") + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("attn")) layer0.push_back(j["attn"][0]["max_logit"].get<double>());
  }
  ASSERT_EQ(layer0.size(), 10u);
  EXPECT_GT(layer0.back(), 5.0 * layer0.front()) << "layer-0 max attention logit did not grow: " << layer0.front()
                                                 << " -> " << layer0.back();
  auto s = read_json(run_path("high_lr") + "/summary.json");
  EXPECT_NEAR(s["max_attn_logit_per_layer"][0].get<double>(), *std::max_element(layer0.begin(), layer0.end()), 1e-9);
}

// MuonClip (issue 21; Kimi K2): at an LR where Muon alone lets the attention
// logits grow far past τ, QK-clip after each Muon step holds them near τ.
// The clip factor comes from the step's own forward, before the update
// (Kimi K2's algorithm), so a forward after the step may exceed τ by what one
// update added: the monitor (a forward after each step) bounds that here.
TEST_F(TrainCli, MuonClipHoldsTheLogitsMuonAloneLetsGrow) {
  const double tau = 10;
  const std::string muon = "--set train.optimizer=muon --set train.lr=0.3 --set train.min_lr=0.03 --set train.max_steps=60 "
                           "--set train.warmup_steps=4 --set monitor.every=1 --set checkpoint.every=0 "
                           "--set train.muon.split_qkv_heads=true ";
  auto maxima = [](const std::string& run) {  // largest logit over layers and heads, per monitored step
    std::vector<double> out;
    std::ifstream in(run + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (!j.contains("attn")) continue;
      double m = 0;
      for (const auto& layer : j["attn"]) m = std::max(m, layer["max_logit"].get<double>());
      out.push_back(m);
    }
    return out;
  };
  std::string out;
  ASSERT_EQ(run_keel(args("muon_alone", muon), &out), 0) << out;
  ASSERT_EQ(run_keel(args("muonclip", muon + "--set train.qk_clip_tau=" + std::to_string(tau)), &out), 0) << out;
  const auto alone = maxima(run_path("muon_alone")), clipped = maxima(run_path("muonclip"));
  ASSERT_EQ(alone.size(), 60u);
  ASSERT_EQ(clipped.size(), 60u);
  auto listed = [](const std::vector<double>& v) {
    std::string s;
    for (double x : v) s += std::to_string(x) + " ";
    return s;
  };
  EXPECT_GT(*std::max_element(alone.begin(), alone.end()), 5 * tau) << listed(alone);
  // Clipped: never more than one update's growth above τ, and at τ once the
  // run settles: the median of the last 20 steps (single steps overshoot by
  // one update, up to 1.39τ on another corpus of the same kind; Muon alone
  // is past 10τ there).
  EXPECT_LT(*std::max_element(clipped.begin(), clipped.end()), 2 * tau) << listed(clipped);
  std::vector<double> settled(clipped.begin() + 40, clipped.end());
  std::nth_element(settled.begin(), settled.begin() + settled.size() / 2, settled.end());
  EXPECT_LT(settled[settled.size() / 2], 1.2 * tau) << listed(clipped);
  if (::testing::Test::HasFailure() || std::getenv("KEEL_TEST_VERBOSE"))
    std::cout << "Muon alone: " << listed(alone) << "\nMuonClip:   " << listed(clipped) << "\n";
  int64_t rescaled = 0;
  std::ifstream in(run_path("muonclip") + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) rescaled += nlohmann::json::parse(line).value("qk_clipped_heads", 0);
  EXPECT_GT(rescaled, 0);
}

// ------------------------------------------------- monitor.on_spike: rewind

namespace {

// The model's tensors of a checkpoint, by name.
std::map<std::string, torch::Tensor> checkpoint_weights(const std::string& run, int64_t step) {
  char dir[32];
  std::snprintf(dir, sizeof dir, "step_%08lld", static_cast<long long>(step));
  std::map<std::string, torch::Tensor> out;
  for (auto& [name, t] : keel::read_safetensors(run + "/checkpoints/" + dir + "/model.safetensors")) out[name] = t;
  return out;
}

void expect_same_weights(const std::string& a, const std::string& b, int64_t step) {
  auto wa = checkpoint_weights(a, step), wb = checkpoint_weights(b, step);
  ASSERT_EQ(wa.size(), wb.size());
  ASSERT_FALSE(wa.empty());
  for (const auto& [name, t] : wa) {
    ASSERT_TRUE(wb.count(name)) << name;
    EXPECT_TRUE(torch::equal(t, wb[name])) << name << " differs between " << a << " and " << b;
  }
}

// Every rewind record of a run's spikes.jsonl.
std::vector<nlohmann::json> rewinds_of(const std::string& run) {
  std::vector<nlohmann::json> out;
  for (const auto& e : read_jsonl(run + "/spikes.jsonl"))
    if (e.value("event", "") == "rewind") out.push_back(e);
  return out;
}

// A 10x loss is hundreds of sigmas; threshold 20 keeps ordinary early-training noise unflagged.
const std::string kRewind =
    "--set monitor.spike_window=8 --set monitor.spike_warmup=4 --set monitor.spike_threshold=20 "
    "--set monitor.diverge_loss_factor=100 --set monitor.on_spike=rewind ";

}  // namespace

// PaLM's recovery, end to end: the planted spike in step 9's batch sends the
// run back to step 8's checkpoint, that batch is skipped, the run completes,
// and it ends with the weights of a run that skipped the same batch from the
// start; a resume after the rewind ends there too.
TEST_F(TrainCli, RewindSkipsTheSpikesBatchAndEqualsARunGivenTheSkipList) {
  std::string out;
  setenv("KEEL_FAULT_INJECT", "loss_x10_at_step:9", 1);
  const int rc = run_keel(args("rewound", kRewind), &out);
  const std::string rewound_out = out;
  const int rc_stopped = run_keel(args("rewound_resumed", kRewind + "--stop-after-step 10"), &out);
  const std::string stopped_out = out;
  const int rc_resumed = run_keel(args("rewound_resumed", kRewind + "--resume auto"), &out);
  unsetenv("KEEL_FAULT_INJECT");
  ASSERT_EQ(rc, 0) << rewound_out;
  ASSERT_EQ(rc_stopped, 0) << stopped_out;
  ASSERT_EQ(rc_resumed, 0) << out;

  const auto rewinds = rewinds_of(run_path("rewound"));
  ASSERT_GE(rewinds.size(), 1u) << rewound_out;
  const nlohmann::json* planted = nullptr;
  for (const auto& r : rewinds)
    if (r["spike_step"] == 9) planted = &r;
  ASSERT_NE(planted, nullptr) << rewound_out;
  EXPECT_EQ((*planted)["step"], 8);             // the newest checkpoint before the spike (every 4 steps)
  EXPECT_EQ((*planted)["skipped_batches"], 1);  // default: through the spike's own batch
  EXPECT_FALSE((*planted)["spikes"].empty());
  auto summary = read_json(run_path("rewound") + "/summary.json");
  EXPECT_EQ(summary["stopped_by"], "completed");
  EXPECT_EQ(summary["steps"], 12);
  EXPECT_EQ(summary["rewinds"].get<int64_t>(), static_cast<int64_t>(rewinds.size()));
  ASSERT_EQ(summary["data_skips"].size(), rewinds.size());
  // The abandoned step's records were kept in a branch.
  EXPECT_TRUE(keel::path_exists(run_path("rewound") + "/branches.jsonl"));
  // The step-9 record comes from the new trajectory (logged once).
  auto metrics = read_metrics(run_path("rewound"));
  ASSERT_EQ(metrics.size(), 12u);
  for (size_t i = 0; i < metrics.size(); ++i) EXPECT_EQ(metrics[i].step, static_cast<int64_t>(i + 1));

  // The same skips given from the start, no fault: the same weights.
  std::string skips;
  for (const auto& r : summary["data_skips"])
    skips += (skips.empty() ? "" : ",") + std::string("'") + std::to_string(r["after_step"].get<int64_t>()) + ":" +
             std::to_string(r["batches"].get<int64_t>()) + "'";
  ASSERT_EQ(run_keel(args("given_skips", kRewind + "--set \"data.skip_batches=[" + skips + "]\""), &out), 0) << out;
  auto given = read_json(run_path("given_skips") + "/summary.json");
  EXPECT_EQ(given["rewinds"], 0) << out;  // without the planted spike nothing needs a rewind
  expect_same_weights(run_path("rewound"), run_path("given_skips"), 12);
  // Stopped after the rewind and resumed: bit-exact too.
  EXPECT_EQ(read_json(run_path("rewound_resumed") + "/summary.json")["rewinds"], summary["rewinds"]);
  expect_same_weights(run_path("rewound"), run_path("rewound_resumed"), 12);
}

TEST_F(TrainCli, RewindsStopAtMaxRewinds) {
  std::string out;
  setenv("KEEL_FAULT_INJECT", "loss_x10_at_step:9", 1);
  const int rc = run_keel(args("no_rewinds", kRewind + "--set monitor.max_rewinds=0"), &out);
  unsetenv("KEEL_FAULT_INJECT");
  ASSERT_EQ(rc, 3) << out;  // stopped by its own rule
  auto summary = read_json(run_path("no_rewinds") + "/summary.json");
  EXPECT_EQ(summary["stopped_by"], "max_rewinds");
  EXPECT_LE(summary["steps"].get<int64_t>(), 9);
  EXPECT_EQ(summary["rewinds"], 0);
  EXPECT_NE(out.find("monitor.max_rewinds reached"), std::string::npos) << out;
}

namespace {

std::vector<nlohmann::json> metric_records(const std::string& run) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Every value of two records but the wall times, which no two runs share.
void expect_same_record(const nlohmann::json& a, const nlohmann::json& b) {
  static const std::set<std::string> wall_times = {"tokens_per_s", "step_ms", "loader_wait_ms", "comm_wait_ms", "mfu",
                                                   "elapsed_s"};
  SCOPED_TRACE("step " + a.value("step", nlohmann::json()).dump());
  std::set<std::string> keys;
  for (const auto& r : {a, b})
    for (const auto& [key, value] : r.items()) keys.insert(key);
  for (const auto& key : keys) {
    if (!wall_times.count(key)) EXPECT_EQ(a.value(key, nlohmann::json()), b.value(key, nlohmann::json())) << key;
  }
}

}  // namespace

// A clean stop inside a logging interval, by --stop-after-step or a SIGTERM,
// then --resume auto: the regular records equal an uninterrupted run's (the
// step-10 loss is the mean over steps 6-10, not 8-10), and the stop adds a
// record of its own, marked with why it stopped (issue 31). The crash path is
// ResumeInsideALoggingIntervalLogsTheSameValues.
TEST_F(TrainCli, CleanStopInsideALoggingIntervalLogsTheSameValues) {
  const std::string opts = "--set train.log_every=5 --set train.eval_every=10 --set monitor.every=0 ";
  std::string out;
  ASSERT_EQ(run_keel(args("log5_straight", opts), &out), 0) << out;
  ASSERT_EQ(run_keel(args("log5_stopped", opts + "--stop-after-step 7"), &out), 0) << out;
  ASSERT_EQ(run_keel(args("log5_stopped", opts + "--resume auto"), &out), 0) << out;
  setenv("KEEL_FAULT_INJECT", "sigterm_at_step:6", 1);  // the signal arrives during step 6: it stops after it
  run_keel(args("log5_signalled", opts), &out);         // (its exit code is ExitCodes' business)
  unsetenv("KEEL_FAULT_INJECT");
  EXPECT_EQ(read_json(run_path("log5_signalled") + "/summary.json")["stopped_by"], "signal") << out;
  ASSERT_EQ(run_keel(args("log5_signalled", opts + "--resume auto"), &out), 0) << out;

  const auto straight = metric_records(run_path("log5_straight"));
  std::vector<int64_t> steps;
  for (const auto& r : straight) steps.push_back(r["step"].get<int64_t>());
  ASSERT_EQ(steps, (std::vector<int64_t>{5, 10, 12}));
  for (const auto& [run, stop_step, why] : {std::make_tuple("log5_stopped", 7, "stop_after_step"),
                                            std::make_tuple("log5_signalled", 6, "signal")}) {
    SCOPED_TRACE(run);
    std::vector<nlohmann::json> regular, stops;
    for (const auto& r : metric_records(run_path(run))) (r.contains("stop") ? stops : regular).push_back(r);
    ASSERT_EQ(stops.size(), 1u);
    EXPECT_EQ(stops[0]["step"], stop_step);
    EXPECT_EQ(stops[0]["stop"], why);
    EXPECT_TRUE(stops[0]["loss"].is_number());  // the steps since the previous record
    ASSERT_EQ(regular.size(), straight.size());
    for (size_t i = 0; i < straight.size(); ++i) expect_same_record(straight[i], regular[i]);
  }
}

// A full disk under metrics.jsonl (issue 31): the refused record is reported
// at once, naming the file and the errno; the run stops after that step with
// exit 4 and a checkpoint that carries the record, and the resumed run
// writes it, so the records end up as an uninterrupted run's.
TEST_F(TrainCli, FullDiskStopsTheRunAndTheResumeWritesTheRefusedRecord) {
  std::string out;
  ASSERT_EQ(run_keel(args("disk_straight"), &out), 0) << out;
  setenv("KEEL_FAULT_INJECT", "enospc_after:metrics.jsonl:5", 1);  // step 6's record is refused
  const int rc = run_keel(args("disk_full"), &out);
  unsetenv("KEEL_FAULT_INJECT");
  EXPECT_EQ(rc, 4) << out;  // environment
  const std::string refused = run_path("disk_full") + "/metrics.jsonl: cannot append a record: ";
  const size_t reported = out.find(refused);
  ASSERT_NE(reported, std::string::npos) << out;
  EXPECT_NE(out.find(std::strerror(ENOSPC), reported), std::string::npos) << out;
  // At once: before the checkpoint that follows it; and nothing trains on.
  EXPECT_LT(reported, out.find("checkpoints/step_00000006")) << out;
  EXPECT_EQ(out.find("step      7/"), std::string::npos) << out;
  EXPECT_EQ(read_json(run_path("disk_full") + "/summary.json")["stopped_by"], "write_failed");
  EXPECT_EQ(metric_records(run_path("disk_full")).size(), 5u);

  ASSERT_EQ(run_keel(args("disk_full", "--resume auto"), &out), 0) << out;
  EXPECT_NE(out.find("resumed from"), std::string::npos) << out;
  const auto a = metric_records(run_path("disk_straight")), b = metric_records(run_path("disk_full"));
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) expect_same_record(a[i], b[i]);
}

// The summary line before any evaluation (issue 31): "val loss n/a", as
// summary.json's nulls, not "nan (best inf)".
TEST_F(TrainCli, SummaryLineWithoutEvaluationSaysNotAvailable) {
  std::string out;
  ASSERT_EQ(run_keel(args("no_eval_yet", "--stop-after-step 2"), &out), 0) << out;  // the first eval is step 6's
  EXPECT_TRUE(read_json(run_path("no_eval_yet") + "/summary.json")["final_val_loss"].is_null());
  const size_t summary = out.find("summary: stop_after_step after 2 steps");
  ASSERT_NE(summary, std::string::npos) << out;
  const std::string line = out.substr(summary, out.find('\n', summary) - summary);
  EXPECT_NE(line.find("val loss n/a;"), std::string::npos) << line;
  EXPECT_EQ(line.find("nan"), std::string::npos) << line;
  EXPECT_EQ(line.find("inf"), std::string::npos) << line;
}

// train.ema_decay (issue 54): the average is checkpointed, so a run stopped
// and resumed ends with the uninterrupted run's average bit for bit; it is
// evaluated beside the live weights, and keel eval and export-hf read it.
TEST_F(TrainCli, WeightEmaResumesExactlyAndIsEvaluatedAndExported) {
  const std::string ema = "--set train.ema_decay=0.9 ";
  std::string out;
  ASSERT_EQ(run_keel(args("ema_straight", ema), &out), 0) << out;
  ASSERT_EQ(run_keel(args("ema_halves", ema + "--stop-after-step 6"), &out), 0) << out;
  ASSERT_EQ(run_keel(args("ema_halves", ema + "--resume auto"), &out), 0) << out;
  auto ema_of = [](const std::string& run) {
    std::map<std::string, torch::Tensor> m;
    for (auto& [k, t] : keel::read_safetensors(run_path(run) + "/checkpoints/step_00000012/ema.safetensors")) m[k] = t;
    return m;
  };
  auto a = ema_of("ema_straight"), b = ema_of("ema_halves");
  ASSERT_FALSE(a.empty());
  for (const auto& [k, t] : a) EXPECT_TRUE(torch::equal(t, b[k])) << k;
  // Evaluated at each evaluation, beside the live weights; in the summary.
  bool seen = false;
  for (const auto& r : read_jsonl(run_path("ema_straight") + "/metrics.jsonl"))
    if (r.contains("val_loss")) {
      ASSERT_TRUE(r.contains("ema") && r["ema"]["val_loss"].is_number()) << r.dump();
      EXPECT_NE(r["ema"]["val_loss"], r["val_loss"]);
      seen = true;
    }
  EXPECT_TRUE(seen);
  const auto summary = read_json(run_path("ema_straight") + "/summary.json");
  EXPECT_EQ(summary["ema"]["decay"], 0.9);
  EXPECT_TRUE(summary["ema"]["final_val_loss"].is_number());
  EXPECT_EQ(summary["ema"], read_json(run_path("ema_halves") + "/summary.json")["ema"]);
  // keel export-hf --weights ema writes the average; a run without one says so.
  const std::string hf = g_dir + "/ema_hf";
  ASSERT_EQ(run_keel("export-hf " + run_path("ema_straight") + " " + hf + " --weights ema", &out), 0) << out;
  const auto exported = keel::read_safetensors(hf + "/model.safetensors");
  bool matched = false;
  for (const auto& [k, t] : exported)
    if (k == "model.embed_tokens.weight") matched = torch::equal(t.to(torch::kFloat32), a.at("wte"));
  EXPECT_TRUE(matched) << "the exported embedding is not the average";
  ASSERT_EQ(run_keel(args("no_ema"), &out), 0) << out;
  EXPECT_EQ(run_keel("eval " + run_path("no_ema") + " --task builtin --weights ema", &out), 2) << out;
  EXPECT_NE(out.find("ema.safetensors: missing"), std::string::npos) << out;
  ASSERT_EQ(run_keel("eval " + run_path("ema_straight") + " --task builtin --weights ema", &out), 0) << out;
  EXPECT_EQ(run_keel("eval " + run_path("ema_straight") + " --task builtin --weights average", &out), 2) << out;
  EXPECT_NE(out.find("--weights"), std::string::npos) << out;
}

// keel average (issue 54): the mean of the newest N checkpoints' weights, a
// run that keel eval and export-hf read; asking for more checkpoints than
// there are, or writing over a non-empty directory, is refused.
TEST_F(TrainCli, AverageOfTheLastCheckpointsIsTheirMean) {
  std::string out;
  ASSERT_EQ(run_keel(args("avg_src"), &out), 0) << out;  // checkpoints at 4, 8, 12
  const std::string avg = g_dir + "/avg_out";
  ASSERT_EQ(run_keel("average " + run_path("avg_src") + " --last 3 --out " + avg, &out), 0) << out;
  EXPECT_NE(out.find("(steps 4 8 12)"), std::string::npos) << out;
  std::map<std::string, torch::Tensor> mean;
  for (const char* step : {"00000004", "00000008", "00000012"})
    for (auto& [k, t] : keel::read_safetensors(run_path("avg_src") + "/checkpoints/step_" + std::string(step) +
                                               "/model.safetensors")) {
      auto wide = t.to(torch::kFloat64) / 3.0;
      if (mean.count(k)) mean[k] += wide;
      else mean[k] = wide;
    }
  const auto written = keel::read_safetensors(avg + "/checkpoints/step_00000012/model.safetensors");
  ASSERT_FALSE(written.empty());
  for (const auto& [k, t] : written)
    EXPECT_TRUE(torch::allclose(t.to(torch::kFloat64), mean.at(k), 0, 1e-6)) << k;
  EXPECT_EQ(read_json(avg + "/checkpoints/step_00000012/state.json")["extra"]["averaged"]["steps"],
            nlohmann::json::array({4, 8, 12}));
  ASSERT_EQ(run_keel("eval " + avg + " --task builtin", &out), 0) << out;
  ASSERT_EQ(run_keel("export-hf " + avg + " " + g_dir + "/avg_hf", &out), 0) << out;
  // Refusals: more checkpoints than there are; a non-empty output; nothing written for either.
  EXPECT_EQ(run_keel("average " + run_path("avg_src") + " --last 9 --out " + g_dir + "/avg9", &out), 2) << out;
  EXPECT_NE(out.find("--last: 9, but"), std::string::npos) << out;
  EXPECT_FALSE(keel::path_exists(g_dir + "/avg9"));
  EXPECT_EQ(run_keel("average " + run_path("avg_src") + " --last 2 --out " + avg, &out), 2) << out;
  EXPECT_NE(out.find("exists and is not empty"), std::string::npos) << out;
  // The default place: inside the run, named by N and the newest step.
  ASSERT_EQ(run_keel("average " + run_path("avg_src") + " --last 2", &out), 0) << out;
  EXPECT_TRUE(keel::path_exists(run_path("avg_src") + "/averages/last2_step12/checkpoints/step_00000012/manifest.json"));
}

// train.update_clip (issue 54): every logged update is at most the bound,
// the record carries the optimizer's own update norm beside it, and the
// update norm is a signal keel report's early-warning section scores.
TEST_F(TrainCli, UpdateClipBoundsEveryUpdate) {
  std::string out;
  ASSERT_EQ(run_keel(args("uclip", "--set train.update_clip=0.01"), &out), 0) << out;
  int logged = 0;
  for (const auto& r : read_jsonl(run_path("uclip") + "/metrics.jsonl")) {
    if (!r.contains("update_norm")) continue;
    ++logged;
    EXPECT_LE(r["update_norm"].get<double>(), 0.01 * (1 + 1e-4)) << r.dump();
    EXPECT_GT(r["update_norm_preclip"].get<double>(), r["update_norm"].get<double>()) << r.dump();
  }
  EXPECT_EQ(logged, 12);
  // Per parameter: refused without a norm, and named.
  EXPECT_EQ(run_keel(args("uclip_bad", "--set train.update_clip_per_param=true"), &out), 2) << out;
  EXPECT_NE(out.find("train.update_clip_per_param: needs train.update_clip"), std::string::npos) << out;
}

// Cooldown branches (issue 54): a branch from the trunk's checkpoint at step
// 8 decays the LR to 0 over 4 steps by its formula, records its parent,
// resumes exactly, and a branch point without a checkpoint is refused naming
// the steps there are.
TEST_F(TrainCli, CooldownBranchFollowsItsScheduleAndResumesExactly) {
  std::string out;
  const std::string trunk_keys = "--set train.schedule=constant ";
  ASSERT_EQ(run_keel(args("cd_trunk", trunk_keys), &out), 0) << out;  // checkpoints at 4, 8, 12
  const std::string branch = trunk_keys + "--set train.cooldown_steps=4 --set train.cooldown_at=8 "
                             "--set train.cooldown_shape=1-sqrt --set train.cooldown_from=" + run_path("cd_trunk") + " ";
  ASSERT_EQ(run_keel(args("cd_branch", branch), &out), 0) << out;
  EXPECT_NE(out.find("cooldown branch of " + run_path("cd_trunk") + "/checkpoints/step_00000008"), std::string::npos)
      << out;
  const auto recs = read_jsonl(run_path("cd_branch") + "/metrics.jsonl");
  ASSERT_EQ(recs.size(), 4u) << "steps 9 to 12 only";
  for (const auto& r : recs) {
    const double x = (r["step"].get<double>() - 1 - 8) / 4.0;
    EXPECT_NEAR(r["lr"].get<double>(), 3.0e-3 * (1 - std::sqrt(x)), 1e-12) << r.dump();
  }
  const auto summary = read_json(run_path("cd_branch") + "/summary.json");
  EXPECT_EQ(summary["steps"], 12);
  EXPECT_EQ(summary["cooldown"]["parent_checkpoint"], run_path("cd_trunk") + "/checkpoints/step_00000008");
  // Its first step continues the trunk: the same weights, state and batch as the trunk's step 9, another LR.
  const auto trunk = read_jsonl(run_path("cd_trunk") + "/metrics.jsonl");
  EXPECT_EQ(trunk[8]["step"], 9);
  EXPECT_EQ(trunk[8]["loss"], recs[0]["loss"]) << "the loss of step 9 is computed before its update";
  // Stopped and resumed, the branch ends as the uninterrupted one did, and still knows its parent.
  ASSERT_EQ(run_keel(args("cd_halves", branch + "--stop-after-step 10"), &out), 0) << out;
  ASSERT_EQ(run_keel(args("cd_halves", branch + "--resume auto"), &out), 0) << out;
  const auto halves = read_jsonl(run_path("cd_halves") + "/metrics.jsonl");
  ASSERT_EQ(halves.size(), recs.size());
  for (size_t i = 0; i < recs.size(); ++i) EXPECT_EQ(halves[i]["loss"], recs[i]["loss"]) << i;
  EXPECT_EQ(read_json(run_path("cd_halves") + "/summary.json")["cooldown"]["parent_checkpoint"],
            summary["cooldown"]["parent_checkpoint"]);
  // No checkpoint at the branch point: refused, naming the steps there are.
  EXPECT_EQ(run_keel(args("cd_bad", trunk_keys + "--set train.cooldown_steps=4 --set train.cooldown_at=6 "
                                                 "--set train.cooldown_from=" + run_path("cd_trunk")),
                     &out),
            2)
      << out;
  EXPECT_NE(out.find("train.cooldown_at: 6: " + run_path("cd_trunk") + " has no valid checkpoint of that step "
                     "(checkpoints at: 4, 8, 12)"),
            std::string::npos)
      << out;
}

