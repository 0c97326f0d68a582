// keel plan's memory model (train/memory_plan.h): its fixed part equals the
// bytes of the tensors a real model and optimizer hold, ZeRO-1's shard is the
// largest rank's share as optim/zero.h deals it, the largest micro-batch is
// the largest whose peak fits, and the activation part, per sequence, is
// within 20% of the growth of the measured CPU peak (keel bench's max RSS,
// live bytes) from one sequence to three.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "config/config.h"
#include "model/init.h"
#include "optim/zero.h"
#include "test_util.h"
#include "model/cpu_attention.h"
#include "train/memory_plan.h"
#include "train/training_setup.h"

using keel::Config;
using keel::MemoryPlan;
using keel::MemoryPlanOptions;

namespace {

Config bench_cpu(const std::vector<std::string>& overrides = {}) {
  return keel::load_config(keel_test::source_path("configs/bench-cpu.yaml"), overrides);
}

double state_bytes(const keel::Optimizer& opt) {
  double n = 0;
  for (const auto& [name, t] : opt.state()) n += static_cast<double>(t.numel() * t.element_size());
  return n;
}

}  // namespace

TEST(MemoryPlan, FixedBytesAreThoseOfTheRealModelAndOptimizer) {
  for (const std::string optimizer : {"adamw", "muon"}) {
    Config cfg = bench_cpu({"train.optimizer=" + optimizer, "model.n_layers=2"});
    auto model = keel::build_model(cfg.model, 1);
    auto opt = keel::make_model_optimizer(model, cfg);
    double weights = 0;
    for (const auto& p : opt->params()) weights += static_cast<double>(p.param.numel() * p.param.element_size());
    MemoryPlanOptions o;
    o.cuda = false;
    const MemoryPlan plan = keel::plan_memory(cfg, o);
    EXPECT_EQ(plan.weights, weights) << optimizer;
    EXPECT_EQ(plan.gradients, weights) << optimizer;
    EXPECT_EQ(plan.optimizer_replicated, state_bytes(*opt)) << optimizer;
    EXPECT_EQ(plan.optimizer_per_rank, plan.optimizer_replicated) << "one rank: nothing to shard";
    EXPECT_EQ(plan.weight_casts, 0) << "fp32 on the CPU: no bf16 copies";
  }
}

TEST(MemoryPlan, ZeroOneKeepsTheLargestRanksShare) {
  for (const int ranks : {2, 3, 8}) {
    Config cfg = bench_cpu({"dist.zero=1"});
    MemoryPlanOptions o;
    o.ranks = ranks;
    const MemoryPlan plan = keel::plan_memory(cfg, o);
    // At least an even share, and at most that plus the largest tensor's state (whole parameters).
    EXPECT_GE(plan.optimizer_per_rank, plan.optimizer_replicated / ranks);
    const double largest = 2.0 * 4 * cfg.model.padded_vocab() * cfg.model.d_model + 4;
    EXPECT_LE(plan.optimizer_per_rank, plan.optimizer_replicated / ranks + largest) << ranks;
    cfg.dist.zero = 0;
    EXPECT_EQ(keel::plan_memory(cfg, o).optimizer_per_rank, plan.optimizer_replicated) << "replicated";
  }
}

TEST(MemoryPlan, CudaCountsBf16CastsAndTheLargestMicroBatchFits) {
  Config cfg = keel::load_config(keel_test::source_path("configs/gpt2-124m.yaml"), {});
  MemoryPlanOptions o;  // CUDA, bf16 autocast
  const MemoryPlan plan = keel::plan_memory(cfg, o);
  EXPECT_EQ(plan.precision, "bf16 autocast");
  EXPECT_EQ(plan.weight_casts, 2.0 * static_cast<double>(plan.matmul_params));
  for (double gib : {24.0, 48.0, 80.0}) {
    const int64_t b = plan.max_micro_batch(gib);
    ASSERT_GT(b, 0) << gib;
    EXPECT_LE(plan.peak_bytes(b), MemoryPlan::usable_bytes(gib, true)) << gib;
    EXPECT_GT(plan.peak_bytes(b + 1), MemoryPlan::usable_bytes(gib, true)) << gib;
  }
  EXPECT_EQ(plan.max_micro_batch(1.0), 0) << "1 GiB holds not even the CUDA context";
  // Checkpointing keeps less per sequence, so more sequences fit.
  cfg.train.activation_checkpointing = keel::ActivationCheckpointing::full;
  const MemoryPlan full = keel::plan_memory(cfg, o);
  EXPECT_LT(full.saved_per_seq + full.transient_per_seq, (plan.saved_per_seq + plan.transient_per_seq) / 2);
  EXPECT_GT(full.max_micro_batch(80), plan.max_micro_batch(80));
}

// Issue 54: the weight EMA is one more copy of the weights on every rank,
// ZeRO-1 or not (it averages the whole model there too).
TEST(MemoryPlan, TheWeightEmaCostsOneCopyOfTheWeights) {
  Config cfg = bench_cpu();
  MemoryPlanOptions o;
  const MemoryPlan plain = keel::plan_memory(cfg, o);
  cfg.train.ema_decay = 0.999;
  const MemoryPlan with_ema = keel::plan_memory(cfg, o);
  EXPECT_EQ(plain.ema, 0);
  EXPECT_EQ(with_ema.ema, with_ema.weights);
  EXPECT_EQ(with_ema.static_bytes() - plain.static_bytes(), with_ema.weights);
  cfg.dist.zero = 1;
  o.ranks = 4;
  EXPECT_EQ(keel::plan_memory(cfg, o).ema, with_ema.weights);
  EXPECT_NE(keel::format_memory_plan(with_ema, cfg, o).find("weight EMA"), std::string::npos);
}

// Issue 52: under data.document_mask, SDPA's mask path keeps a [T, T] mask,
// and on CUDA a bias per layer; the plan had none of it.
TEST(MemoryPlan, TheDocumentMaskCountsItsTSquaredTerms) {
  Config cfg = keel::load_config(keel_test::source_path("configs/gpt2-124m.yaml"),
                                 {"model.max_seq_len=4096", "train.micro_batch_size=8", "train.batch_size=8"});
  MemoryPlanOptions o;  // CUDA, bf16
  const MemoryPlan plain = keel::plan_memory(cfg, o);
  EXPECT_EQ(plain.mask_per_seq, 0);
  cfg.data.document_mask = true;
  const MemoryPlan masked = keel::plan_memory(cfg, o);
  const double T = 4096, layers = static_cast<double>(cfg.model.n_layers);
  EXPECT_EQ(masked.mask_per_seq, T * T * (1 + layers * 2));
  EXPECT_EQ(masked.saved_per_seq - plain.saved_per_seq, masked.mask_per_seq);
  EXPECT_NEAR(8 * masked.mask_per_seq / 1e9, 3.36, 0.01) << "the issue's ~3.2 GB at T = 4096, 8 sequences";
  // The CPU keeps the mask alone; the blockwise path (a softcap) forms none.
  o.cuda = false;
  EXPECT_EQ(keel::plan_memory(cfg, o).mask_per_seq, T * T);
  o.cuda = true;
  cfg.model.attn_softcap = 50.0;
  EXPECT_EQ(keel::plan_memory(cfg, o).mask_per_seq, 0);
}

// keel's CPU attention, asked to, keeps its probabilities at T <= 512 (about
// 9 KiB a token a layer on bench-cpu); the plan counts them in every kept block.
TEST(MemoryPlan, CountsTheProbabilitiesTheCpuAttentionKeeps) {
  const Config cfg = bench_cpu();
  MemoryPlanOptions o;
  o.cuda = false;
  const int64_t T = cfg.model.max_seq_len;
  if (!keel::cpu_causal_attention_applies(torch::kCPU, torch::kFloat32)) GTEST_SKIP() << "the CPU attention is off";
  keel::set_cpu_attention_probs(keel::CpuAttentionProbs::kSave);
  const MemoryPlan kept = keel::plan_memory(cfg, o);
  const double probs = static_cast<double>(keel::cpu_causal_attention_saved_probs(T));
  keel::set_cpu_attention_probs(keel::CpuAttentionProbs::kRecompute);
  const MemoryPlan recomputed = keel::plan_memory(cfg, o);
  keel::set_cpu_attention_probs(keel::CpuAttentionProbs::kAuto);
  ASSERT_GT(probs, 0);
  EXPECT_NEAR(kept.saved_per_seq - recomputed.saved_per_seq,
              4.0 * probs * static_cast<double>(cfg.model.n_heads * cfg.model.n_layers), 1.0);
}

namespace {

double measured_peak_mib(const std::string& mode, int batch) {
  const std::string json = keel_test::make_temp_dir("memory_plan") + "/bench.json";
  std::string out;
  // Live bytes, as CUDA's allocator reports its peak: glibc's defaults with a
  // fixed mmap threshold, so each large block is returned when freed (keel
  // otherwise keeps freed memory in the process: src/train/device.cpp).
  setenv("KEEL_CPU_MALLOC", "system", 1);  // read by keel at start; this process's malloc is set up already
  setenv("MALLOC_MMAP_THRESHOLD_", "131072", 1);
  const int rc = keel_test::run_keel(
      "bench " + keel_test::source_path("configs/bench-cpu.yaml") + " --random-data --set train.batch_size=" +
          std::to_string(batch) + " --set train.micro_batch_size=" + std::to_string(batch) +
          " --set train.activation_checkpointing=" + mode +
          " --steps 1 --warmup 0 --breakdown-steps 0 --monitor-repeats 0 --no-op-count --json " + json,
      &out);
  unsetenv("KEEL_CPU_MALLOC");
  unsetenv("MALLOC_MMAP_THRESHOLD_");
  EXPECT_EQ(rc, 0) << out;
  std::ifstream in(json);
  return nlohmann::json::parse(in)["peak_memory_bytes"].get<double>() / (1024.0 * 1024.0);
}

}  // namespace

// The peak's growth per sequence, on the CPU where it can be measured here
// (bench-cpu, fp32): the plan's activation model against the process's max
// RSS at micro-batch 1 and 3, with every large block returned to the system
// when freed, so that RSS follows the live bytes (measured to 0.1 MiB from
// run to run). The margin: the counts are per tensor kind, not per
// allocation, and backward's working set is assumed, not derived.
TEST(MemoryPlan, ActivationsPerSequenceMatchTheMeasuredCpuPeak) {
  for (const std::string mode : {"none", "full", "selective"}) {
    Config cfg = bench_cpu({"train.activation_checkpointing=" + mode});
    MemoryPlanOptions o;
    o.cuda = false;
    const MemoryPlan plan = keel::plan_memory(cfg, o);
    const double planned = (plan.peak_bytes(3) - plan.peak_bytes(1)) / 2 / (1024.0 * 1024.0);
    const double measured = (measured_peak_mib(mode, 3) - measured_peak_mib(mode, 1)) / 2;
    std::cout << mode << ": planned " << planned << " MiB per sequence, measured " << measured << " MiB\n";
    EXPECT_NEAR(planned, measured, 0.2 * measured) << mode;
  }
}

TEST(MemoryPlan, CommandPrintsThePlanAndRefusesBadArguments) {
  std::string out;
  ASSERT_EQ(keel_test::run_keel("plan " + keel_test::source_path("configs/gpt2-124m.yaml") +
                                    " --ranks 4 --set dist.zero=1 --memory 24 --memory 80",
                                &out),
            0)
      << out;
  EXPECT_NE(out.find("ZeRO-1: the largest of 4 shards"), std::string::npos) << out;
  EXPECT_NE(out.find("80.0 GiB: "), std::string::npos) << out;
  ASSERT_EQ(keel_test::run_keel("plan " + keel_test::source_path("configs/gpt2-124m.yaml") + " --json --device cpu --set train.precision=auto",
                                &out),
            0)
      << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["device"].get<std::string>(), "cpu");
  EXPECT_EQ(j["precision"].get<std::string>(), "fp32") << "auto on the CPU";
  EXPECT_GT(j["saved_per_seq_bytes"].get<double>(), 0);
  EXPECT_EQ(keel_test::run_keel("plan " + keel_test::source_path("configs/gpt2-124m.yaml") + " --ranks 0", &out), 2)
      << out;
  EXPECT_EQ(keel_test::run_keel("plan " + keel_test::source_path("configs/gpt2-124m.yaml") +
                                    " --set model.d_modell=5",
                                &out),
            2)
      << out;
  EXPECT_NE(out.find("d_modell"), std::string::npos) << out;
}
