// keel's causal CPU attention alone (src/model/cpu_attention.h): one call's
// forward and backward, timed with the probabilities kept and recomputed,
// the two alternating, on random inputs laid out as the attention layer
// passes them (q, k, v slices of one fused projection). For kernel work,
// where a training step's noise hides a few ms; `keel bench` times the step.
//   build/bench_cpu_attention [B H Hkv T D [CALLS]]   (default: bench-cpu's 4 8 2 512 64, 30 calls)
// The environment caps the ISA as for keel (KEEL_CPU_CAPABILITY, ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA).
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <malloc.h>

#include <algorithm>
#include <climits>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "model/cpu_attention.h"
#include "model/simd_dispatch.h"
#include "util/host.h"

namespace {

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

int run(int argc, char** argv) {
  std::vector<int64_t> a = {4, 8, 2, 512, 64, 30};  // B H Hkv T D calls
  if (argc != 1 && argc != 6 && argc != 7) {
    std::fprintf(stderr, "usage: %s [B H Hkv T D [CALLS]]\n", argv[0]);
    return 2;
  }
  for (int i = 1; i < argc; ++i) {
    char* end = nullptr;
    a[static_cast<size_t>(i - 1)] = std::strtoll(argv[i], &end, 10);
    if (*end != '\0' || a[static_cast<size_t>(i - 1)] <= 0) {
      std::fprintf(stderr, "%s: argument %d (%s) is not a positive integer\n", argv[0], i, argv[i]);
      return 2;
    }
  }
  const int64_t B = a[0], H = a[1], Hkv = a[2], T = a[3], D = a[4], calls = a[5];
  if (H % Hkv != 0) {
    std::fprintf(stderr, "%s: H (%lld) is not a multiple of Hkv (%lld)\n", argv[0], static_cast<long long>(H),
                 static_cast<long long>(Hkv));
    return 2;
  }
  std::printf("cpu_attention B %lld H %lld Hkv %lld T %lld D %lld, %lld calls; %s [%s], %d threads, keel %s, "
              "ATen %s, %s\n",
              static_cast<long long>(B), static_cast<long long>(H), static_cast<long long>(Hkv),
              static_cast<long long>(T), static_cast<long long>(D), static_cast<long long>(calls),
              keel::cpu_model().c_str(), keel::cpu_isa().c_str(), at::get_num_threads(),
              keel::simd_level_name(keel::simd_level()), at::get_cpu_capability().c_str(),
              keel::cpu_causal_attention_gemm(T).c_str());
  // Freed memory stays in the process, as keel sets it up for training
  // (train/device.cpp): otherwise each call's buffers are new mmap()s whose
  // page faults the training step does not pay.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  torch::manual_seed(1);
  auto fused = torch::randn({B, T, (H + 2 * Hkv) * D}).requires_grad_(true);  // shape: [B, T, (H + 2 Hkv) D]
  auto dout = torch::randn({B, H, T, D});
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int round = 0; round < 2; ++round)
    for (const auto mode : {keel::CpuAttentionProbs::kRecompute, keel::CpuAttentionProbs::kSave}) {
      keel::set_cpu_attention_probs(mode);
      std::vector<double> fwd, bwd;
      for (int64_t i = 0; i < calls; ++i) {
        auto parts = fused.split_with_sizes({H * D, Hkv * D, Hkv * D}, -1);
        auto q = parts[0].view({B, T, H, D}).transpose(1, 2);  // shape: [B, H, T, D]
        auto k = parts[1].view({B, T, Hkv, D}).transpose(1, 2);
        auto v = parts[2].view({B, T, Hkv, D}).transpose(1, 2);
        const auto t0 = std::chrono::steady_clock::now();
        auto out = keel::cpu_causal_attention(q, k, v, scale);
        const auto t1 = std::chrono::steady_clock::now();
        if (!out.defined()) {
          std::fprintf(stderr, "%s: the kernel does not run here (KEEL_CPU_ATTENTION=sdpa or the fused kernels off?)\n",
                       argv[0]);
          return 1;
        }
        auto grads = torch::autograd::grad({out}, {fused}, {dout});
        const auto t2 = std::chrono::steady_clock::now();
        fwd.push_back(ms_between(t0, t1));
        bwd.push_back(ms_between(t1, t2));
      }
      std::sort(fwd.begin(), fwd.end());
      std::sort(bwd.begin(), bwd.end());
      const bool kept = keel::cpu_causal_attention_saved_probs(T) > 0;
      std::printf("  %-36s forward min %7.3f median %7.3f ms | backward min %7.3f median %7.3f ms\n",
                  kept ? "probabilities kept" : "probabilities recomputed", fwd.front(), fwd[fwd.size() / 2],
                  bwd.front(), bwd[bwd.size() / 2]);
    }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const c10::Error& e) {  // out of memory at a large shape, a LibTorch error
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 1;
  }
}
