// End-to-end data parallelism on the CPU (Gloo): two workers give the same
// per-step losses as one with the same global batch, resume is exact and
// works across world sizes, decisions are collective, and every failure
// (dead or hung worker, bad setup) ends the run with a clear message instead
// of a hang.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "checkpoint/safetensors.h"
#include "distributed/launcher.h"
#include "test_util.h"
#include "util/fs.h"

using keel_test::run_keel;

namespace {

std::string g_dir;

std::string base_config() { return g_dir + "/base.yaml"; }

std::string train_args(const std::string& name, const std::string& extra = "") {
  return "train " + base_config() + " --set run.name=" + name + " --set run.out_dir=" + g_dir + "/runs " + extra;
}
std::string run_path(const std::string& name) { return g_dir + "/runs/" + name; }

struct Step {
  double loss = NAN, val_loss = NAN, grad_norm = NAN;
  nlohmann::json layer_grad_norms, param_stats;
};
std::map<int64_t, Step> read_metrics(const std::string& name) {
  std::map<int64_t, Step> out;
  std::ifstream in(run_path(name) + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    Step s;
    s.loss = j["loss"].get<double>();
    if (j.contains("val_loss")) s.val_loss = j["val_loss"].get<double>();
    if (j.contains("grad_norm")) s.grad_norm = j["grad_norm"].get<double>();
    if (j.contains("layer_grad_norms")) s.layer_grad_norms = j["layer_grad_norms"];
    if (j.contains("params")) s.param_stats = j["params"];
    out[j["step"].get<int64_t>()] = s;
  }
  return out;
}

// Every number in b within `rel` of a's (relative, or absolute below 1e-30),
// the same keys and nulls; rel = 0: equal bit for bit. The shares of
// moments below eps (v_below_*) are counts over a tensor: where the
// gradients differ in their last bits one element may cross, so they get
// an absolute 1/16 (one element of a 16-element tensor) instead.
void expect_json_near(const nlohmann::json& a, const nlohmann::json& b, double rel, const std::string& where) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    const bool count = where.find(".v_below_") != std::string::npos;
    if (rel == 0) EXPECT_EQ(x, y) << where;
    else EXPECT_NEAR(x, y, count ? 1.0 / 16 : rel * std::max(std::abs(x), 1e-30)) << where;
  } else if (a.is_object() && b.is_object()) {
    ASSERT_EQ(a.size(), b.size()) << where;
    for (const auto& [k, v] : a.items()) {
      ASSERT_TRUE(b.contains(k)) << where << " lacks " << k;
      expect_json_near(v, b[k], rel, where + "." + k);
    }
  } else if (a.is_array() && b.is_array()) {
    ASSERT_EQ(a.size(), b.size()) << where;
    for (size_t i = 0; i < a.size(); ++i) expect_json_near(a[i], b[i], rel, where + "[" + std::to_string(i) + "]");
  } else {
    EXPECT_EQ(a, b) << where;
  }
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Same steps, losses within `tol` (relative): summation order differs
// between one process and an all-reduce over two.
void expect_same_losses(const std::string& a, const std::string& b, double tol, int64_t from_step = 1) {
  auto ma = read_metrics(a), mb = read_metrics(b);
  int64_t compared = 0;
  for (const auto& [step, s] : ma) {
    if (step < from_step) continue;
    ASSERT_TRUE(mb.count(step)) << b << " has no step " << step;
    EXPECT_NEAR(mb[step].loss, s.loss, tol * std::abs(s.loss)) << "step " << step << " of " << a << " vs " << b;
    if (!std::isnan(s.val_loss))
      EXPECT_NEAR(mb[step].val_loss, s.val_loss, tol * std::abs(s.val_loss)) << "val, step " << step;
    ++compared;
  }
  EXPECT_GT(compared, 3);
}

// A worker started by hand, as torchrun would start it.
struct Worker {
  pid_t pid = -1;
  std::string log;
};

Worker spawn_rank(int rank, int world, int port, const std::string& args, const std::string& log_name,
                  const std::map<std::string, std::string>& env = {}) {
  Worker w;
  w.log = g_dir + "/" + log_name + ".log";
  w.pid = fork();
  if (w.pid == 0) {
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
    setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
    setenv("LOCAL_WORLD_SIZE", std::to_string(std::min(world, 2)).c_str(), 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    const std::string cmd = std::string("exec ") + KEEL_BINARY + " " + args + " > " + w.log + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return w;
}

// Exit code (128 + signal when killed), or -1 if still running after `seconds`.
int wait_for(const Worker& w, double seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(w.pid, &status, WNOHANG) == w.pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

void kill_and_reap(const Worker& w) {
  kill(w.pid, SIGKILL);
  waitpid(w.pid, nullptr, 0);
}

// Whether the worker has installed its SIGTERM handler (the mask of caught
// signals in /proc), waiting up to `seconds`: a signal sent before that would
// kill it by default and prove nothing about how keel honours it.
bool catches_sigterm(const Worker& w, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream status("/proc/" + std::to_string(w.pid) + "/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("SigCgt:", 0) == 0 && (std::stoull(line.substr(7), nullptr, 16) >> (SIGTERM - 1)) & 1) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

class DataParallel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_dir = keel_test::make_temp_dir("data_parallel");
    keel_test::write_file(g_dir + "/corpus.txt", keel_test::make_sentence_corpus(11, 300));
    keel_test::write_file(
        base_config(),
        "model: {vocab_size: 320, max_seq_len: 32, d_model: 32, n_layers: 2, n_heads: 2, n_kv_heads: 1}\n"
        "data: {dir: " + g_dir + "/data, sources: [" + g_dir + "/corpus.txt], doc_separator: '%', "
        "val_fraction: 0.1}\n"
        "train: {max_steps: 12, batch_size: 4, lr: 3.0e-3, warmup_steps: 2, log_every: 1, eval_every: 6, "
        "eval_batches: 2, threads: 1}\n"
        "checkpoint: {every: 6, keep_last: 5}\n"
        "monitor: {every: 4, sequences: 2}\n"
        "dist: {timeout_s: 30}\n");
    std::string out;
    ASSERT_EQ(run_keel("prepare " + base_config() + " --quiet", &out), 0) << out;
    ASSERT_EQ(run_keel(train_args("one"), &out), 0) << out;  // the single-process reference
  }
  static void TearDownTestSuite() { keel::remove_tree(g_dir); }
};

}  // namespace

TEST_F(DataParallel, TwoWorkersGiveTheLossesOfOne) {
  std::string out;
  ASSERT_EQ(run_keel("launch --nproc 2 -- " + train_args("two"), &out), 0) << out;
  expect_same_losses("one", "two", 1e-4);
  EXPECT_NE(out.find("parameters identical on all 2 ranks after step 12"), std::string::npos) << out;
  EXPECT_NE(out.find("broadcast to 2 ranks and checked equal"), std::string::npos) << out;
  // Rank 0 alone wrote; the summary records the world size.
  auto summary = read_json(run_path("two") + "/summary.json");
  EXPECT_EQ(summary["world_size"], 2);
  EXPECT_EQ(summary["steps"], 12);
  // Non-zero ranks print warnings only: one settings table, one line per step.
  size_t tables = 0;
  for (size_t p = out.find("| data parallel"); p != std::string::npos; p = out.find("| data parallel", p + 1)) ++tables;
  EXPECT_EQ(tables, 1u) << out;
}

// Muon (issue 21): every rank orthogonalises the same all-reduced gradient,
// so two ranks take the single process's steps and stay identical.
TEST_F(DataParallel, MuonOnTwoWorkersGivesTheLossesOfOne) {
  const std::string muon = "--set train.optimizer=muon --set train.lr=0.02";
  std::string out;
  ASSERT_EQ(run_keel(train_args("muon_one", muon), &out), 0) << out;
  ASSERT_EQ(run_keel("launch --nproc 2 -- " + train_args("muon_two", muon), &out), 0) << out;
  expect_same_losses("muon_one", "muon_two", 1e-4);
  EXPECT_NE(out.find("parameters identical on all 2 ranks after step 12"), std::string::npos) << out;
}

// µP/CompleteP (issue 33): the per-parameter LR, decay and ε multipliers come
// from the config alone, so every rank applies the same ones.
TEST_F(DataParallel, CompletePOnTwoWorkersGivesTheLossesOfOne) {
  const std::string cp = "--set model.parametrization=completep --set model.mup.base_width=16 "
                         "--set model.mup.base_depth=1";
  std::string out;
  ASSERT_EQ(run_keel(train_args("completep_one", cp), &out), 0) << out;
  ASSERT_EQ(run_keel("launch --nproc 2 -- " + train_args("completep_two", cp), &out), 0) << out;
  expect_same_losses("completep_one", "completep_two", 1e-4);
  EXPECT_NE(out.find("parameters identical on all 2 ranks after step 12"), std::string::npos) << out;
}

// Recomputed blocks accumulate their parameters' gradients inside a nested
// backward; the overlapped bucket all-reduces must still see every one.
TEST_F(DataParallel, ActivationCheckpointingOnTwoWorkersGivesTheLossesOfOne) {
  std::string out;
  ASSERT_EQ(run_keel("launch --nproc 2 -- " + train_args("ckpt_two", "--set train.activation_checkpointing=full"), &out),
            0)
      << out;
  expect_same_losses("one", "ckpt_two", 1e-4);
  EXPECT_NE(out.find("parameters identical on all 2 ranks after step 12"), std::string::npos) << out;
  // Selective: the replayed linears' gradients reach the overlapped buckets too.
  ASSERT_EQ(run_keel("launch --nproc 2 -- " + train_args("sel_two", "--set train.activation_checkpointing=selective"),
                     &out),
            0)
      << out;
  expect_same_losses("one", "sel_two", 1e-4);
  auto full = read_metrics("ckpt_two"), selective = read_metrics("sel_two");
  for (const auto& [step, s] : full) EXPECT_EQ(selective[step].loss, s.loss) << "step " << step;  // bit for bit
}

// ZeRO-1 (dist.zero 1): the numbers of the replicated run, bit for bit, for
// AdamW and Muon on 2 and 3 ranks, although its gradients are
// reduce-scattered to their owners: losses, the gradient norm (and so
// clipping), per-layer gradient norms and per-parameter statistics, each
// taken from its owner; its checkpoint holds the same logical optimizer
// state; and a run saved on N ranks resumes on M with the uninterrupted
// M-rank run's losses, for N and M each of 1, 2 and 3, sharded or not:
// 2 (sharded) -> 3 (sharded) and -> 1, 1 -> 2 (sharded), 3 (sharded) -> 2.
TEST_F(DataParallel, ZeroOneGivesTheReplicatedNumbersAndResumesOnOtherWorldSizes) {
  // 2 and 3 ranks; a clip that binds; every figure that reads all gradients, every step; a weight EMA (issue 54).
  const std::string six =
      "--set train.batch_size=6 --set train.grad_clip=0.5 --set monitor.layer_grad_norms=true "
      "--set monitor.param_stats=true --set monitor.every=1 --set train.log_every=1 --set train.ema_decay=0.9 ";
  std::string out;
  ASSERT_EQ(run_keel(train_args("one6", six), &out), 0) << out;
  for (const std::string n : {"2", "3"}) {
    ASSERT_EQ(run_keel("launch --nproc " + n + " -- " + train_args("rep" + n, six), &out), 0) << out;
    ASSERT_EQ(run_keel("launch --nproc " + n + " -- " + train_args("zero" + n, six + "--set dist.zero=1"), &out), 0)
        << out;
    EXPECT_NE(out.find("ZeRO-1: "), std::string::npos) << out;
    EXPECT_NE(out.find("on all " + n), std::string::npos) << out;
    EXPECT_NE(out.find("reduce-scattered to their owners"), std::string::npos) << out;
    auto rep = read_metrics("rep" + n), zero = read_metrics("zero" + n);
    ASSERT_EQ(zero.size(), 12u);
    // Two ranks: a sum of two is the same whichever rank adds, so the
    // reduce-scatter gives the all-reduce's gradients bit for bit. Three:
    // Gloo's reduce-scatter and all-reduce add the three in different orders,
    // so the gradients differ in the last bits and the runs drift by rounding.
    const double rel = n == "2" ? 0.0 : 1e-4;
    for (const auto& [step, s] : rep) {
      const std::string at = n + " ranks, step " + std::to_string(step);
      expect_json_near(s.loss, zero[step].loss, rel, at + " loss");
      if (!std::isnan(s.val_loss)) expect_json_near(s.val_loss, zero[step].val_loss, rel, at + " val_loss");
      expect_json_near(s.grad_norm, zero[step].grad_norm, rel, at + " grad_norm");
      ASSERT_FALSE(s.layer_grad_norms.is_null()) << at;
      expect_json_near(s.layer_grad_norms, zero[step].layer_grad_norms, rel, at + " layer_grad_norms");
      ASSERT_FALSE(s.param_stats.is_null()) << at;
      expect_json_near(s.param_stats, zero[step].param_stats, n == "2" ? 0.0 : 1e-3, at + " params");
    }
  }
  const std::string muon = six + "--set train.optimizer=muon ";
  ASSERT_EQ(run_keel("launch --nproc 2 -- " + train_args("muon_rep", muon), &out), 0) << out;
  ASSERT_EQ(run_keel("launch --nproc 2 -- " + train_args("muon_zero", muon + "--set dist.zero=1"), &out), 0) << out;
  auto mr = read_metrics("muon_rep"), mz = read_metrics("muon_zero");
  for (const auto& [step, s] : mr) {
    EXPECT_EQ(mz[step].loss, s.loss) << "Muon, step " << step;
    EXPECT_EQ(mz[step].grad_norm, s.grad_norm) << "Muon, step " << step;
    expect_json_near(s.param_stats, mz[step].param_stats, 0.0, "Muon params, step " + std::to_string(step));
  }

  // One logical state: the same tensors by name as the replicated run's checkpoint.
  auto state_of = [](const std::string& run) {
    std::map<std::string, torch::Tensor> m;
    for (auto& [k, t] : keel::read_safetensors(run_path(run) + "/checkpoints/step_00000012/optimizer.safetensors"))
      m[k] = t;
    return m;
  };
  for (const std::string run : {"zero2", "muon_zero"}) {
    auto rep = state_of(run == "zero2" ? "rep2" : "muon_rep"), zero = state_of(run);
    ASSERT_EQ(rep.size(), zero.size()) << run;
    for (const auto& [k, t] : rep) {
      ASSERT_TRUE(zero.count(k)) << run << " lacks " << k;
      EXPECT_TRUE(torch::equal(zero[k], t)) << run << ": " << k;
    }
  }

  // The weight EMA: every rank keeps the whole average (also under ZeRO-1),
  // so rank 0's checkpoint holds the replicated run's bit for bit, and one
  // rank's to rounding; resumed on another world size it continues.
  auto ema_of = [](const std::string& run, const std::string& step) {
    std::map<std::string, torch::Tensor> m;
    for (auto& [k, t] : keel::read_safetensors(run_path(run) + "/checkpoints/step_" + step + "/ema.safetensors"))
      m[k] = t;
    return m;
  };
  auto expect_same_ema = [&](const std::string& a, const std::string& b, double tol) {
    auto ea = ema_of(a, "00000012"), eb = ema_of(b, "00000012");
    ASSERT_FALSE(ea.empty()) << a;
    ASSERT_EQ(ea.size(), eb.size()) << a << " / " << b;
    for (const auto& [k, t] : ea) {
      ASSERT_TRUE(eb.count(k)) << b << " lacks " << k;
      if (tol == 0) EXPECT_TRUE(torch::equal(t, eb[k])) << a << " / " << b << ": " << k;
      else EXPECT_TRUE(torch::allclose(t, eb[k], tol, tol)) << a << " / " << b << ": " << k;
    }
  };
  expect_same_ema("rep2", "zero2", 0.0);
  expect_same_ema("one6", "rep2", 1e-4);

  // Saved sharded on 2 ranks, resumed sharded on 3 and replicated on 1.
  ASSERT_EQ(run_keel("launch --nproc 2 -- " + train_args("zsaved", six + "--set dist.zero=1 --stop-after-step 6"), &out),
            0)
      << out;
  const std::string ckpt = run_path("zsaved") + "/checkpoints/step_00000006";
  ASSERT_EQ(run_keel("launch --nproc 3 -- " + train_args("zon3", six + "--set dist.zero=1 --resume " + ckpt), &out), 0)
      << out;
  expect_same_losses("rep3", "zon3", 1e-4, 7);
  ASSERT_EQ(run_keel(train_args("zon1", six + "--resume " + ckpt), &out), 0) << out;
  expect_same_losses("one6", "zon1", 1e-4, 7);
  expect_same_ema("one6", "zon1", 1e-4);
  // Saved by one process, resumed sharded on 2; saved sharded on 3, resumed replicated on 2.
  ASSERT_EQ(run_keel(train_args("saved1", six + "--stop-after-step 6"), &out), 0) << out;
  ASSERT_EQ(run_keel("launch --nproc 2 -- " +
                         train_args("z1on2", six + "--set dist.zero=1 --resume " + run_path("saved1") +
                                                 "/checkpoints/step_00000006"),
                     &out),
            0)
      << out;
  EXPECT_NE(out.find("saved by 1 rank(s) on 2"), std::string::npos) << out;
  expect_same_losses("rep2", "z1on2", 1e-4, 7);
  ASSERT_EQ(run_keel("launch --nproc 3 -- " + train_args("zsaved3", six + "--set dist.zero=1 --stop-after-step 6"), &out),
            0)
      << out;
  ASSERT_EQ(run_keel("launch --nproc 2 -- " +
                         train_args("z3on2", six + "--resume " + run_path("zsaved3") + "/checkpoints/step_00000006"),
                     &out),
            0)
      << out;
  EXPECT_NE(out.find("saved by 3 rank(s) on 2"), std::string::npos) << out;
  expect_same_losses("rep2", "z3on2", 1e-4, 7);
}

// train.update_clip (issue 54) under data parallelism: every rank holds the
// whole update after the step (ZeRO-1 broadcasts the owners' parameters), so
// each clips it alike, and two ranks give one rank's losses.
TEST_F(DataParallel, UpdateClipOnTwoWorkersGivesTheLossesOfOne) {
  const std::string clip = "--set train.update_clip=0.02 ";
  std::string out;
  ASSERT_EQ(run_keel(train_args("uclip_one", clip), &out), 0) << out;
  ASSERT_EQ(run_keel("launch --nproc 2 -- " + train_args("uclip_two", clip + "--set dist.zero=1"), &out), 0) << out;
  expect_same_losses("uclip_one", "uclip_two", 1e-4, 1);
}

// A cooldown branch (issue 54) on two workers, from a one-worker trunk's
// checkpoint: the losses of the same branch on one worker.
TEST_F(DataParallel, CooldownBranchOnTwoWorkersGivesTheLossesOfOne) {
  std::string out;
  ASSERT_EQ(run_keel(train_args("cd_trunk", "--set train.schedule=constant --set checkpoint.every=6"), &out), 0) << out;
  const std::string branch = "--set train.schedule=constant --set train.cooldown_steps=6 --set train.cooldown_at=6 "
                             "--set train.cooldown_from=" + run_path("cd_trunk") + " ";
  ASSERT_EQ(run_keel(train_args("cd_one", branch), &out), 0) << out;
  ASSERT_EQ(run_keel("launch --nproc 2 -- " + train_args("cd_two", branch + "--set dist.zero=1"), &out), 0) << out;
  expect_same_losses("cd_one", "cd_two", 1e-4, 7);
}

// keel replay --numerics (issue 54) on a run two workers trained: its
// checkpoint is one logical state and the data order the same, so one
// process replays the window in bf16, fp32 and fp64.
TEST_F(DataParallel, NumericsDiffReplaysATwoWorkerRun) {
  std::string out;
  ASSERT_EQ(run_keel("launch --nproc 2 -- " +
                         train_args("nd_two", "--set train.precision=bf16 --set checkpoint.every=6 --set dist.zero=1"),
                     &out),
            0)
      << out;
  ASSERT_EQ(run_keel("replay " + run_path("nd_two") + " --step 8 --numerics --steps 1", &out), 0) << out;
  EXPECT_NE(out.find("no quantity differed past the threshold"), std::string::npos) << out;
}

TEST_F(DataParallel, OneWorkerThroughTheLauncherIsAGroupOfOne) {
  std::string out;
  ASSERT_EQ(run_keel("launch --nproc 1 -- " + train_args("launch_one"), &out), 0) << out;
  EXPECT_NE(out.find("| data parallel            | 1 ranks, gloo"), std::string::npos) << out;
  expect_same_losses("one", "launch_one", 1e-5);
}

TEST_F(DataParallel, AccumulationAndManySmallBucketsGiveTheSameLosses) {
  std::string out;
  // One sequence per micro-step (2 micro-steps per rank) and buckets of a
  // few KiB, all-reduced from the hooks as backward fills them.
  ASSERT_EQ(run_keel("launch --nproc 2 -- " +
                         train_args("buckets", "--set train.micro_batch_size=1 --set dist.bucket_mb=0.004"),
                     &out),
            0)
      << out;
  // Validation batches hold micro_batch_size sequences, so the reference
  // is one process with the same micro-batch (its 1-row validation batch
  // cannot split over 2 ranks: rank 0 evaluates it alone).
  ASSERT_EQ(run_keel(train_args("one_micro", "--set train.micro_batch_size=1"), &out), 0) << out;
  expect_same_losses("one_micro", "buckets", 1e-4);
  // And all-reduced after backward instead.
  ASSERT_EQ(run_keel("launch --nproc 2 -- " + train_args("after", "--set dist.overlap=false"), &out), 0) << out;
  expect_same_losses("one", "after", 1e-4);
}

TEST_F(DataParallel, ResumeIsExactAndWorksOnAnotherWorldSize) {
  std::string out;
  ASSERT_EQ(run_keel("launch --nproc 2 -- " + train_args("straight2"), &out), 0) << out;
  ASSERT_EQ(run_keel("launch --nproc 2 -- " + train_args("resumed2", "--stop-after-step 6"), &out), 0) << out;
  // Every rank's generator state is in the checkpoint.
  const std::string ckpt = run_path("resumed2") + "/checkpoints/step_00000006";
  auto rng = keel::read_safetensors(ckpt + "/rng.safetensors");
  std::set<std::string> names;
  for (const auto& [name, t] : rng) names.insert(name);
  EXPECT_TRUE(names.count("cpu") && names.count("rank1.cpu")) << out;
  ASSERT_EQ(run_keel("launch --nproc 2 -- " + train_args("resumed2", "--resume auto"), &out), 0) << out;
  auto a = read_metrics("straight2"), b = read_metrics("resumed2");
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  for (const auto& [step, s] : a) EXPECT_EQ(b[step].loss, s.loss) << "step " << step;  // bit for bit

  // The same checkpoint resumed by one process: same global batches, so the
  // single-process losses (within summation tolerance).
  ASSERT_EQ(run_keel(train_args("resumed1", "--resume " + ckpt), &out), 0) << out;
  EXPECT_NE(out.find("saved by 2 rank(s) on 1"), std::string::npos) << out;
  expect_same_losses("one", "resumed1", 1e-4, 7);
}

TEST_F(DataParallel, KilledWorkerEndsTheOtherWithinTheTimeout) {
  const int port = keel::find_free_port();
  const std::string args = train_args("killed", "--set train.max_steps=200 --set checkpoint.every=0");
  auto r0 = spawn_rank(0, 2, port, args, "killed0");
  auto r1 = spawn_rank(1, 2, port, args, "killed1", {{"KEEL_FAULT_INJECT", "kill_rank_at_step:1:3"}});
  EXPECT_EQ(wait_for(r1, 60), 128 + SIGKILL);
  const int code = wait_for(r0, 40);  // dist.timeout_s is 30
  if (code < 0) kill_and_reap(r0);
  EXPECT_GT(code, 0) << "rank 0 still running 40 s after rank 1 died";
  EXPECT_EQ(code, 4) << "a failed peer is the environment's fault (exit 4)";
  const std::string log = keel_test::read_file(r0.log);
  EXPECT_NE(log.find("Another worker probably died or hung"), std::string::npos) << log;
}

TEST_F(DataParallel, HungWorkerEndsTheOtherAfterTheTimeout) {
  const int port = keel::find_free_port();
  const std::string args =
      train_args("hung", "--set train.max_steps=200 --set checkpoint.every=0 --set dist.timeout_s=4");
  auto r0 = spawn_rank(0, 2, port, args, "hung0");
  auto r1 = spawn_rank(1, 2, port, args, "hung1", {{"KEEL_FAULT_INJECT", "hang_rank_at_step:1:3"}});
  const auto t0 = std::chrono::steady_clock::now();
  const int code = wait_for(r0, 60);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  kill_and_reap(r1);
  if (code < 0) kill_and_reap(r0);
  EXPECT_GT(code, 0) << "rank 0 did not give up on a hung rank 1";
  EXPECT_EQ(code, 4) << "a hung peer is the environment's fault (exit 4)";
  EXPECT_LT(waited, 45.0);
  const std::string log = keel_test::read_file(r0.log);
  EXPECT_NE(log.find("dist.timeout_s = 4 s"), std::string::npos) << log;
}

TEST_F(DataParallel, SignalToOneRankStopsBothAtTheSameStep) {
  const int port = keel::find_free_port();
  const std::string args = train_args("signal", "--set train.max_steps=100000 --set checkpoint.every=0 "
                                                "--set train.warmup_steps=2");
  auto r0 = spawn_rank(0, 2, port, args, "signal0");
  auto r1 = spawn_rank(1, 2, port, args, "signal1");
  // Wait for a few steps, then SIGTERM rank 1 alone.
  for (int i = 0; i < 600 && read_metrics("signal").size() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_GE(read_metrics("signal").size(), 3u) << keel_test::read_file(r0.log);
  kill(r1.pid, SIGTERM);
  const int c1 = wait_for(r1, 60), c0 = wait_for(r0, 60);
  if (c0 < 0) kill_and_reap(r0);
  if (c1 < 0) kill_and_reap(r1);
  // Interrupted, not finished: 143 on both, the rank that only heard of the
  // signal through the vote as if it had received SIGTERM itself.
  EXPECT_EQ(c0, 128 + SIGTERM) << keel_test::read_file(r0.log);
  EXPECT_EQ(c1, 128 + SIGTERM) << keel_test::read_file(r1.log);
  auto summary = read_json(run_path("signal") + "/summary.json");
  EXPECT_EQ(summary["stopped_by"], "signal");
  const int64_t steps = summary["steps"].get<int64_t>();
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(steps));
  EXPECT_TRUE(keel::path_exists(run_path("signal") + "/checkpoints/" + name)) << "no checkpoint at step " << steps;
  EXPECT_NE(keel_test::read_file(r0.log).find("a signal to another rank"), std::string::npos);
}

TEST_F(DataParallel, LauncherExitCodes) {
  std::string out;
  // A worker that fails on bad input: the launcher exits with its code (2).
  EXPECT_EQ(run_keel("launch --nproc 2 -- " + train_args("bad", "--set train.lr=-1"), &out), 2) << out;
  EXPECT_NE(out.find("train.lr"), std::string::npos) << out;
  // A worker killed by a signal: 128 + 9, and the other one is stopped.
  setenv("KEEL_FAULT_INJECT", "kill_rank_at_step:1:2", 1);
  const int code = run_keel("launch --nproc 2 --grace 5 -- " +
                                train_args("launch_killed2", "--set train.max_steps=200 --set checkpoint.every=0"),
                            &out);
  unsetenv("KEEL_FAULT_INJECT");
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("rank 1"), std::string::npos) << out;
  EXPECT_NE(out.find("killed by signal 9"), std::string::npos) << out;
  // Nothing to run.
  EXPECT_NE(run_keel("launch --nproc 2", &out), 0);
}

TEST_F(DataParallel, SetupErrorsAreClearAndExitWithTwo) {
  std::string out;
  // The global batch must split over the ranks.
  EXPECT_EQ(run_keel("launch --nproc 3 -- " + train_args("three"), &out), 2) << out;
  EXPECT_NE(out.find("does not split evenly over 3 ranks"), std::string::npos) << out;

  // Different configs on different ranks are refused, naming the key.
  {
    const int port = keel::find_free_port();
    auto r0 = spawn_rank(0, 2, port, train_args("mismatch"), "mismatch0");
    auto r1 = spawn_rank(1, 2, port, train_args("mismatch", "--set train.lr=1e-3"), "mismatch1");
    EXPECT_EQ(wait_for(r0, 60), 2);
    EXPECT_EQ(wait_for(r1, 60), 2);
    const std::string log = keel_test::read_file(r0.log);
    EXPECT_NE(log.find("rank 1's resolved config"), std::string::npos) << log;
    EXPECT_NE(log.find("train.lr"), std::string::npos) << log;
  }
  // Ranks started with different world sizes.
  {
    const int port = keel::find_free_port();
    auto r0 = spawn_rank(0, 2, port, train_args("worlds"), "worlds0");
    auto r1 = spawn_rank(1, 3, port, train_args("worlds"), "worlds1");
    const int c1 = wait_for(r1, 60);
    if (c1 < 0) kill_and_reap(r1);
    // Rank 0 would wait out dist.timeout_s (30 s) for a rank 1 that has left;
    // only rank 1's refusal is under test.
    kill_and_reap(r0);
    EXPECT_EQ(c1, 2) << keel_test::read_file(r1.log);
    EXPECT_NE(keel_test::read_file(r1.log).find("WORLD_SIZE"), std::string::npos) << keel_test::read_file(r1.log);
  }
  // The rendezvous port is taken.
  {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(listen(fd, 1), 0);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    const int port = ntohs(addr.sin_port);
    EXPECT_EQ(run_keel("launch --nproc 2 --master-port " + std::to_string(port) + " -- " +
                           train_args("port", "--set dist.timeout_s=5"),
                       &out),
              2)
        << out;
    EXPECT_NE(out.find("already in use"), std::string::npos) << out;
    // Rank 1, still trying to reach the rendezvous, left on the launcher's
    // SIGTERM instead of being killed after the grace period.
    EXPECT_EQ(out.find("still running"), std::string::npos) << out;
    close(fd);
  }
  // A rank that never comes.
  {
    auto r0 = spawn_rank(0, 2, keel::find_free_port(), train_args("lonely", "--set dist.timeout_s=2"), "lonely0");
    const int code = wait_for(r0, 60);
    if (code < 0) kill_and_reap(r0);
    EXPECT_EQ(code, 2);
    EXPECT_NE(keel_test::read_file(r0.log).find("rank(s) 1 did not join"), std::string::npos)
        << keel_test::read_file(r0.log);
  }
  // Nobody at the master address.
  {
    auto r1 = spawn_rank(1, 2, keel::find_free_port(), train_args("alone", "--set dist.timeout_s=2"), "alone1");
    const int code = wait_for(r1, 60);
    if (code < 0) kill_and_reap(r1);
    EXPECT_EQ(code, 2);
    EXPECT_NE(keel_test::read_file(r1.log).find("could not reach rank 0's rendezvous"), std::string::npos)
        << keel_test::read_file(r1.log);
  }
}

// SIGTERM while a rank waits at the rendezvous (for rank 0 to listen, or for
// the other ranks to join) ends it at once, with exit 143 and a message,
// instead of after dist.timeout_s: c10d's own waits do not look at keel's
// stop flag, so until the group is made the handler itself leaves
// (LeaveAtOnceOnStop).
TEST_F(DataParallel, ASignalEndsTheRendezvousAtOnce) {
  const std::string patient = "--set dist.timeout_s=120";
  auto client = spawn_rank(1, 2, keel::find_free_port(), train_args("sig1", patient), "sig1");
  auto host = spawn_rank(0, 2, keel::find_free_port(), train_args("sig0", patient), "sig0");
  for (const auto* w : {&client, &host}) {
    ASSERT_TRUE(catches_sigterm(*w, 60)) << keel_test::read_file(w->log);
    std::this_thread::sleep_for(std::chrono::milliseconds(700));  // into the rendezvous
    const auto t0 = std::chrono::steady_clock::now();
    kill(w->pid, SIGTERM);
    const int code = wait_for(*w, 20);
    if (code < 0) kill_and_reap(*w);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string log = keel_test::read_file(w->log);
    EXPECT_EQ(code, 128 + SIGTERM) << log;
    EXPECT_NE(log.find("SIGTERM during the rendezvous"), std::string::npos) << log;
    EXPECT_LT(waited, 15.0) << "a rank at the rendezvous ignored SIGTERM: " << log;
  }
}

// monitor.on_spike: rewind under data parallelism: every rank judges the same
// all-reduced loss and agrees through one collective, so both go back to the
// same checkpoint and skip the same batches. The run completes with the
// replicas identical (checked by the trainer) and records the rewind once.
TEST_F(DataParallel, RewindIsDecidedByEveryRankAlike) {
  std::string out;
  setenv("KEEL_FAULT_INJECT", "loss_x10_at_step:9", 1);
  const int rc = run_keel("launch --nproc 2 -- " +
                              train_args("rewind2", "--set monitor.on_spike=rewind --set monitor.spike_window=8 "
                                                    "--set monitor.spike_warmup=4 --set monitor.spike_threshold=20 "
                                                    "--set monitor.diverge_loss_factor=100"),
                          &out);
  unsetenv("KEEL_FAULT_INJECT");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("parameters identical on all 2 ranks after step 12"), std::string::npos) << out;
  auto summary = read_json(run_path("rewind2") + "/summary.json");
  EXPECT_EQ(summary["stopped_by"], "completed");
  EXPECT_GE(summary["rewinds"].get<int64_t>(), 1);
  bool planted = false;
  for (const auto& r : summary["data_skips"]) planted |= r["spike_step"] == 9 && r["after_step"] == 6;
  EXPECT_TRUE(planted) << summary.dump(2);  // checkpoints every 6 steps: back to step 6
}
