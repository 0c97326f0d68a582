// Which copy of keel's CPU loops runs (src/model/simd_dispatch.h): the AVX2
// copy has FMA (target_clones' "avx2" copy has none), the base copy does not,
// a level is never set above what the CPU supports, and KEEL_CPU_CAPABILITY
// caps it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "model/simd_dispatch.h"
#include "simd_levels.h"

namespace {

// a * b + c in one expression: one rounding where the copy has FMA (the
// compiler contracts it), two where it has not.
KEEL_SIMD_KERNEL(float, multiply_add, (float a, float b, float c), (a, b, c)) { return a * b + c; }

// Operands whose product needs more than a float's 24 bits, so that fused
// and unfused differ: (1 + 2^-12)^2 - 1 is 2^-11 + 2^-24 exactly, and the
// rounded product loses the 2^-24.
constexpr float kA = 1.0f + 1.0f / 4096.0f;

bool cpu_has_fma() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

struct LevelGuard {
  ~LevelGuard() { keel::reset_simd_level(); }
};

TEST(SimdDispatch, TheVectorCopiesFuseMultiplyAddAndTheBaseCopyDoesNot) {
  volatile float a = kA, c = -1.0f;  // volatile: computed at run time, in the copy under test
  const float fused = std::fma(static_cast<float>(a), static_cast<float>(a), static_cast<float>(c));
  const float product = static_cast<float>(a) * static_cast<float>(a);
  const float unfused = product + static_cast<float>(c);
  ASSERT_NE(fused, unfused) << "the operands do not tell the two apart";
#if !defined(__x86_64__)
  GTEST_SKIP() << "one copy only off x86-64, compiled as the build decides";
#endif
  LevelGuard guard;
  keel::set_simd_level(keel::SimdLevel::kBase);
  EXPECT_EQ(multiply_add(a, a, c), unfused) << "the base copy";
  if (static_cast<int>(keel::simd_level_supported()) < static_cast<int>(keel::SimdLevel::kAvx2))
    GTEST_SKIP() << "this CPU has no AVX2 with FMA: only the base copy runs";
  keel::set_simd_level(keel::SimdLevel::kAvx2);
  EXPECT_EQ(multiply_add(a, a, c), fused) << "the AVX2 copy";
  if (keel::simd_level_supported() == keel::SimdLevel::kAvx512) {
    keel::set_simd_level(keel::SimdLevel::kAvx512);
    EXPECT_EQ(multiply_add(a, a, c), fused) << "the AVX-512 copy";
  }
}

TEST(SimdDispatch, ALevelIsNeverAboveWhatTheCpuSupports) {
  LevelGuard guard;
  const auto supported = keel::simd_level_supported();
  if (supported != keel::SimdLevel::kBase) EXPECT_TRUE(cpu_has_fma());
  keel::set_simd_level(keel::SimdLevel::kAvx512);
  EXPECT_EQ(keel::simd_level(), supported);
  keel::reset_simd_level();
  if (!std::getenv("KEEL_CPU_CAPABILITY")) EXPECT_EQ(keel::simd_level(), supported);
  int runs = 0;
  keel_test::for_each_simd_level([&] {
    EXPECT_EQ(static_cast<int>(keel::simd_level()), runs);  // base, then AVX2, then AVX-512
    ++runs;
  });
  EXPECT_EQ(runs, static_cast<int>(supported) + 1);
}

TEST(SimdDispatch, KeelCpuCapabilityCapsTheLevel) {
  LevelGuard guard;
  const char* before = std::getenv("KEEL_CPU_CAPABILITY");
  const std::string saved = before ? before : "";
  const auto supported = keel::simd_level_supported();
  auto level_under = [](const char* value) {
    setenv("KEEL_CPU_CAPABILITY", value, 1);
    keel::reset_simd_level();
    return keel::simd_level();
  };
  EXPECT_EQ(level_under("default"), keel::SimdLevel::kBase);
  EXPECT_EQ(static_cast<int>(level_under("avx2")), std::min(static_cast<int>(supported), 1));
  EXPECT_EQ(level_under("avx512"), supported);
  EXPECT_EQ(level_under("sse9"), supported);  // unknown: a warning, no cap
  if (before)
    setenv("KEEL_CPU_CAPABILITY", saved.c_str(), 1);
  else
    unsetenv("KEEL_CPU_CAPABILITY");
}

TEST(SimdDispatch, LevelsHaveTheNamesKeelBenchPrints) {
  EXPECT_STREQ(keel::simd_level_name(keel::SimdLevel::kAvx512), "avx512f");
  EXPECT_STREQ(keel::simd_level_name(keel::SimdLevel::kAvx2), "avx2");
  EXPECT_STREQ(keel::simd_level_name(keel::SimdLevel::kBase), "default");
}

}  // namespace
