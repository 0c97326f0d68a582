// The instruction sets keel's own CPU loops (attention softmax, gated
// activation and GELU, loss, row norms) are compiled for, and which one runs.
//
// KEEL_SIMD_KERNEL compiles a function three times: for AVX-512 (avx512f, with
// FMA), for AVX2 with FMA (the float arithmetic of x86-64-v3: every AVX2 CPU
// has FMA) and for the base ISA, plus a dispatcher that calls the widest one
// the CPU has. Not target_clones: its "avx2" copy leaves FMA out, so every
// a * b + c is a multiply and an add (the loss, GELU and gated-activation loops
// ran 1.3-2.6x slower there than their AVX-512 copies on the same Zen 4), and
// clang 14 cannot name a copy for two features.
//
// KEEL_CPU_CAPABILITY (avx512, avx2 or default: ATen's names, as
// ATEN_CPU_CAPABILITY caps LibTorch's kernels) caps the level, to measure
// on an AVX-512 machine what an AVX2-only CPU runs (docs/speed.md, "AVX2 on
// an AVX-512 machine").
#pragma once

namespace keel {

enum class SimdLevel { kBase = 0, kAvx2 = 1, kAvx512 = 2 };

// What keel's loops run: the widest level the CPU supports, under the caps.
SimdLevel simd_level();
// The widest level this CPU has (KEEL_CPU_CAPABILITY aside).
SimdLevel simd_level_supported();
// "avx512f", "avx2" (with FMA) or "default".
const char* simd_level_name(SimdLevel level);
// Tests: run a narrower level (clamped to what the CPU supports); reset
// returns to the default.
void set_simd_level(SimdLevel level);
void reset_simd_level();

}  // namespace keel

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KEEL_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))
#define KEEL_TARGET_AVX2 __attribute__((target("avx2,fma")))
// KEEL_SIMD_KERNEL(ret, name, (params), (args)) { body } defines `name` and
// its three copies; args names the parameters in order. The body is inlined
// into each copy, so it (and what it inlines) compiles for that copy's ISA.
#define KEEL_SIMD_KERNEL(ret, name, params, args)                                  \
  [[gnu::always_inline]] inline ret name##_simd_body params;                       \
  KEEL_TARGET_AVX512 ret name##_simd_avx512 params { return name##_simd_body args; } \
  KEEL_TARGET_AVX2 ret name##_simd_avx2 params { return name##_simd_body args; }     \
  ret name##_simd_base params { return name##_simd_body args; }                      \
  ret name params {                                                                  \
    switch (::keel::simd_level()) {                                                  \
      case ::keel::SimdLevel::kAvx512: return name##_simd_avx512 args;               \
      case ::keel::SimdLevel::kAvx2: return name##_simd_avx2 args;                   \
      default: return name##_simd_base args;                                         \
    }                                                                                \
  }                                                                                  \
  [[gnu::always_inline]] inline ret name##_simd_body params
#else
#define KEEL_SIMD_KERNEL(ret, name, params, args) ret name params
#endif
