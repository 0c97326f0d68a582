// The chunked loss's per-row softmax work (softcap, log-sum-exp, the
// target's logit, the gradient of cross-entropy + z-loss) as the CUDA kernel
// (xent_kernel.cu) computes it: one block per row, each thread an online
// log-sum-exp over columns tid, tid + threads, ..., merged by a tree in a
// fixed order, then each thread writes its columns' gradients.
// tests/model/test_xent_row.cpp runs these functions on the CPU in the
// kernel's order against the composite path.
#pragma once

#include <c10/macros/Macros.h>

#include <cmath>
#include <cstdint>

namespace keel::xent {

struct Params {
  int64_t vocab;   // columns from here on are padding: probability 0, gradient 0
  int64_t padded;  // the row's length
  float cap;       // softcap cap * tanh(x / cap); <= 0: none
  float inv_n;     // 1 / N over the whole batch's rows
  float z_coef;    // z-loss coefficient
};

// A logit after the softcap.
C10_HOST_DEVICE inline float capped(float x, float cap) { return cap > 0 ? cap * tanhf(x / cap) : x; }

// Online log-sum-exp: running max m and the sum of e^(v - m).
struct Lse {
  float m, s;
};
C10_HOST_DEVICE inline Lse lse_empty() { return {-INFINITY, 0.0f}; }
C10_HOST_DEVICE inline Lse lse_add(Lse a, float v) {
  if (v <= a.m) return {a.m, a.s + expf(v - a.m)};
  return {v, a.s * expf(a.m - v) + 1.0f};
}
C10_HOST_DEVICE inline Lse lse_merge(Lse a, Lse b) {
  if (b.s == 0.0f) return a;
  if (a.s == 0.0f) return b;
  return a.m >= b.m ? Lse{a.m, a.s + b.s * expf(b.m - a.m)} : Lse{b.m, b.s + a.s * expf(a.m - b.m)};
}
C10_HOST_DEVICE inline float lse_value(Lse a) { return a.m + logf(a.s); }

// Thread `tid` of `threads`: its columns of row x (capped logits).
template <typename T>
C10_HOST_DEVICE inline Lse thread_lse(const T* x, const Params& p, int64_t tid, int64_t threads) {
  Lse st = lse_empty();
  for (int64_t j = tid; j < p.vocab; j += threads) st = lse_add(st, capped(static_cast<float>(x[j]), p.cap));
  return st;
}

// d(mean(ce) + z_coef mean(lse^2)) / d(raw logit x) at one column:
// (softmax (1 + 2 z_coef lse) - onehot) / N, times 1 - tanh^2 under the cap;
// 0 on padding.
C10_HOST_DEVICE inline float grad(float x, bool is_target, bool padding, float lse, const Params& p) {
  if (padding) return 0.0f;
  const float t = p.cap > 0 ? tanhf(x / p.cap) : 0.0f;
  const float v = p.cap > 0 ? p.cap * t : x;
  float g = expf(v - lse) * (1.0f + 2.0f * p.z_coef * lse) * p.inv_n;
  if (is_target) g -= p.inv_n;
  return p.cap > 0 ? g * (1.0f - t * t) : g;
}

}  // namespace keel::xent
