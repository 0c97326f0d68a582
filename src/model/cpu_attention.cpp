#include "model/cpu_attention.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "model/cpu_parallel.h"
#include "model/fast_exp.h"
#include "model/simd_clones.h"
#include "model/fused_xent.h"

// The Fortran BLAS sgemm that LibTorch's CPU build carries (MKL on x86,
// OpenBLAS elsewhere) and ATen's own CPU flash kernel calls. Weak: a LibTorch
// built without BLAS leaves it null and SDPA runs instead.
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc) __attribute__((weak));

namespace keel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kQueryBlock = 64;  // query rows per block (bench-cpu: 128 and 256 slower, 32 within noise)
constexpr int64_t kKeyBlock = 512;   // keys per online-softmax step (the score block stays in L2)
constexpr int kAttnLanes = 16;       // independent partial results, so the row loops vectorise

// Row-major C [M, N] = alpha op(A) op(B) + beta C, op(A) [M, K], op(B) [K, N];
// A is stored [M, K] (or [K, M] when ta), B [K, N] (or [N, K] when tb), with
// row strides lda, ldb, ldc. BLAS is column-major, where a row-major matrix
// reads as its transpose: C^T = op(B)^T op(A)^T.
void rm_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const char tA = ta ? 'T' : 'N', tB = tb ? 'T' : 'N';
  const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
  const int la = static_cast<int>(lda), lb = static_cast<int>(ldb), lc = static_cast<int>(ldc);
  sgemm_(&tB, &tA, &n, &m, &k, &alpha, B, &lb, A, &la, &beta, C, &lc);
}

// One row of a score block in the forward: s[0, cnt) are this block's visible
// scores, s[cnt, kb) the future. Overwrites s with e^(s - new max) (0 for the
// future), updates the row's running max and sum, and returns the factor
// e^(old max - new max) its accumulated output must be scaled by.
KEEL_SIMD_CLONES float softmax_step(float* __restrict s, int64_t cnt, int64_t kb, float* row_max, float* row_sum) {
  float m[kAttnLanes];
  std::fill(m, m + kAttnLanes, -INFINITY);
  int64_t j = 0;
  for (; j + kAttnLanes <= cnt; j += kAttnLanes)
    for (int l = 0; l < kAttnLanes; ++l) m[l] = std::max(m[l], s[j + l]);
  float mx = *row_max;
  for (; j < cnt; ++j) mx = std::max(mx, s[j]);
  for (int l = 0; l < kAttnLanes; ++l) mx = std::max(mx, m[l]);
  float acc[kAttnLanes] = {};
  for (j = 0; j + kAttnLanes <= cnt; j += kAttnLanes)
    for (int l = 0; l < kAttnLanes; ++l) {
      const float e = exp_poly(s[j + l] - mx);
      s[j + l] = e;
      acc[l] += e;
    }
  float sum = 0.0f;
  for (; j < cnt; ++j) {
    const float e = exp_poly(s[j] - mx);
    s[j] = e;
    sum += e;
  }
  for (int l = 0; l < kAttnLanes; ++l) sum += acc[l];
  for (j = cnt; j < kb; ++j) s[j] = 0.0f;
  if (mx == -INFINITY) return 1.0f;  // nothing visible yet (not reached: every block shows a row its first key)
  const float correction = exp_poly(*row_max - mx);  // 0 on the first block (old max -inf)
  *row_sum = *row_sum * correction + sum;
  *row_max = mx;
  return correction;
}

// Backward, one row: p = e^(s - lse) over the visible scores, 0 for the future.
KEEL_SIMD_CLONES void probabilities(float* __restrict s, int64_t cnt, int64_t kb, float lse) {
  for (int64_t j = 0; j < cnt; ++j) s[j] = exp_poly(s[j] - lse);
  for (int64_t j = cnt; j < kb; ++j) s[j] = 0.0f;
}

// Backward, one row: dS = P * (dP - delta), written over dP.
KEEL_SIMD_CLONES void softmax_grad(const float* __restrict p, float* __restrict dp, int64_t kb, float delta) {
  for (int64_t j = 0; j < kb; ++j) dp[j] = p[j] * (dp[j] - delta);
}

KEEL_SIMD_CLONES float attn_dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float acc[kAttnLanes] = {};
  int64_t j = 0;
  for (; j + kAttnLanes <= n; j += kAttnLanes)
    for (int l = 0; l < kAttnLanes; ++l) acc[l] += a[j + l] * b[j + l];
  float s = 0.0f;
  for (; j < n; ++j) s += a[j] * b[j];
  for (int l = 0; l < kAttnLanes; ++l) s += acc[l];
  return s;
}

std::atomic<bool> g_allowed{true};  // allow_cpu_causal_attention

// KEEL_CPU_ATTENTION=sdpa keeps PyTorch's kernel (to measure what this one buys).
bool attention_kernel_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("KEEL_CPU_ATTENTION");
    return !(env && std::strcmp(env, "sdpa") == 0);
  }();
  return on && g_allowed.load() && sgemm_ != nullptr;
}

// The head dimension dense and rows at least D apart (what BLAS takes).
torch::Tensor attn_dense_rows(const torch::Tensor& t) {
  return t.stride(3) == 1 && t.stride(2) >= t.size(3) ? t : t.contiguous();
}

// A task's scratch matrix, 64-byte aligned whatever the allocator returns:
// a BLAS may split its work by the operands' alignment, and a run must give
// the same bits every time (CPU resume is bit-exact). Uninitialised: every
// user writes before it reads.
class Scratch {
 public:
  explicit Scratch(int64_t n)
      : data_(static_cast<float*>(std::aligned_alloc(64, (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64))) {
    if (!data_) throw std::bad_alloc();
  }
  ~Scratch() { std::free(data_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* data() { return data_; }
  float& operator[](int64_t i) { return data_[i]; }

 private:
  float* data_;
};

// A [B, heads, T, D] tensor's element strides, for pointer arithmetic.
struct AttnStrides {
  explicit AttnStrides(const torch::Tensor& t) : b(t.stride(0)), h(t.stride(1)), t(t.stride(2)) {}
  int64_t b, h, t;
};

// Rows [m, m + rows) of `heads` consecutive heads from h0, stacked into one
// dense [heads * rows, D] matrix (head-major), so the heads that share a K/V
// head make one GEMM with it instead of one each.
void gather_rows(const float* src, const AttnStrides& s, int64_t b, int64_t h0, int64_t heads, int64_t m, int64_t rows,
                 int64_t D, float* dst) {
  for (int64_t j = 0; j < heads; ++j)
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + (j * rows + r) * D, src + b * s.b + (h0 + j) * s.h + (m + r) * s.t, D * sizeof(float));
}

void attention_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, float scale,
                       torch::Tensor& out, torch::Tensor& lse) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1), group = H / Hkv;
  const int64_t q_blocks = (T + kQueryBlock - 1) / kQueryBlock;
  out = torch::empty({B, T, H, D}, q.options());  // shape: [B, T, H, D], returned as [B, H, T, D]
  lse = torch::empty({B, H, T}, q.options());
  const AttnStrides qs(q), ks(k), vs(v);
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  float *op = out.data_ptr<float>(), *lp = lse.data_ptr<float>();
  // A task: one query block of the `group` heads that read one K/V head.
  keel::parallel_for(0, B * Hkv * q_blocks, 1, [&](int64_t begin, int64_t end) {
    const int64_t stacked = group * kQueryBlock;
    Scratch qg(stacked * D), scores(stacked * std::min(kKeyBlock, T)), acc(stacked * D);
    std::vector<float> row_max(stacked), row_sum(stacked);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / (Hkv * q_blocks), kvh = task / q_blocks % Hkv, m = task % q_blocks * kQueryBlock;
      const int64_t rows = std::min(kQueryBlock, T - m), keys = m + rows, n_rows = group * rows;
      gather_rows(qp, qs, b, kvh * group, group, m, rows, D, qg.data());
      const float* kh = kp + b * ks.b + kvh * ks.h;
      const float* vh = vp + b * vs.b + kvh * vs.h;
      std::fill(row_max.begin(), row_max.end(), -INFINITY);
      std::fill(row_sum.begin(), row_sum.end(), 0.0f);
      for (int64_t n = 0; n < keys; n += kKeyBlock) {  // causal: keys [0, m + rows)
        const int64_t kb = std::min(kKeyBlock, keys - n);
        rm_gemm(false, true, n_rows, kb, D, scale, qg.data(), D, kh + n * ks.t, ks.t, 0.0f, scores.data(), kb);
        for (int64_t i = 0; i < n_rows; ++i) {
          const int64_t visible = std::clamp<int64_t>(m + i % rows - n + 1, 0, kb);
          const float c = softmax_step(scores.data() + i * kb, visible, kb, &row_max[i], &row_sum[i]);
          if (n > 0)
            for (int64_t d = 0; d < D; ++d) acc[i * D + d] *= c;
        }
        rm_gemm(false, false, n_rows, D, kb, 1.0f, scores.data(), kb, vh + n * vs.t, vs.t, n > 0 ? 1.0f : 0.0f,
                acc.data(), D);
      }
      for (int64_t i = 0; i < n_rows; ++i) {
        const int64_t h = kvh * group + i / rows, t = m + i % rows;
        const float inv = 1.0f / row_sum[i];
        float* o = op + (b * T + t) * H * D + h * D;
        for (int64_t d = 0; d < D; ++d) o[d] = acc[i * D + d] * inv;
        lp[(b * H + h) * T + t] = row_max[i] + std::log(row_sum[i]);
      }
    }
  });
}

// dq [B, T, H, D]; dk, dv [B, T, Hkv, D]. A task is `heads` query heads of
// one K/V head and one batch row, all query blocks: the K/V gradients of a
// task accumulate in one place. Where there are fewer (batch, K/V head)
// pairs than threads, a group is split over several tasks, each with its own
// K/V gradient buffer, summed in task order afterwards.
void attention_backward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& out, const torch::Tensor& lse, const torch::Tensor& dout, float scale,
                        torch::Tensor& dq, torch::Tensor& dk, torch::Tensor& dv) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1), group = H / Hkv;
  int64_t splits = 1;  // tasks per group: the smallest divisor of the group that gives every thread one
  while (B * Hkv * splits < at::get_num_threads() && splits < group) {
    ++splits;
    while (group % splits != 0) ++splits;
  }
  const int64_t heads = group / splits;
  dq = torch::empty({B, T, H, D}, q.options());
  // shape: [splits, B, T, Hkv, D]
  auto dk_parts = torch::zeros({splits, B, T, Hkv, D}, q.options()), dv_parts = torch::zeros_like(dk_parts);
  const AttnStrides qs(q), ks(k), vs(v), os(out), gs(dout);
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  const float *op = out.data_ptr<float>(), *gp = dout.data_ptr<float>(), *lp = lse.data_ptr<float>();
  float *dqp = dq.data_ptr<float>(), *dkp = dk_parts.data_ptr<float>(), *dvp = dv_parts.data_ptr<float>();
  const int64_t kv_row = Hkv * D, part = B * T * kv_row;  // row stride and size of one K/V gradient part
  keel::parallel_for(0, B * Hkv * splits, 1, [&](int64_t begin, int64_t end) {
    const int64_t stacked = heads * kQueryBlock, width = std::min(kKeyBlock, T);
    Scratch qg(stacked * D), gg(stacked * D), dqg(stacked * D), p(stacked * width), dp(stacked * width);
    std::vector<float> delta(stacked);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / (Hkv * splits), kvh = task / splits % Hkv, split = task % splits;
      const int64_t h0 = kvh * group + split * heads;
      const float* kh = kp + b * ks.b + kvh * ks.h;
      const float* vh = vp + b * vs.b + kvh * vs.h;
      float* dkh = dkp + split * part + b * T * kv_row + kvh * D;
      float* dvh = dvp + split * part + b * T * kv_row + kvh * D;
      for (int64_t m = 0; m < T; m += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, T - m), keys = m + rows, n_rows = heads * rows;
        gather_rows(qp, qs, b, h0, heads, m, rows, D, qg.data());
        gather_rows(gp, gs, b, h0, heads, m, rows, D, gg.data());
        for (int64_t i = 0; i < n_rows; ++i)  // delta = rowsum(dO * O), the softmax's backward term
          delta[i] = attn_dot(gg.data() + i * D, op + b * os.b + (h0 + i / rows) * os.h + (m + i % rows) * os.t, D);
        for (int64_t n = 0; n < keys; n += kKeyBlock) {
          const int64_t kb = std::min(kKeyBlock, keys - n);
          rm_gemm(false, true, n_rows, kb, D, scale, qg.data(), D, kh + n * ks.t, ks.t, 0.0f, p.data(), kb);
          for (int64_t i = 0; i < n_rows; ++i)
            probabilities(p.data() + i * kb, std::clamp<int64_t>(m + i % rows - n + 1, 0, kb), kb,
                          lp[(b * H + h0 + i / rows) * T + m + i % rows]);
          // dV += P^T dO; dP = dO V^T; dS = P (dP - delta); dQ += scale dS K; dK += scale dS^T Q
          rm_gemm(true, false, kb, D, n_rows, 1.0f, p.data(), kb, gg.data(), D, 1.0f, dvh + n * kv_row, kv_row);
          rm_gemm(false, true, n_rows, kb, D, 1.0f, gg.data(), D, vh + n * vs.t, vs.t, 0.0f, dp.data(), kb);
          for (int64_t i = 0; i < n_rows; ++i) softmax_grad(p.data() + i * kb, dp.data() + i * kb, kb, delta[i]);
          rm_gemm(false, false, n_rows, D, kb, scale, dp.data(), kb, kh + n * ks.t, ks.t, n > 0 ? 1.0f : 0.0f,
                  dqg.data(), D);
          rm_gemm(true, false, kb, D, n_rows, scale, dp.data(), kb, qg.data(), D, 1.0f, dkh + n * kv_row, kv_row);
        }
        for (int64_t i = 0; i < n_rows; ++i)
          std::memcpy(dqp + (b * T + m + i % rows) * H * D + (h0 + i / rows) * D, dqg.data() + i * D,
                      D * sizeof(float));
      }
    }
  });
  if (splits == 1) {
    dk = dk_parts[0];
    dv = dv_parts[0];
    return;
  }
  // A K/V head's gradient: the sum of its parts, in part order.
  dk = dk_parts[0].clone();
  dv = dv_parts[0].clone();
  for (int64_t s = 1; s < splits; ++s) {
    dk.add_(dk_parts[s]);
    dv.add_(dv_parts[s]);
  }
}

struct CausalAttentionFn : public torch::autograd::Function<CausalAttentionFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q_in, const torch::Tensor& k_in,
                               const torch::Tensor& v_in, double scale) {
    RECORD_FUNCTION("keel::causal_attention", std::vector<c10::IValue>());  // for train/op_counter.h
    at::NoGradGuard no_grad;
    auto q = attn_dense_rows(q_in), k = attn_dense_rows(k_in), v = attn_dense_rows(v_in);
    torch::Tensor out, lse;
    attention_forward(q, k, v, static_cast<float>(scale), out, lse);
    auto y = out.transpose(1, 2);  // [B, H, T, D]
    ctx->save_for_backward({q, k, v, y, lse});
    ctx->saved_data["scale"] = scale;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("keel::causal_attention_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    auto dout = attn_dense_rows(grads[0]);
    torch::Tensor dq, dk, dv;
    attention_backward(saved[0], saved[1], saved[2], saved[3], saved[4], dout,
                       static_cast<float>(ctx->saved_data["scale"].toDouble()), dq, dk, dv);
    return {dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2), torch::Tensor()};
  }
};

}  // namespace

void allow_cpu_causal_attention(bool on) { g_allowed.store(on); }

bool cpu_causal_attention_applies(torch::Device device, torch::ScalarType dtype) {
  return device.is_cpu() && dtype == torch::kFloat32 && fused_cpu_kernels_enabled() && attention_kernel_enabled();
}

torch::Tensor cpu_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   double scale) {
  if (!q.defined() || !cpu_causal_attention_applies(q.device(), q.scalar_type()) || q.dim() != 4 || k.dim() != 4 ||
      v.dim() != 4 || k.scalar_type() != torch::kFloat32 || v.scalar_type() != torch::kFloat32 ||
      !k.device().is_cpu() || !v.device().is_cpu() || k.sizes() != v.sizes() || k.size(0) != q.size(0) ||
      k.size(2) != q.size(2) || k.size(3) != q.size(3) || k.size(1) == 0 || q.size(1) % k.size(1) != 0 ||
      q.numel() == 0)
    return {};
  return CausalAttentionFn::apply(q, k, v, scale);
}

}  // namespace keel
