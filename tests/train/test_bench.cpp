// `keel bench`: the JSON record is complete and self-consistent; a
// distributed start is refused. Interop.BenchReferenceModel writes a model's
// weights and logits for tests/python/test_bench_reference.py, which checks
// that bench/reference_model.py is the same model.
#include <cmath>

#include <ATen/Version.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>

#include "checkpoint/safetensors.h"
#include "config/config.h"
#include "model/cpu_attention.h"
#include "model/simd_dispatch.h"
#include "train/device.h"
#include "model/init.h"
#include "model/model_size.h"
#include "test_util.h"

namespace {

// A small model so the test takes seconds on 2 cores.
const char* kSmall =
    " --set model.max_seq_len=32 --set model.d_model=64 --set model.n_layers=2 --set model.n_heads=4"
    " --set model.n_kv_heads=2 --set train.batch_size=4 --set train.micro_batch_size=2"
    " --set model.qk_norm.type=rms --set monitor.every=10 --set train.threads=1";  // 1: steady on a busy machine

nlohmann::json run_bench(const std::string& extra, std::string* output) {
  const std::string dir = keel_test::make_temp_dir("bench");
  const std::string json_path = dir + "/bench.json";
  const int rc = keel_test::run_keel("bench " + keel_test::source_path("configs/bench-cpu-tiny.yaml") + kSmall +
                                         " --random-data --json " + json_path + extra,
                                     output);
  EXPECT_EQ(rc, 0) << *output;
  if (rc != 0) return nullptr;
  return nlohmann::json::parse(keel_test::read_file(json_path));
}

TEST(Bench, JsonRecordIsCompleteAndConsistent) {
  std::string out;
  auto r = run_bench(" --steps 4 --warmup 1 --breakdown-steps 3 --monitor-repeats 2", &out);
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(r["tool"], "keel");
  EXPECT_EQ(r["steps"], 4);
  EXPECT_EQ(r["step_ms"]["all"].size(), 4u);
  EXPECT_EQ(r["batch"]["tokens_per_step"], 4 * 32);
  EXPECT_EQ(r["batch"]["micro_steps"], 2);
  EXPECT_GT(r["parameters"].get<int64_t>(), 0);
  const double med = r["step_ms"]["median"], mean = r["step_ms"]["mean"];
  EXPECT_GT(med, 0);
  EXPECT_GE(r["step_ms"]["max"].get<double>(), med);
  EXPECT_LE(r["step_ms"]["min"].get<double>(), med);
  EXPECT_GT(mean, 0);
  // tokens/s is tokens per step over the median step time.
  EXPECT_NEAR(r["tokens_per_s"].get<double>(), 4 * 32 / (med / 1e3), 1e-6 * r["tokens_per_s"].get<double>());
  // MFU: FLOPs/token * tokens/s / peak, a fraction in (0, 1).
  const double mfu = r["mfu"], peak = r["peak_flops"];
  EXPECT_GT(peak, 0);
  EXPECT_GT(mfu, 0);
  EXPECT_LT(mfu, 1);
  EXPECT_NEAR(mfu, r["flops_per_token"].get<double>() * r["tokens_per_s"].get<double>() / peak, 1e-9);
  EXPECT_NE(r["flops_convention"].get<std::string>().find("6*N"), std::string::npos);
  EXPECT_GT(r["peak_memory_bytes"].get<int64_t>(), 1 << 20);
  // Optimizer state: AdamW's two fp32 moments and a float32 step per tensor;
  // dist.zero 1 would keep at least an even share per rank, and on 2 ranks
  // at most half plus the largest tensor's (the embedding: whole parameters).
  const double state = r["optimizer_state_bytes"].get<double>(), params = r["parameters"].get<double>();
  EXPECT_GT(state, 8 * params);
  EXPECT_LT(state, 8 * params + 4096);
  const auto& zero = r["zero1_optimizer_state_bytes_per_rank"];
  for (const char* n : {"2", "4", "8"})
    EXPECT_GE(zero[n].get<double>(), state / std::stod(n)) << n;
  EXPECT_LE(zero["2"].get<double>(), state / 2 + 8.0 * 4096 * 128 + 4);
  EXPECT_NE(out.find("dist.zero 1: "), std::string::npos) << out;
  // keel plan's prediction for the run's micro-batch: below the process's RSS, which also holds the libraries.
  EXPECT_GT(r["planned_peak_memory_bytes"].get<double>(), 0);
  EXPECT_LT(r["planned_peak_memory_bytes"].get<double>(), r["peak_memory_bytes"].get<double>());
  // The phases add up to the breakdown step; that step is about a timed step
  // (loose bounds: the machine is shared, and each phase ends in a sync).
  const auto& b = r["breakdown_ms"];
  ASSERT_TRUE(b.is_object()) << r.dump(2);
  double phases = 0;
  for (const char* k : {"data", "forward", "backward", "optimizer", "communication", "other"}) {
    ASSERT_TRUE(b.contains(k)) << k;
    EXPECT_GE(b[k].get<double>(), 0) << k;
    if (std::string(k) != "other") phases += b[k].get<double>();
  }
  EXPECT_GT(b["forward"].get<double>(), 0);
  EXPECT_GT(b["backward"].get<double>(), 0);
  EXPECT_GT(b["optimizer"].get<double>(), 0);
  const double total = b["total"];
  // "other" is what the phases' medians leave of the median total (never
  // below 0). The medians need not add up to the total's median: under load
  // (CTest runs two programs at once) they have differed by 22%, so only a
  // gross error (a phase counted twice) is a failure here.
  EXPECT_NEAR(b["other"].get<double>(), std::max(0.0, total - phases), 1e-6);
  EXPECT_LT(phases, 1.8 * total + 1.0);
  EXPECT_GT(total, 0.3 * med);
  EXPECT_LT(total, 3.0 * med + 5);
  // Monitoring: one statistics forward, amortised over monitor.every = 10 steps.
  const auto& m = r["monitor"];
  EXPECT_EQ(m["every"], 10);
  EXPECT_GT(m["stats_ms"].get<double>(), 0);
  EXPECT_GT(m["param_stats_ms"].get<double>(), 0);  // monitor.param_stats is on by default
  EXPECT_NEAR(m["amortized_ms_per_step"].get<double>(),
              (m["stats_ms"].get<double>() + m["param_stats_ms"].get<double>()) / 10, 1e-9);
  EXPECT_NEAR(m["percent_of_step"].get<double>(), 100 * m["amortized_ms_per_step"].get<double>() / med, 1e-6);
  EXPECT_NE(out.find("tokens/s"), std::string::npos) << out;
  EXPECT_NE(out.find("MFU"), std::string::npos) << out;
  // Every record names the machine: the same code measures 2x apart on two CPUs.
  const auto& host = r["host"];
  ASSERT_TRUE(host.is_object()) << r.dump(2);
  EXPECT_FALSE(host["cpu_model"].get<std::string>().empty());
  EXPECT_TRUE(host["cpu_isa"].is_string());
  EXPECT_GE(host["cores"].get<int64_t>(), 1);
  EXPECT_NE(out.find("machine " + host["cpu_model"].get<std::string>()), std::string::npos) << out;
  // ... and what its kernels were allowed to use (ATEN_CPU_CAPABILITY and
  // KEEL_CPU_CAPABILITY can run an AVX-512 CPU as an AVX2 one).
  const auto& kernel_isa = host["kernel_isa"];
  ASSERT_TRUE(kernel_isa.is_object()) << host.dump();
  EXPECT_EQ(kernel_isa["aten"], at::get_cpu_capability());
  const std::string keel_isa = keel::simd_level_name(keel::simd_level());  // this process reads the same environment
  EXPECT_EQ(kernel_isa["keel"], keel_isa);
  EXPECT_NE(out.find("kernels: ATen " + at::get_cpu_capability() + ", keel " + keel_isa), std::string::npos) << out;
  // Which attention kernel ran (keel's causal CPU kernel, or SDPA's choice
  // with the fused kernels off; the CPU has flash and math) and the
  // operators of one more step, counted.
  const auto& attn = r["attention"];
  ASSERT_TRUE(attn.is_object()) << r.dump(2);
  if (keel::cpu_causal_attention_applies(torch::kCPU, torch::kFloat32)) {
    const int64_t T = r["batch"]["seq_len"].get<int64_t>();
    const auto gemm = keel::cpu_causal_attention_gemm(T);
    const std::string kept = keel::cpu_causal_attention_saved_probs(T) > 0 ? ", probabilities kept" : "";
    EXPECT_EQ(attn["kernel"], "keel causal (CPU, " + gemm + kept + ")") << attn.dump();
  } else {
    EXPECT_TRUE(attn["kernel"] == "flash_attention" || attn["kernel"] == "math") << attn.dump();
  }
  EXPECT_EQ(attn["sdpa_order"], "flash, math");
  const auto& ops = r["ops_per_step"];
  ASSERT_TRUE(ops.is_object()) << r.dump(2);
  EXPECT_GT(ops["kernels"].get<int64_t>(), 50);  // two layers' forward, backward and AdamW
  EXPECT_GT(ops["dispatches"].get<int64_t>(), ops["kernels"].get<int64_t>());
  ASSERT_FALSE(ops["top"].empty());
  EXPECT_NE(out.find("kernels per step"), std::string::npos) << out;
  // The profile of that step: families sorted by time, matmul among them,
  // their times and what lies outside kernels adding up to the step.
  const auto& prof = ops["profile"];
  ASSERT_TRUE(prof.is_object()) << ops.dump(2);
  double families_ms = 0, last = INFINITY;
  bool matmul = false;
  for (const auto& f : prof["families"]) {
    EXPECT_LE(f["ms"].get<double>(), last) << prof.dump(2);
    last = f["ms"].get<double>();
    families_ms += last;
    matmul = matmul || f["family"] == "matmul";
  }
  EXPECT_TRUE(matmul) << prof.dump(2);
  // Families hold the kernels' time and the composites' own time, nothing twice.
  EXPECT_NEAR(families_ms, prof["in_operators_ms"].get<double>(), 1e-6);
  EXPECT_NEAR(prof["in_operators_ms"].get<double>(),
              prof["in_kernels_ms"].get<double>() + prof["in_composites_ms"].get<double>(), 1e-6);
  EXPECT_GT(prof["in_composites_ms"].get<double>(), 0.0) << "the step calls composites (linear, AdamW)";
  EXPECT_GT(prof["step_ms"].get<double>(), 0.0);
  EXPECT_LE(prof["in_operators_ms"].get<double>(), prof["step_ms"].get<double>() * 1.05)
      << "operators nest in the step";
  EXPECT_NEAR(prof["outside_operators_ms"].get<double>(),
              std::max(0.0, prof["step_ms"].get<double>() - prof["in_operators_ms"].get<double>()), 1e-6);
  EXPECT_NE(out.find("profile    one step"), std::string::npos) << out;
  EXPECT_NE(out.find("slowest    "), std::string::npos) << out;
}

TEST(Bench, AttentionBackendMathIsWhatRuns) {
  std::string out;
  auto r = run_bench(" --steps 1 --warmup 0 --breakdown-steps 0 --monitor-repeats 0 --no-op-count"
                     " --set train.attention_backend=math", &out);
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(r["attention"]["kernel"], "math");
  EXPECT_EQ(r["attention"]["requested"], "math") << "the record says what was asked for beside what ran";
  EXPECT_TRUE(r["ops_per_step"].is_null());
  // A softcap takes the blockwise path, whatever the backend.
  r = run_bench(" --steps 1 --warmup 0 --breakdown-steps 0 --monitor-repeats 0 --set model.attn_softcap=30", &out);
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(r["attention"]["kernel"], "blockwise");
  // CUDA-only backends are refused on the CPU, naming the key.
  std::string refused;
  const int rc = keel_test::run_keel("bench " + keel_test::source_path("configs/bench-cpu-tiny.yaml") + kSmall +
                                         " --random-data --steps 1 --set train.attention_backend=cudnn",
                                     &refused);
  EXPECT_EQ(rc, 2) << refused;
  EXPECT_NE(refused.find("train.attention_backend"), std::string::npos) << refused;
}

TEST(Bench, PeakOverrideSetsMfuDenominator) {
  std::string out;
  auto r = run_bench(" --steps 2 --warmup 0 --breakdown-steps 0 --monitor-repeats 0 --peak-tflops 0.5", &out);
  ASSERT_FALSE(r.is_null());
  EXPECT_DOUBLE_EQ(r["peak_flops"].get<double>(), 0.5e12);
  EXPECT_NE(r["peak_source"].get<std::string>().find("--peak-tflops"), std::string::npos);
  EXPECT_TRUE(r["breakdown_ms"].is_null());
  EXPECT_TRUE(r["monitor"]["stats_ms"].is_null());
}

TEST(Bench, CpuPeakSamplesAtLeastTheTimeAsked) {
  // keel bench re-measures the peak for half a second after its steps, so
  // one slow sample on a shared machine cannot push MFU over 100%.
  const int threads = at::get_num_threads();
  torch::set_num_threads(1);
  const auto t0 = std::chrono::steady_clock::now();
  const double flops = keel::measure_cpu_matmul_flops(0.2);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(took, 0.4) << "two libraries, at least 0.2 s each";
  EXPECT_TRUE(std::isfinite(flops));
  EXPECT_GT(flops, 1e9) << "a 1024^3 fp32 matmul on one thread of any x86 CPU keel runs on";
  torch::set_num_threads(threads);
}

TEST(Bench, RefusesToRunAsARankOfADistributedJob) {
  // torchrun's variables make this process a rank; bench is single-process.
  std::string out;
  const std::string args = "bench " + keel_test::source_path("configs/bench-cpu-tiny.yaml") + kSmall +
                           " --random-data --steps 1 --warmup 0 --breakdown-steps 0 --monitor-repeats 0 --json " +
                           keel_test::make_temp_dir("bench") + "/b.json";
  const int rc = keel_test::run_keel(args, &out);
  ASSERT_EQ(rc, 0) << out;  // sanity: without the variables it runs
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("LOCAL_RANK", "0", 1);
  setenv("LOCAL_WORLD_SIZE", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "29517", 1);
  const int rc2 = keel_test::run_keel(args, &out);
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
    unsetenv(v);
  EXPECT_EQ(rc2, 2) << out;
  EXPECT_NE(out.find("single process"), std::string::npos) << out;
}

// For tests/python/test_bench_reference.py: builds the model of
// $KEEL_INTEROP_CONFIG (with the comma-separated $KEEL_INTEROP_SET overrides),
// perturbs every weight (so unit gains and zero biases cannot hide a
// mismatch), and writes the weights, fixed tokens and keel's fp32 logits to
// $KEEL_INTEROP_DIR/reference.safetensors, with the parameter count.
TEST(Interop, BenchReferenceModel) {
  const char* dir = std::getenv("KEEL_INTEROP_DIR");
  const char* config_path = std::getenv("KEEL_INTEROP_CONFIG");
  if (!dir || !config_path) GTEST_SKIP() << "KEEL_INTEROP_DIR/CONFIG not set (run by tests/python)";
  std::vector<std::string> overrides;
  if (const char* sets = std::getenv("KEEL_INTEROP_SET")) {
    std::stringstream ss(sets);
    for (std::string item; std::getline(ss, item, ',');)
      if (!item.empty()) overrides.push_back(item);
  }
  keel::Config cfg = keel::load_config(config_path, overrides);
  auto model = keel::build_model(cfg.model, 7);
  torch::manual_seed(11);
  keel::TensorMap out;
  {
    torch::NoGradGuard no_grad;
    for (auto& item : model->named_parameters(true)) {
      item.value().add_(torch::randn_like(item.value()) * 0.05);
      out.emplace_back(item.key(), item.value().detach().clone());
    }
  }
  const int64_t T = std::min<int64_t>(cfg.seq_len(), 48);
  auto tokens = torch::randint(0, cfg.model.vocab_size, {2, T}, torch::kInt64);
  torch::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = model->forward(tokens);
  }
  out.emplace_back("__tokens", tokens);
  out.emplace_back("__logits", logits.to(torch::kFloat32).contiguous());
  const auto size = keel::model_size(cfg.model, T);
  keel::write_safetensors(std::string(dir) + "/reference.safetensors", out,
                          {{"parameters", std::to_string(size.total)}});
}

}  // namespace
