#include "model/simd_dispatch.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace keel {

namespace {

std::atomic<int> g_level{-1};  // -1: not chosen yet

SimdLevel cpu_widest() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2 && __builtin_cpu_supports("avx512f")) return SimdLevel::kAvx512;
  if (avx2) return SimdLevel::kAvx2;
#endif
  return SimdLevel::kBase;
}

SimdLevel narrower(SimdLevel a, SimdLevel b) { return static_cast<int>(a) < static_cast<int>(b) ? a : b; }

// KEEL_CPU_CAPABILITY, as ATen reads ATEN_CPU_CAPABILITY; unset: no cap.
SimdLevel env_cap() {
  const char* e = std::getenv("KEEL_CPU_CAPABILITY");
  if (!e || !*e || std::strcmp(e, "avx512") == 0) return SimdLevel::kAvx512;
  if (std::strcmp(e, "avx2") == 0) return SimdLevel::kAvx2;
  if (std::strcmp(e, "default") == 0) return SimdLevel::kBase;
  std::fprintf(stderr, "keel: KEEL_CPU_CAPABILITY=%s is not avx512, avx2 or default; ignored\n", e);
  return SimdLevel::kAvx512;
}

}  // namespace

SimdLevel simd_level_supported() {
  static const SimdLevel widest = cpu_widest();
  return widest;
}

SimdLevel simd_level() {
  int level = g_level.load(std::memory_order_relaxed);
  if (level < 0) {
    level = static_cast<int>(narrower(simd_level_supported(), env_cap()));
    g_level.store(level, std::memory_order_relaxed);
  }
  return static_cast<SimdLevel>(level);
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512: return "avx512f";
    case SimdLevel::kAvx2: return "avx2";
    default: return "default";
  }
}

void set_simd_level(SimdLevel level) {
  g_level.store(static_cast<int>(narrower(level, simd_level_supported())), std::memory_order_relaxed);
}

void reset_simd_level() { g_level.store(-1, std::memory_order_relaxed); }

}  // namespace keel
