// `keel bench`: see bench.h. The step is the trainer's (StepRunner,
// step_runner.h) without logging, monitoring and fault injection.
#include "train/bench.h"

#include <sys/resource.h>

#include <ATen/Version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <thread>

#include "data/loader.h"
#include "data/manifest.h"
#include "data/prepare.h"
#include "distributed/dist_env.h"
#include "model/init.h"
#include "model/fused_cuda.h"
#include "model/fused_ops.h"
#include "model/fused_xent.h"
#include "model/model_size.h"
#include "model/simd_dispatch.h"
#include "model/parametrization.h"
#include "monitor/param_stats.h"
#include "train/device.h"
#include "train/device_counters.h"
#include "train/model_stats.h"
#include "train/op_counter.h"
#include "optim/optimizer.h"
#include "optim/zero.h"
#include "train/memory_plan.h"
#include "optim/qk_clip.h"
#include "optim/schedule.h"
#include "train/step_runner.h"
#include "train/training_setup.h"
#include "util/fs.h"
#include "util/host.h"
#include "util/log.h"
#include "util/text.h"

#ifdef KEEL_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace keel {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

// oneDNN's ISA ceiling as its environment variable sets it ("all": what the CPU has).
std::string onednn_isa_ceiling() {
  for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"})
    if (const char* v = std::getenv(name); v && *v) return v;
  return "all";
}

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void device_sync(const torch::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// Milliseconds per phase of one step; filled only on breakdown steps.
struct Phases {
  double data = 0, forward = 0, backward = 0, communication = 0, optimizer = 0, total = 0;
};

class Bench {
 public:
  Bench(const Config& cfg, const BenchOptions& opt) : cfg_(cfg), opt_(opt) {}

  nlohmann::json run();

 private:
  void setup();
  Batch batch(int64_t step);
  double step(int64_t step, Phases* phases);  // returns wall ms (synchronised at the end)
  nlohmann::json monitor_cost(double step_ms);
  int64_t peak_memory_bytes(std::string* source) const;

  Config cfg_;
  BenchOptions opt_;
  ComputeSetup compute_;
  BatchGeometry geometry_;
  TrainingParts parts_;  // what keel train builds (train/training_setup.h)
  std::unique_ptr<BatchLoader> loader_;
  std::unique_ptr<DeviceCounters> counters_;
  torch::Tensor signals_;
};

void Bench::setup() {
  if (parse_dist_env(current_dist_environment()).distributed())
    throw DistError("keel bench runs as a single process; start it without torchrun / keel launch / srun "
                    "(the communication phase of a data-parallel step is measured by keel train's comm_wait_ms)");
  compute_ = setup_compute(cfg_.train);
  if (opt_.peak_tflops > 0) {
    compute_.peak_flops = opt_.peak_tflops * 1e12;
    compute_.peak_source = strf("given with --peak-tflops %g", opt_.peak_tflops);
  }
  geometry_ = batch_geometry(cfg_, 1);
  if (!opt_.random_data) {
    ensure_prepared(cfg_);
    loader_ = std::make_unique<BatchLoader>(cfg_.data.dir, "train", geometry_.seq_len, geometry_.global_batch, 0, 1,
                                            static_cast<uint64_t>(cfg_.run.seed), cfg_.data.prefetch,
                                            cfg_.data.verify, data_mixture(cfg_.data), cfg_.data.align);
  }
  torch::manual_seed(cfg_.run.seed);  // the random batches
  check_cuda_graph_setup(cfg_, compute_, 1);
  parts_ = build_training_parts(cfg_, compute_, geometry_);
  // data.document_mask needs the data's EOS id: random batches have no documents to mask.
  if (cfg_.data.document_mask && loader_)
    parts_.model->set_documents({loader_->eos_id(), cfg_.data.resets_positions()});
  if (loader_ && compute_.device.is_cuda()) loader_->set_pinned(true);  // as the trainer
  counters_ = std::make_unique<DeviceCounters>(compute_.device);
}

Batch Bench::batch(int64_t step) {
  if (loader_) return loader_->get(step);
  // Uniform random tokens, made on the CPU like the loader's batches.
  const int64_t B = geometry_.global_batch, T = geometry_.seq_len;
  auto tokens = torch::randint(0, cfg_.model.vocab_size, {B, T + 1}, torch::kInt64);  // shape: [B, T + 1]
  Batch b{tokens.narrow(1, 0, T).contiguous(), tokens.narrow(1, 1, T).contiguous()};
  if (compute_.device.is_cuda()) b = {b.inputs.pin_memory(), b.targets.pin_memory()};  // as the loader's on CUDA
  return b;
}

// Where one step's time went, from the counter's per-kernel times and the
// composites' own times: per family (op_family) and the slowest operators,
// and what no operator accounts for (the framework between operators, views,
// autograd's bookkeeping, and the callbacks themselves).
nlohmann::json op_profile(const OpCounts& c, double step_ms) {
  std::map<std::string, std::pair<double, int64_t>> family;  // ms, kernels
  std::map<std::string, std::pair<double, int64_t>> by_op;   // ms, calls: kernels and composites' own time
  double in_kernels = 0, in_composites = 0;
  for (const auto& [name, ms] : c.ms_by_name) {
    const int64_t calls = c.by_name.count(name) ? c.by_name.at(name) : 0;
    auto& f = family[op_family(name)];
    f.first += ms;
    f.second += calls;
    by_op[name].first += ms;
    by_op[name].second += calls;
    in_kernels += ms;
  }
  for (const auto& [name, ms] : c.self_ms_by_name) {
    family[op_family(name)].first += ms;
    by_op[name].first += ms;
    by_op[name].second += c.composites_by_name.count(name) ? c.composites_by_name.at(name) : 0;
    in_composites += ms;
  }
  std::vector<std::pair<std::string, std::pair<double, int64_t>>> fams(family.begin(), family.end());
  std::stable_sort(fams.begin(), fams.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  nlohmann::json families = nlohmann::json::array();
  for (const auto& [name, f] : fams)
    families.push_back({{"family", name}, {"ms", f.first}, {"kernels", f.second},
                        {"percent", step_ms > 0 ? 100.0 * f.first / step_ms : 0.0}});
  std::vector<std::pair<std::string, std::pair<double, int64_t>>> ops(by_op.begin(), by_op.end());
  std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  nlohmann::json top = nlohmann::json::array();
  for (size_t i = 0; i < ops.size(); ++i)  // every operator: a step has a few dozen distinct ones
    top.push_back({{"op", ops[i].first}, {"family", op_family(ops[i].first)}, {"ms", ops[i].second.first},
                   {"calls", ops[i].second.second}});
  const double in_ops = in_kernels + in_composites;
  return {{"step_ms", step_ms}, {"in_kernels_ms", in_kernels}, {"in_composites_ms", in_composites},
          {"in_operators_ms", in_ops}, {"outside_operators_ms", std::max(0.0, step_ms - in_ops)},
          {"families", families}, {"top", top}};
}

double Bench::step(int64_t step, Phases* ph) {
  const auto dev = compute_.device;
  const auto start = Clock::now();
  auto mark = start;
  // On breakdown steps: wait for the device, charge the time since the last mark to `slot`.
  auto lap = [&](double Phases::*slot) {
    if (!ph) return;
    device_sync(dev);
    const auto now = Clock::now();
    ph->*slot += ms_between(mark, now);
    mark = now;
  };
  const double lr = lr_at(cfg_.train, step);
  StepRunner& runner = *parts_.runner;
  StepResult r;
  if (runner.graph_mode()) {  // one replay: no phases to tell apart
    Batch b = batch(step);
    lap(&Phases::data);
    r = runner.graphed_step(runner.to_device(b), lr);
    lap(&Phases::forward);
  } else {
    parts_.optimizer->zero_grad();
    runner.begin_step();
    Batch b = batch(step);
    auto on_device = runner.to_device(b);
    lap(&Phases::data);
    MicroHooks hooks;
    hooks.before_backward = [&](int64_t, LossParts&) { lap(&Phases::forward); };
    hooks.after_backward = [&](int64_t) { lap(&Phases::backward); };
    r.loss = runner.forward_backward(on_device, hooks);
    lap(&Phases::communication);  // no gradient all-reduce in a single process: ~0
    r.clip = runner.clip(r.loss.ce);
    runner.update(lr, r.clip.found_inf);
    if (cfg_.train.qk_clip_tau) counters_->add_qk_clipped(qk_clip_model_(parts_.model, *cfg_.train.qk_clip_tau));
  }
  // The trainer's bookkeeping: the device counters and the spike queue.
  counters_->add_step(r.loss.ce, r.loss.z, r.clip.grad_norm, r.clip.found_inf);
  signals_ = torch::stack({r.loss.ce.to(torch::kFloat32), r.clip.grad_norm.to(torch::kFloat32)});
  // The trainer reads the counters every step on the CPU (free there).
  if (dev.is_cpu()) (void)counters_->read();
  lap(&Phases::optimizer);
  device_sync(dev);
  const double total = ms_between(start, Clock::now());
  if (ph) ph->total += total;
  return total;
}

// The monitoring forward the trainer runs every monitor.every steps
// (collect_model_stats on monitor.sequences sequences), timed on its own and
// amortised over monitor.every steps.
nlohmann::json Bench::monitor_cost(double step_ms) {
  nlohmann::json out = {{"every", cfg_.monitor.every}, {"sequences", cfg_.monitor.sequences}};
  if (cfg_.monitor.every <= 0 || opt_.monitor_repeats <= 0) {
    out["stats_ms"] = nullptr;
    out["amortized_ms_per_step"] = 0.0;
    out["percent_of_step"] = 0.0;
    return out;
  }
  Batch b = batch(0);
  const int64_t n = std::min<int64_t>(cfg_.monitor.sequences, b.inputs.size(0));
  auto inputs = b.inputs.narrow(0, 0, n).to(compute_.device);
  collect_model_stats(parts_.model, inputs, compute_.bf16_autocast);  // warm-up (blockwise attention path)
  std::vector<double> times;
  for (int64_t i = 0; i < opt_.monitor_repeats; ++i) {
    device_sync(compute_.device);
    const auto t0 = Clock::now();
    collect_model_stats(parts_.model, inputs, compute_.bf16_autocast);  // ends in a host copy: synchronised
    times.push_back(ms_between(t0, Clock::now()));
  }
  const double stats_ms = median_of(times);
  // monitor.param_stats: the weights copied before the update, then the per-matrix statistics after it.
  double param_ms = 0;
  if (cfg_.monitor.param_stats) {
    std::vector<double> laps;
    const double eps = cfg_.train.eps * forward_scaling(cfg_.model).adam_eps_mult;
    for (int64_t i = 0; i < opt_.monitor_repeats; ++i) {
      device_sync(compute_.device);
      const auto t0 = Clock::now();
      std::vector<torch::Tensor> before;
      for (const auto& p : parts_.optimizer->params()) before.push_back(p.param.detach().clone());
      param_stats(*parts_.optimizer, before, eps, cfg_.train.beta2);  // ends in a host copy: synchronised
      laps.push_back(ms_between(t0, Clock::now()));
    }
    param_ms = median_of(laps);
  }
  const double amortized = (stats_ms + param_ms) / static_cast<double>(cfg_.monitor.every);
  out["stats_ms"] = stats_ms;
  out["param_stats_ms"] = param_ms;
  out["amortized_ms_per_step"] = amortized;
  out["percent_of_step"] = step_ms > 0 ? 100.0 * amortized / step_ms : 0.0;
  return out;
}

int64_t Bench::peak_memory_bytes(std::string* source) const {
#ifdef KEEL_WITH_CUDA
  if (compute_.device.is_cuda()) {
    *source = "CUDA caching allocator, peak allocated bytes";
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(compute_.device.index());
    return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
#endif
  *source = "max resident set size of the process (getrusage)";
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

nlohmann::json Bench::run() {
  setup();
  const auto& m = cfg_.model;
  const double tokens_per_step = static_cast<double>(geometry_.tokens_per_step());
  std::cout << strf("keel bench %s: %s, %s%s; %s parameters; batch %lld x %lld tokens (%lld micro-step%s of %lld)%s\n",
                    opt_.config_name.c_str(), compute_.device_name.c_str(),
                    compute_.bf16_autocast ? "bf16 autocast" : "fp32", parts_.runner->graph_mode() ? ", CUDA graph" : "", si(static_cast<double>(parts_.size.total)).c_str(),
                    static_cast<long long>(geometry_.global_batch), static_cast<long long>(geometry_.seq_len),
                    static_cast<long long>(geometry_.n_micro), geometry_.n_micro > 1 ? "s" : "", static_cast<long long>(geometry_.micro_batch),
                    opt_.random_data ? ", random tokens" : "")
            << "  machine " << cpu_model() << " [" << cpu_isa() << "], " << std::thread::hardware_concurrency()
            << " cores; kernels: ATen " << at::get_cpu_capability() << ", keel " << simd_level_name(simd_level())
            << ", oneDNN " << onednn_isa_ceiling() << "\n"
            << std::flush;

  for (int64_t i = 0; i < opt_.warmup; ++i) step(i, nullptr);
  std::vector<double> times;
  for (int64_t i = 0; i < opt_.steps; ++i) times.push_back(step(opt_.warmup + i, nullptr));
  std::vector<Phases> phases(static_cast<size_t>(std::max<int64_t>(0, opt_.breakdown_steps)));
  for (size_t i = 0; i < phases.size(); ++i)
    step(opt_.warmup + opt_.steps + static_cast<int64_t>(i), &phases[i]);

  // The CPU peak again, sampled for longer now that the machine is as warm as
  // the steps left it: the short sample at start-up can come out low on a
  // shared machine (an MFU over 100% was seen), and MFU takes the better one.
  if (compute_.device.is_cpu() && opt_.peak_tflops <= 0)
    compute_.peak_flops = std::max(compute_.peak_flops, measure_cpu_matmul_flops(0.5));
  const double med = median_of(times), mean = mean_of(times);
  const double tok_s = med > 0 ? tokens_per_step / (med / 1e3) : 0;
  const double tok_s_mean = mean > 0 ? tokens_per_step / (mean / 1e3) : 0;
  const double mfu = compute_.peak_flops > 0 ? parts_.size.flops_per_token * tok_s / compute_.peak_flops : 0;
  auto phase_median = [&](double Phases::*slot) {
    std::vector<double> v;
    for (const auto& p : phases) v.push_back(p.*slot);
    return median_of(v);
  };
  nlohmann::json breakdown = nullptr;
  if (!phases.empty()) {
    breakdown = {{"data", phase_median(&Phases::data)},
                 {"forward", phase_median(&Phases::forward)},
                 {"backward", phase_median(&Phases::backward)},
                 {"optimizer", phase_median(&Phases::optimizer)},
                 {"communication", phase_median(&Phases::communication)},
                 {"total", phase_median(&Phases::total)},
                 {"steps", phases.size()}};
    double parts = 0;
    for (const char* k : {"data", "forward", "backward", "optimizer", "communication"})
      parts += breakdown[k].get<double>();
    breakdown["other"] = std::max(0.0, breakdown["total"].get<double>() - parts);
    if (parts_.runner->graph_mode()) {  // forward .. update are one replay, charged to "forward" above
      breakdown["graph_replay"] = breakdown["forward"];
      for (const char* k : {"forward", "backward", "optimizer", "communication"}) breakdown[k] = nullptr;
    }
  }
  // One more step, its operators counted: kernel launches per step (a CUDA
  // graph replays as one launch, so there is nothing to count then).
  nlohmann::json ops = nullptr;
  if (opt_.count_ops && !parts_.runner->graph_mode()) {
    OpCounts c;
    double counted_ms = 0;
    {
      OpCounter counter;
      counted_ms = step(opt_.warmup + opt_.steps + static_cast<int64_t>(phases.size()), nullptr);
      c = counter.counts();
    }
    std::vector<std::pair<std::string, int64_t>> by_count(c.by_name.begin(), c.by_name.end());
    std::stable_sort(by_count.begin(), by_count.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    nlohmann::json top = nlohmann::json::array();
    for (size_t i = 0; i < std::min<size_t>(12, by_count.size()); ++i)
      top.push_back({by_count[i].first, by_count[i].second});
    ops = {{"kernels", c.kernels}, {"dispatches", c.dispatches}, {"distinct", c.by_name.size()}, {"top", top},
           {"counts", "leaf operators that do work (train/op_counter.h): a proxy for kernel launches"},
           {"profile", op_profile(c, counted_ms)}};
  }
  const std::string attention_kernel = parts_.model->attention_kernel(
      geometry_.micro_batch, geometry_.seq_len, compute_.device, compute_.bf16_autocast ? torch::kBFloat16 : torch::kFloat32);
  nlohmann::json monitor = monitor_cost(med);
  std::string mem_source;
  const int64_t peak_mem = peak_memory_bytes(&mem_source);
  // keel plan's prediction for this micro-batch (live bytes: CUDA's peak allocated is the like figure).
  const double planned_peak = plan_memory_for_run(cfg_, compute_.device.is_cuda(), compute_.bf16_autocast, 1)
                                  .peak_bytes(geometry_.micro_batch);
  // Optimizer state per rank: replicated, and as dist.zero: 1 would deal it over N ranks (the largest share).
  nlohmann::json zero_state = nlohmann::json::object();
  int64_t state_bytes = 0;
  for (int64_t b : zero_state_bytes_by_rank(*parts_.optimizer, 1)) state_bytes += b;
  std::string zero_text;
  for (int n : {2, 4, 8}) {
    const auto shares = zero_state_bytes_by_rank(*parts_.optimizer, n);
    const int64_t largest = *std::max_element(shares.begin(), shares.end());
    zero_state[std::to_string(n)] = largest;
    zero_text += strf("%s%.1f MiB on %d", zero_text.empty() ? "" : ", ", static_cast<double>(largest) / (1 << 20), n);
  }
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) != 3) load[0] = load[1] = load[2] = -1;

  nlohmann::json r = {
      {"tool", "keel"},
      {"version", KEEL_VERSION},
      {"config", opt_.config_name},
      {"device", compute_.device.str()},
      {"device_name", compute_.device_name},
      {"host",
       {{"cpu_model", cpu_model()},
        {"cpu_isa", cpu_isa()},
        {"cores", std::thread::hardware_concurrency()},
        // What the kernels may use, which ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA
        // and the build can lower below what the CPU has.
        {"kernel_isa",
         {{"aten", at::get_cpu_capability()}, {"keel", simd_level_name(simd_level())}, {"onednn", onednn_isa_ceiling()}}}}},
      {"precision", compute_.bf16_autocast ? "bf16 autocast" : "fp32"},
      {"cuda_graph", parts_.runner->graph_mode()},
      {"threads", compute_.threads},
      {"parameters", parts_.size.total},
      {"matmul_parameters", parts_.size.matmul},
      {"flops_per_token", parts_.size.flops_per_token},
      {"flops_convention", flops_convention()},
      {"model", {{"d_model", m.d_model}, {"n_layers", m.n_layers}, {"n_heads", m.n_heads},
                 {"n_kv_heads", m.n_kv_heads}, {"mlp", m.mlp}, {"norm", m.norm},
                 {"qk_norm", m.qk_norm.type}, {"vocab_padded", m.padded_vocab()}}},
      {"batch", {{"sequences", geometry_.global_batch}, {"seq_len", geometry_.seq_len}, {"micro_batch", geometry_.micro_batch}, {"micro_steps", geometry_.n_micro},
                 {"tokens_per_step", static_cast<int64_t>(tokens_per_step)}}},
      {"data", opt_.random_data ? "random" : cfg_.data.dir},
      {"warmup", opt_.warmup},
      {"steps", opt_.steps},
      {"step_ms", {{"median", med}, {"mean", mean},
                   {"min", times.empty() ? 0 : *std::min_element(times.begin(), times.end())},
                   {"max", times.empty() ? 0 : *std::max_element(times.begin(), times.end())},
                   {"all", times}}},
      {"tokens_per_s", tok_s},
      {"tokens_per_s_mean", tok_s_mean},
      {"mfu", mfu},
      {"peak_flops", compute_.peak_flops},
      {"peak_source", compute_.peak_source},
      {"peak_memory_bytes", peak_mem},
      {"peak_memory_source", mem_source},
      {"planned_peak_memory_bytes", planned_peak},
      {"optimizer_state_bytes", state_bytes},
      {"zero1_optimizer_state_bytes_per_rank", zero_state},
      {"breakdown_ms", breakdown},
      // kernel: what SDPA chooses now for this run's shapes (after the steps), beside what was asked for
      {"attention", {{"kernel", attention_kernel}, {"requested", name_of(cfg_.train.attention_backend)},
                     {"sdpa_order", compute_.attention_order}}},
      // keel's own kernels: the CPU's (fused_ops.h) and CUDA's (fused_cuda.h), as this run had them
      {"fused_kernels", {{"cpu", compute_.device.is_cpu() && fused_cpu_kernels_enabled()},
                         {"cuda_built", fused_cuda_kernels_built()},
                         {"cuda", compute_.device.is_cuda() && fused_cuda_kernels_enabled()}}},
      {"ops_per_step", ops},
      {"monitor", monitor},
      {"load_average", {load[0], load[1], load[2]}}};

  std::cout << strf("  step       median %.2f ms, mean %.2f ms (%lld steps after %lld warm-up)\n", med, mean,
                    static_cast<long long>(opt_.steps), static_cast<long long>(opt_.warmup))
            << strf("  tokens/s   %s (median step), %s (mean)\n", si(tok_s).c_str(), si(tok_s_mean).c_str())
            << strf("  MFU        %.2f%% of %sFLOP/s (%s)\n", 100 * mfu, si(compute_.peak_flops).c_str(),
                    compute_.peak_source.c_str())
            << "             " << flops_convention() << "; " << si(parts_.size.flops_per_token) << "FLOPs/token\n"
            << strf("  memory     peak %.1f MiB (%s); keel plan predicts %.1f MiB of live tensors%s\n",
                    static_cast<double>(peak_mem) / (1 << 20), mem_source.c_str(), planned_peak / (1 << 20),
                    compute_.device.is_cuda() ? "" : " (RSS also counts libraries and freed memory kept)")
            << strf("  optimizer  state %.1f MiB per rank replicated; dist.zero 1: %s ranks (largest shard)\n",
                    static_cast<double>(state_bytes) / (1 << 20), zero_text.c_str());
  if (!breakdown.is_null() && breakdown.contains("graph_replay"))
    std::cout << strf("  breakdown  data %.2f | CUDA graph replay (forward .. update) %.2f | other %.2f ms (median of "
                      "%zu steps; total %.2f)\n",
                      breakdown["data"].get<double>(), breakdown["graph_replay"].get<double>(),
                      breakdown["other"].get<double>(), phases.size(), breakdown["total"].get<double>());
  else if (!breakdown.is_null())
    std::cout << strf("  breakdown  data %.2f | forward %.2f | backward %.2f | optimizer %.2f | communication %.2f | "
                      "other %.2f ms (median of %zu steps synchronised per phase; total %.2f)\n",
                      breakdown["data"].get<double>(), breakdown["forward"].get<double>(),
                      breakdown["backward"].get<double>(), breakdown["optimizer"].get<double>(),
                      breakdown["communication"].get<double>(), breakdown["other"].get<double>(), phases.size(),
                      breakdown["total"].get<double>());
  std::cout << "  attention  " << attention_kernel << " (SDPA tries " << compute_.attention_order << ")\n";
  if (compute_.device.is_cuda())
    std::cout << "  fused      keel's CUDA kernels (RoPE, loss) "
              << (fused_cuda_kernels_enabled() ? "on"
                  : fused_cuda_kernels_built() ? "off (KEEL_CUDA_FUSED=1 turns them on)"
                                               : "not in this build")
              << "\n";
  if (compute_.device.is_cpu() && !compute_.bf16_autocast)
    std::cout << "  linear     "
              << (!onednn_linear_enabled()          ? "ATen (at::linear, BLAS)"
                  : onednn_weight_grad_enabled() ? "oneDNN (mkldnn::_linear_pointwise)"
                                                 : "oneDNN (mkldnn::_linear_pointwise), weight gradient at::mm")
              << " on this " << (cpu_vendor().empty() ? "CPU" : cpu_vendor())
              << " (KEEL_CPU_LINEAR=aten|onednn, KEEL_CPU_LINEAR_DW=aten|onednn override)\n";
  if (!ops.is_null()) {
    std::string top;
    for (const auto& e : ops["top"]) {
      if (top.size() > 90) break;
      top += (top.empty() ? "" : ", ") + e[0].get<std::string>() + " " + std::to_string(e[1].get<int64_t>());
    }
    std::cout << strf("  ops        %lld kernels per step (%lld operator calls); most: %s\n",
                      static_cast<long long>(ops["kernels"].get<int64_t>()),
                      static_cast<long long>(ops["dispatches"].get<int64_t>()), top.c_str());
    const auto& prof = ops["profile"];
    std::string families;
    for (const auto& f : prof["families"])
      families += strf("%s%s %.2f (%.0f%%)", families.empty() ? "" : ", ", f["family"].get<std::string>().c_str(),
                       f["ms"].get<double>(), f["percent"].get<double>());
    std::cout << strf("  profile    one step, %.2f ms with the operator callbacks (%s on the CPU; a composite "
                      "operator's own time counts with its family, %.2f ms): %s; outside operators %.2f ms\n",
                      prof["step_ms"].get<double>(), compute_.device.is_cuda() ? "launch times, not" : "kernel times",
                      prof["in_composites_ms"].get<double>(), families.c_str(),
                      prof["outside_operators_ms"].get<double>());
    std::string slowest;
    for (const auto& e : prof["top"]) {
      if (slowest.size() > 110) break;
      slowest += strf("%s%s %.2f", slowest.empty() ? "" : ", ", e["op"].get<std::string>().c_str(), e["ms"].get<double>());
    }
    std::cout << "  slowest    " << slowest << " (ms per step)\n";
  }
  if (!monitor["stats_ms"].is_null())
    std::cout << strf("  monitor    every %lld steps: %.2f ms per statistics forward + %.2f ms of per-matrix "
                      "statistics = %.3f ms/step (%.2f%% of the step)\n",
                      static_cast<long long>(cfg_.monitor.every), monitor["stats_ms"].get<double>(),
                      monitor["param_stats_ms"].get<double>(), monitor["amortized_ms_per_step"].get<double>(),
                      monitor["percent_of_step"].get<double>());
  std::cout << strf("  load       %.2f %.2f %.2f (1/5/15 min)\n", load[0], load[1], load[2]);

  std::string path = opt_.json_path;
  if (path.empty()) path = cfg_.run.out_dir + "/bench/" + (opt_.config_name.empty() ? "bench" : opt_.config_name) + ".json";
  ensure_directory(dir_name(path));
  write_file_durably(path, r.dump(2) + "\n");
  std::cout << "  json       " << path << "\n";
  return r;
}

}  // namespace

nlohmann::json run_bench(const Config& config, const BenchOptions& options) {
  Bench bench(config, options);
  return bench.run();
}

}  // namespace keel
