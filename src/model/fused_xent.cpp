// The chunked loss's per-row softmax work in one kernel (fused_ops.h,
// fused_cpu_softmax_xent): softcap, log-sum-exp, the target's logit and the
// gradient of cross-entropy + z-loss, written over the logits in place. The
// composite reads and writes each chunk's logits four to six times
// (log_softmax into a new tensor, exp, scale, and with a softcap a tanh, its
// copy and the derivative); here a row is read once from memory and written
// once, the rest of the passes hit the cache (a row of 8k-32k floats fits L2).
#include "model/fused_xent.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "model/cpu_parallel.h"
#include "model/fast_exp.h"
#include "model/simd_dispatch.h"

namespace keel {

namespace {

constexpr int kLanes = 16;  // independent partial results: vectorised, and the same whatever the thread split

// One row: x [padded] logits (before the softcap) in, the gradient out when
// `grad` (scaled by inv_n, the padded tail zeroed), lse and the target's logit.
// Compiled for AVX-512, AVX2 with FMA and the base ISA (simd_dispatch.h).
KEEL_SIMD_KERNEL(void, xent_row,
                 (float* __restrict x, int64_t vocab, int64_t padded, int64_t target, float cap, float inv_n,
                  float z_coef, bool grad, float* lse_out, float* target_out),
                 (x, vocab, padded, target, cap, inv_n, z_coef, grad, lse_out, target_out)) {
  // Pass 1: softcap (x becomes tanh(x / cap); the logit is cap * x) and the max.
  float m[kLanes];
  std::fill(m, m + kLanes, -INFINITY);
  const float inv_cap = cap > 0 ? 1.0f / cap : 0.0f, mul = cap > 0 ? cap : 1.0f;
  int64_t j = 0;
  for (; j + kLanes <= vocab; j += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      float v = x[j + k];
      if (cap > 0) v = tanh_poly(v * inv_cap), x[j + k] = v;
      m[k] = std::max(m[k], v * mul);
    }
  float mx = -INFINITY;
  for (; j < vocab; ++j) {
    float v = x[j];
    if (cap > 0) v = tanh_poly(v * inv_cap), x[j] = v;
    mx = std::max(mx, v * mul);
  }
  for (int k = 0; k < kLanes; ++k) mx = std::max(mx, m[k]);
  *target_out = x[target] * mul;
  // Pass 2: sum of e^(logit - max). Without a cap and with a gradient to
  // form, e^(logit - max) is kept in x, so pass 3 is one multiply.
  const bool keep_exp = grad && !(cap > 0);
  float s[kLanes] = {};
  for (j = 0; j + kLanes <= vocab; j += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const float e = exp_poly(x[j + k] * mul - mx);
      if (keep_exp) x[j + k] = e;
      s[k] += e;
    }
  float sum = 0.0f;
  for (; j < vocab; ++j) {
    const float e = exp_poly(x[j] * mul - mx);
    if (keep_exp) x[j] = e;
    sum += e;
  }
  for (int k = 0; k < kLanes; ++k) sum += s[k];
  const float lse = mx + std::log(sum);
  *lse_out = lse;
  if (!grad) return;
  // Pass 3: d/dlogit = softmax (1 + 2 z lse) / N - onehot / N, through the cap's tanh.
  const float a = (1.0f + 2.0f * z_coef * lse) * inv_n;
  if (keep_exp) {
    const float b = a / sum;  // softmax = e^(logit - max) / sum
    for (j = 0; j < vocab; ++j) x[j] *= b;
    x[target] -= inv_n;
  } else {
    const float tgt_tanh = x[target];
    for (j = 0; j < vocab; ++j) {
      const float t = x[j];
      x[j] = exp_poly(t * mul - lse) * a * (1.0f - t * t);
    }
    x[target] -= inv_n * (1.0f - tgt_tanh * tgt_tanh);
  }
  for (j = vocab; j < padded; ++j) x[j] = 0.0f;
}

// KEEL_CPU_FUSED_LOSS=0 turns this kernel alone off (to measure what it buys);
// KEEL_CPU_FUSED=0 turns it off with the others.
bool loss_kernel_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("KEEL_CPU_FUSED_LOSS");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  return on;
}

}  // namespace

bool fused_cpu_loss_applies() { return fused_cpu_kernels_enabled() && loss_kernel_enabled(); }

bool fused_cpu_softmax_xent(torch::Tensor& logits, const torch::Tensor& targets, int64_t vocab, double cap,
                            double inv_n, double z_coef, bool grad, torch::Tensor* lse, torch::Tensor* target_logit) {
  if (!fused_cpu_loss_applies() || !logits.defined() || !logits.device().is_cpu() ||
      logits.scalar_type() != torch::kFloat32 || logits.dim() != 2 || !logits.is_contiguous() ||
      logits.size(0) == 0 || vocab <= 0 || vocab > logits.size(1) || !targets.defined() ||
      targets.scalar_type() != torch::kInt64 || targets.numel() != logits.size(0) || !targets.device().is_cpu())
    return false;
  const int64_t n = logits.size(0), padded = logits.size(1);
  auto t = targets.reshape({n}).contiguous();
  const int64_t* tp = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    TORCH_CHECK(tp[i] >= 0 && tp[i] < vocab, "fused_cpu_softmax_xent: target ", tp[i], " of row ", i,
                " is outside the vocabulary [0, ", vocab, ")");
  RECORD_FUNCTION("keel::softmax_xent", std::vector<c10::IValue>());  // one kernel for train/op_counter.h
  *lse = torch::empty({n}, logits.options());
  *target_logit = torch::empty({n}, logits.options());
  float* x = logits.data_ptr<float>();
  float* lp = lse->data_ptr<float>();
  float* tl = target_logit->data_ptr<float>();
  const float c = static_cast<float>(cap > 0 ? cap : 0.0), in = static_cast<float>(inv_n),
              z = static_cast<float>(z_coef);
  keel::parallel_for(0, n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) xent_row(x + i * padded, vocab, padded, tp[i], c, in, z, grad, lp + i, tl + i);
  });
  return true;
}

}  // namespace keel
