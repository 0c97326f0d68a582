// exp(x) and the functions built on it, in float, for the CPU kernels' inner
// loops (fused_xent.cpp, cpu_attention.cpp, fused_glu.cpp): plain arithmetic
// and selects, so the loops they are inlined into vectorise (the library
// expf does not).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace keel {

// exp(x) to about 2 ulp: x = n ln2 + r, |r| <= ln2/2, Cephes's degree-6
// polynomial for e^r, times 2^n built in the exponent bits; 0 below -87.3,
// where e^x leaves the normal range (and for x = -inf). Above 88.03 it gives
// +inf, a little early: softmax arguments are <= 0 and tanh needs only the limit there.
inline float exp_poly(float x) {
  const float xc = std::min(x, 88.3762626647949f);
  const float y = xc * 1.44269504088896341f + 0.5f;
  float n = static_cast<float>(static_cast<int32_t>(std::max(y, -130.0f)));  // floor(y) for y >= 0 ...
  n -= n > y ? 1.0f : 0.0f;                                                  // ... and for y < 0
  n = std::max(n, -126.0f);
  const float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < -87.3365447f ? 0.0f : p * scale;
}

// tanh(y) = 1 - 2 / (e^{2y} + 1): exact limits at both ends, absolute error
// about 1e-7 near 0 (a softcap multiplies it by the cap).
inline float tanh_poly(float y) { return 1.0f - 2.0f / (exp_poly(2.0f * y) + 1.0f); }

// The logistic sigmoid 1 / (1 + e^-y), with exact limits at both ends.
inline float sigmoid_poly(float y) { return 1.0f / (1.0f + exp_poly(-y)); }

}  // namespace keel
