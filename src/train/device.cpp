#include "train/device.h"

#include <ATen/autocast_mode.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#ifdef KEEL_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace keel {

double measure_cpu_matmul_flops() {
  torch::NoGradGuard no_grad;
  const int64_t n = 1024;
  auto a = torch::randn({n, n}), b = torch::randn({n, n});
  auto c = torch::mm(a, b);  // warm-up
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    c = torch::mm(a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * n * n * n / best;
}

#ifdef KEEL_WITH_CUDA
// Dense bf16 peaks from the vendors' data sheets (REFERENCE.md §7).
static double cuda_peak_bf16(const std::string& name) {
  if (name.find("H200") != std::string::npos || name.find("H100") != std::string::npos) return 989e12;
  if (name.find("A100") != std::string::npos) return 312e12;
  if (name.find("L40") != std::string::npos) return 181e12;
  if (name.find("A10") != std::string::npos) return 125e12;
  return 0;
}
#endif

ComputeSetup setup_compute(const TrainConfig& t, int local_rank, int local_world) {
  ComputeSetup s;
  const bool have_cuda = torch::cuda::is_available();
  std::string device = t.device == "auto" ? (have_cuda ? "cuda" : "cpu") : t.device;
  if (device == "cuda" && !have_cuda)
    throw std::runtime_error("train.device is cuda but no CUDA device is visible (LibTorch built with CUDA: " +
                             std::string(torch::cuda::is_available() ? "yes" : "no/unknown") +
                             "); use --set train.device=cpu");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  s.threads = t.threads > 0 ? static_cast<int>(t.threads) : std::max(1, cores / std::max(1, local_world));
  torch::set_num_threads(s.threads);
  if (device == "cuda") {
#ifdef KEEL_WITH_CUDA
    s.device = torch::Device(torch::kCUDA, local_rank % static_cast<int>(torch::cuda::device_count()));
    c10::cuda::set_device(s.device.index());
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, s.device.index());
    s.device_name = prop.name;
    s.bf16_autocast = t.precision != "fp32";
    at::globalContext().setAllowTF32CuBLAS(t.tf32);
    at::globalContext().setAllowTF32CuDNN(t.tf32);
    s.peak_flops = cuda_peak_bf16(s.device_name);
    s.peak_source = s.peak_flops > 0 ? s.device_name + " dense bf16 (data sheet)" : "unknown GPU (MFU not shown)";
#else
    throw std::runtime_error("this keel was built against a CPU-only LibTorch; rebuild with a CUDA LibTorch");
#endif
  } else {
    if (t.precision == "bf16")
      throw std::runtime_error("train.precision: bf16 autocast is only supported on CUDA; use fp32 on CPU");
    s.device_name = "cpu (" + std::to_string(s.threads) + " threads)";
    s.peak_flops = measure_cpu_matmul_flops();
    s.peak_source = "measured fp32 1024^3 matmul on " + std::to_string(s.threads) + " threads";
  }
  return s;
}

AutocastScope::AutocastScope(bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!enabled_) return;
  // Drop the cached bf16 weight copies: the optimizer is about to change the weights.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(at::kCUDA, false);
}

}  // namespace keel
