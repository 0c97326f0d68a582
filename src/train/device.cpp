#include "train/device.h"

#include <ATen/SDPBackend.h>
#include <ATen/autocast_mode.h>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "model/attention.h"
#include "model/cpu_attention.h"
#include "model/fused_ops.h"
#include "util/error.h"
#include "util/host.h"
#include "util/log.h"  // strf

#ifdef KEEL_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace keel {

double measure_cpu_matmul_flops(double min_seconds) {
  torch::NoGradGuard no_grad;
  const int64_t n = 1024;
  auto a = torch::randn({n, n}), b = torch::randn({n, n});
  // The faster of LibTorch's BLAS (torch::mm) and the oneDNN path keel's
  // linear layers take (model/fused_ops.h): the peak of this machine, not of
  // one library. Best of at least 10 calls: a shared machine's slow calls are noise.
  double best = 1e30;
  for (int path = 0; path < 2; ++path) {
    if (path == 1) keel::set_onednn_linear(true);  // whichever linear() takes by default
    auto run = [&] { return path == 0 ? torch::mm(a, b) : keel::linear(a, b); };
    run();  // warm-up
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 10 || std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
                                  min_seconds;
         ++i) {
      auto t0 = std::chrono::steady_clock::now();
      auto c = run();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  keel::reset_onednn_linear();
  return 2.0 * n * n * n / best;
}

#ifdef KEEL_WITH_CUDA
// Dense bf16 peaks from the vendors' data sheets (docs/papers.md#throughput-and-mfu).
static double cuda_peak_bf16(const std::string& name) {
  if (name.find("H100") != std::string::npos && name.find("PCIe") != std::string::npos) return 756e12;
  if (name.find("NVL") != std::string::npos && (name.find("H100") != std::string::npos ||
                                                 name.find("H200") != std::string::npos))
    return 835e12;
  if (name.find("H200") != std::string::npos || name.find("H100") != std::string::npos) return 989e12;  // SXM
  if (name.find("A100") != std::string::npos) return 312e12;
  if (name.find("L40") != std::string::npos) return 181e12;
  if (name.find("A10") != std::string::npos) return 125e12;
  return 0;
}
#endif

// CPU training frees and reallocates the same large activation and gradient
// buffers every step. glibc serves blocks above its mmap threshold with fresh
// mmap()s, so each step page-faults (and zero-fills) them again: about 9% of
// a bench-cpu step went to the kernel. Serve everything from the heap and
// never give it back (RSS stays at its peak, which a training process
// reaches again next step anyway). KEEL_CPU_MALLOC=system keeps glibc's defaults.
static void keep_freed_memory_in_process() {
  const char* env = std::getenv("KEEL_CPU_MALLOC");
  if (env && std::strcmp(env, "system") == 0) return;
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
}

namespace {
std::vector<int64_t> held_attention_order;  // what apply_attention_backend set; empty on the CPU
}

bool hold_attention_order() {
  if (held_attention_order.empty()) return false;
  auto& ctx = at::globalContext();
  const auto now = ctx.sDPPriorityOrder();
  std::vector<int64_t> current;
  for (auto b : now) current.push_back(static_cast<int64_t>(b));
  if (current == held_attention_order) return false;
  ctx.setSDPPriorityOrder(held_attention_order);
  return true;
}

std::string apply_attention_backend(AttentionBackend backend, torch::Device device, int cuda_major) {
  using B = at::SDPBackend;
  auto& ctx = at::globalContext();
  if (!device.is_cuda()) {
    if (backend == AttentionBackend::cudnn || backend == AttentionBackend::efficient) {
      ConfigErrors e;
      e.add("train.attention_backend", "is " + name_of(backend) + ", which exists only on CUDA; the CPU has "
                                       "flash and math (or auto)");
      throw ConfigError(e);
    }
    ctx.setSDPUseFlash(backend != AttentionBackend::math);
    allow_cpu_causal_attention(backend == AttentionBackend::automatic);
    held_attention_order.clear();  // the CPU's SDPA does not go by the order
    return backend == AttentionBackend::math ? "math" : "flash, math";
  }
  std::vector<B> order = {B::flash_attention, B::efficient_attention, B::math, B::cudnn_attention};  // PyTorch's
  B first = B::error;
  switch (backend) {
    case AttentionBackend::automatic: first = cuda_major >= 9 ? B::cudnn_attention : B::error; break;
    case AttentionBackend::cudnn: first = B::cudnn_attention; break;
    case AttentionBackend::flash: first = B::flash_attention; break;
    case AttentionBackend::efficient: first = B::efficient_attention; break;
    case AttentionBackend::math: first = B::math; break;
  }
  if (first != B::error) {
    order.erase(std::find(order.begin(), order.end(), first));
    order.insert(order.begin(), first);
  }
  std::vector<int64_t> ids;
  std::string text;
  for (B b : order) {
    ids.push_back(static_cast<int64_t>(b));
    text += (text.empty() ? "" : ", ") + sdpa_backend_name(static_cast<int64_t>(b));
  }
  ids.push_back(static_cast<int64_t>(B::overrideable));  // the order must name every backend
  // PyTorch 2.11 reorders the backends itself on its first CUDA attention
  // call (cuDNN first with cuDNN >= 9.15): on the H200, attention_backend:
  // flash ran cuDNN. One tiny call first lets that happen now, and
  // StepRunner::begin_step holds keel's order from then on (hold_attention_order).
  if (device.is_cuda()) {
    try {
      auto q = torch::zeros({1, 1, 8, 64}, torch::TensorOptions().device(device).dtype(torch::kBFloat16));
      at::scaled_dot_product_attention(q, q, q, c10::nullopt, 0.0, /*is_causal=*/true);
    } catch (const std::exception&) {
      // a device that cannot run this fails at the first real step, with the model's shapes in the message
    }
  }
  ctx.setSDPPriorityOrder(ids);
  held_attention_order = ids;
  return text;
}

int cuda_device_for_rank(int local_rank, int local_world, int visible_devices) {
  if (visible_devices < 1) throw DistError("no CUDA device is visible to local rank " + std::to_string(local_rank));
  if (visible_devices == 1) return 0;
  if (local_world <= visible_devices) return local_rank;
  throw DistError(strf("LOCAL_WORLD_SIZE=%d ranks on this node but CUDA_VISIBLE_DEVICES leaves %d GPUs visible: "
                       "start at most %d ranks per node (keel launch --nproc, torchrun --nproc-per-node, "
                       "srun --ntasks-per-node), or give each rank its own GPU (--gpus-per-task=1)",
                       local_world, visible_devices, visible_devices));
}

ComputeSetup setup_compute(const TrainConfig& t, int local_rank, int local_world) {
  ComputeSetup s;
  const bool have_cuda = torch::cuda::is_available();
  const DeviceChoice device =
      t.device == DeviceChoice::automatic ? (have_cuda ? DeviceChoice::cuda : DeviceChoice::cpu) : t.device;
  if (device == DeviceChoice::cuda && t.precision == Precision::fp64) {
    ConfigErrors e;
    e.add("train.precision", "is fp64, which keel runs on the CPU only (a reference for replaying an fp32 run); use "
                             "--set train.device=cpu, or fp32 / bf16 on the GPU");
    throw ConfigError(e);
  }
  if (device == DeviceChoice::cuda && !have_cuda) {
    ConfigErrors e;
    e.add("train.device", "is cuda but no CUDA device is visible; use --set train.device=cpu");
    throw ConfigError(e);
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  s.threads = t.threads > 0 ? static_cast<int>(t.threads) : std::max(1, cores / std::max(1, local_world));
  torch::set_num_threads(s.threads);
  if (device == DeviceChoice::cuda) {
#ifdef KEEL_WITH_CUDA
    s.device = torch::Device(torch::kCUDA, cuda_device_for_rank(local_rank, local_world,
                                                                 static_cast<int>(torch::cuda::device_count())));
    c10::cuda::set_device(s.device.index());
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, s.device.index());
    s.device_name = prop.name;
    char bus[32] = {0};
    cudaDeviceGetPCIBusId(bus, sizeof bus, s.device.index());
    s.device_key = host_name() + "/" + bus;
    s.bf16_autocast = t.precision != Precision::fp32;
    at::globalContext().setAllowTF32CuBLAS(t.tf32);
    at::globalContext().setAllowTF32CuDNN(t.tf32);
    s.attention_order = apply_attention_backend(t.attention_backend, s.device, prop.major);
    s.peak_flops = cuda_peak_bf16(s.device_name);
    s.peak_source = s.peak_flops > 0 ? s.device_name + " dense bf16 (data sheet)" : "unknown GPU (MFU not shown)";
#else
    ConfigErrors e;
    e.add("train.device", "is cuda, but this keel was built against a CPU-only LibTorch; rebuild with a CUDA LibTorch");
    throw ConfigError(e);
#endif
  } else {
    // bf16 on the CPU only when asked for ("auto" stays fp32): CPU autocast
    // runs matmuls in bf16 (fast with AVX-512 BF16 or AMX, emulated without).
    s.bf16_autocast = t.precision == Precision::bf16;
    s.fp64 = t.precision == Precision::fp64;
    s.attention_order = apply_attention_backend(t.attention_backend, s.device);
    keep_freed_memory_in_process();
    s.device_name = "cpu (" + std::to_string(s.threads) + " threads)";
    s.peak_flops = measure_cpu_matmul_flops();
    s.peak_source = "measured fp32 1024^3 matmul (best of BLAS and oneDNN) on " + std::to_string(s.threads) + " threads";
  }
  return s;
}


}  // namespace keel
