#include "model/cpu_attention.h"

#include <ATen/Parallel.h>
#include <ATen/native/CPUBlas.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>
#include <utility>
#include <vector>

#include "model/cpu_parallel.h"
#include "model/fast_exp.h"
#include "model/simd_dispatch.h"
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

std::atomic<bool> g_allowed{true};  // allow_cpu_causal_attention
std::atomic<CpuAttentionGemm> g_gemm{CpuAttentionGemm::kAuto};  // set_cpu_attention_gemm
std::atomic<CpuAttentionProbs> g_probs{CpuAttentionProbs::kAuto};  // set_cpu_attention_probs

#ifdef CPUBLAS_BRGEMM_F32F32F32
constexpr bool kHasBrgemm = true;  // this LibTorch exports ATen's fp32 cpublas::brgemm
#else
constexpr bool kHasBrgemm = false;
#endif

// A setting of this kernel: what its setter stored (`set`), unless that is
// kAuto, else the environment variable's value among `names` (read once, in
// `env`), else kAuto.
template <class E>
E requested(const std::atomic<E>& set, const E& env) {
  const E v = set.load();
  return v != E::kAuto ? v : env;
}
template <class E>
E from_env(const char* var, std::initializer_list<std::pair<const char*, E>> names) {
  const char* e = std::getenv(var);
  for (const auto& [name, value] : names)
    if (e && std::strcmp(e, name) == 0) return value;
  return E::kAuto;
}

// The back end asked for: set_cpu_attention_gemm, else KEEL_CPU_ATTENTION_GEMM=blas|onednn.
CpuAttentionGemm requested_attention_gemm() {
  static const auto env = from_env<CpuAttentionGemm>(
      "KEEL_CPU_ATTENTION_GEMM", {{"blas", CpuAttentionGemm::kBlas}, {"onednn", CpuAttentionGemm::kOneDnn}});
  return requested(g_gemm, env);
}

// Whether a call with T tokens runs its blocks' GEMMs on oneDNN's brgemm
// micro-kernel (through ATen's cpublas::brgemm, the one PyTorch's
// reduced-precision flash kernel calls), else on BLAS sgemm. brgemm JITs a
// kernel for each shape and leading dimensions and runs it on the calling
// thread; ATen falls back to its own gemm where oneDNN is switched off or the
// CPU lacks AVX2. On a 2-core Zen 4 the attention took 213 ms of a bench-cpu
// step against 238 on MKL's sgemm (docs/speed.md, "Other CPUs"). ATen keeps
// every kernel it JITs (about 25 KiB and 0.1 ms each there, per thread), and
// the shapes follow T: by default (kAuto) brgemm serves only T a multiple of
// the query block, where the blocks' shapes repeat and a run meets at most
// max_seq_len / 64 of them; other lengths, such as each token of `keel
// generate` (which recomputes the prefix), take sgemm. kOneDnn forces brgemm
// for every T (tests), kBlas sgemm.
bool use_brgemm(int64_t T) {
  if (!kHasBrgemm) return false;
  if (sgemm_ == nullptr) return true;  // no BLAS: brgemm (or ATen's own gemm behind it) is all there is
  switch (requested_attention_gemm()) {
    case CpuAttentionGemm::kBlas: return false;
    case CpuAttentionGemm::kOneDnn: return true;
    case CpuAttentionGemm::kAuto: break;
  }
  return T % kQueryBlock == 0;
}

// The probabilities policy asked for: set_cpu_attention_probs, else
// KEEL_CPU_ATTENTION_PROBS=save|recompute.
CpuAttentionProbs requested_attention_probs() {
  static const auto env = from_env<CpuAttentionProbs>(
      "KEEL_CPU_ATTENTION_PROBS", {{"save", CpuAttentionProbs::kSave}, {"recompute", CpuAttentionProbs::kRecompute}});
  return requested(g_probs, env);
}

// Whether the forward keeps its probabilities for the backward at T tokens.
// Only where one key block holds every key (T <= kKeyBlock): the forward's
// scores then end as e^(s - row max) of the final max, and one multiplication
// by 1 / row sum makes them the probabilities. Above that the earlier key
// blocks' values were taken against an older max, and the memory grows as T^2.
bool save_probabilities(int64_t T) {
  return T <= kKeyBlock && requested_attention_probs() != CpuAttentionProbs::kRecompute;
}

// Floats of one head's saved probabilities before query block `block`: the
// blocks of a (batch, K/V head) pair lie one after another, each
// [heads * rows, keys] with keys = its first row + rows (what it may see).
int64_t probs_before(int64_t block, int64_t T) {
  int64_t total = 0;
  for (int64_t j = 0; j < block; ++j) {
    const int64_t m = j * kQueryBlock, rows = std::min(kQueryBlock, T - m);
    total += rows * (m + rows);
  }
  return total;
}

// Row-major C [M, N] = A [M, K] B [K, N] (+ C where accumulate), with row
// strides lda, ldb, ldc. Every product the kernel needs is written in this
// form (transposed operands are transposed into scratch first) because
// brgemm takes no transposes and no alpha. BLAS is column-major, where a
// row-major matrix reads as its transpose: C^T = B^T A^T.
void nn_gemm(bool onednn, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
             float* C, int64_t ldc, bool accumulate) {
#ifdef CPUBLAS_BRGEMM_F32F32F32
  if (onednn) {
    at::native::cpublas::brgemm(M, N, K, lda, ldb, ldc, accumulate, A, B, C, /*is_vnni=*/false);
    return;
  }
#endif
  const char no = 'N';
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
  const int la = static_cast<int>(lda), lb = static_cast<int>(ldb), lc = static_cast<int>(ldc);
  sgemm_(&no, &no, &n, &m, &k, &one, B, &lb, A, &la, &beta, C, &lc);
}

// One row of a score block in the forward: s[0, cnt) are this block's visible
// scores, s[cnt, kb) the future. Overwrites s with e^(s - new max) (0 for the
// future), updates the row's running max and sum, and returns the factor
// e^(old max - new max) its accumulated output must be scaled by.
KEEL_SIMD_KERNEL(float, softmax_step, (float* __restrict s, int64_t cnt, int64_t kb, float* row_max, float* row_sum),
                 (s, cnt, kb, row_max, row_sum)) {
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
KEEL_SIMD_KERNEL(void, probabilities, (float* __restrict s, int64_t cnt, int64_t kb, float lse), (s, cnt, kb, lse)) {
  for (int64_t j = 0; j < cnt; ++j) s[j] = exp_poly(s[j] - lse);
  for (int64_t j = cnt; j < kb; ++j) s[j] = 0.0f;
}

// Backward, one row: dS = P * (dP - delta), written over dP.
KEEL_SIMD_KERNEL(void, softmax_grad, (const float* __restrict p, float* __restrict dp, int64_t kb, float delta),
                 (p, dp, kb, delta)) {
  for (int64_t j = 0; j < kb; ++j) dp[j] = p[j] * (dp[j] - delta);
}

KEEL_SIMD_KERNEL(float, attn_dot, (const float* __restrict a, const float* __restrict b, int64_t n), (a, b, n)) {
  float acc[kAttnLanes] = {};
  int64_t j = 0;
  for (; j + kAttnLanes <= n; j += kAttnLanes)
    for (int l = 0; l < kAttnLanes; ++l) acc[l] += a[j + l] * b[j + l];
  float s = 0.0f;
  for (; j < n; ++j) s += a[j] * b[j];
  for (int l = 0; l < kAttnLanes; ++l) s += acc[l];
  return s;
}

// dst = src * s over n floats.
KEEL_SIMD_KERNEL(void, scale_row, (const float* __restrict src, int64_t n, float s, float* __restrict dst),
                 (src, n, s, dst)) {
  for (int64_t j = 0; j < n; ++j) dst[j] = src[j] * s;
}

// x *= s over n floats.
KEEL_SIMD_KERNEL(void, scale_in_place, (float* __restrict x, int64_t n, float s), (x, n, s)) {
  for (int64_t j = 0; j < n; ++j) x[j] *= s;
}

// KEEL_CPU_ATTENTION=sdpa keeps PyTorch's kernel (to measure what this one buys).
bool attention_kernel_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("KEEL_CPU_ATTENTION");
    return !(env && std::strcmp(env, "sdpa") == 0);
  }();
  return on && g_allowed.load() && (sgemm_ != nullptr || kHasBrgemm);
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

// How a query block's rows are stacked for its GEMMs: `heads` query heads
// that share a K/V head make one GEMM with it instead of one each, and the
// block's rows are cut into `subs` sub-blocks of sub_rows consecutive
// queries, sub-block first, then head (subs 1: head-major). Sub-block s sees
// keys up to m + (s + 1) sub_rows, so the diagonal key block's GEMMs skip the
// future of all but the last sub-block: of the diagonal's masked half, 1 /
// subs is computed. Sub-blocks are cut only for a whole query block, and
// as many as keep 64 rows each in the forward (diagonal_subs of the group);
// a backward task with fewer heads (a group split over threads) keeps the
// forward's cut, whose probabilities it may read, with smaller GEMMs.
struct BlockRows {
  int64_t heads, rows, subs, sub_rows;
  BlockRows(int64_t heads, int64_t rows, int64_t subs)
      : heads(heads), rows(rows), subs(rows == kQueryBlock ? subs : 1), sub_rows(rows / this->subs) {}
  int64_t size() const { return heads * rows; }
  int64_t sub_size() const { return heads * sub_rows; }  // the rows of one sub-block, contiguous
  int64_t head(int64_t i) const { return i / sub_rows % heads; }
  int64_t row(int64_t i) const { return i / sub_size() * sub_rows + i % sub_rows; }  // in the query block
  int64_t index(int64_t head, int64_t row) const {
    return row / sub_rows * sub_size() + head * sub_rows + row % sub_rows;
  }
};

// Sub-blocks of a query block of `group` heads: as many as keep 64 rows each
// (at most 4, so 16 queries of each head).
int64_t diagonal_subs(int64_t group) { return group >= 4 ? 4 : group >= 2 ? 2 : 1; }

// Calls f(first stacked row, rows, keys) for the GEMMs of key block [n, n +
// kb) of the query block at m: one over every row where each sub-block sees
// the whole key block, else one per sub-block with the keys it may see.
template <class F>
void for_each_segment(const BlockRows& L, int64_t m, int64_t n, int64_t kb, F&& f) {
  if (m + L.sub_rows - n >= kb) {
    f(int64_t{0}, L.size(), kb);
    return;
  }
  for (int64_t s = 0; s < L.subs; ++s) f(s * L.sub_size(), L.sub_size(), std::min(kb, m + (s + 1) * L.sub_rows - n));
}

// Rows [m, m + L.rows) of the L.heads consecutive heads from h0, stacked
// into one dense [L.size(), D] matrix as L lays them out and multiplied by
// `scale`.
void gather_rows(const float* src, const AttnStrides& s, int64_t b, int64_t h0, const BlockRows& L, int64_t m,
                 int64_t D, float scale, float* dst) {
  for (int64_t j = 0; j < L.heads; ++j)
    for (int64_t r = 0; r < L.rows; ++r) {
      const float* from = src + b * s.b + (h0 + j) * s.h + (m + r) * s.t;
      float* to = dst + L.index(j, r) * D;
      if (scale == 1.0f)
        std::memcpy(to, from, D * sizeof(float));
      else
        for (int64_t d = 0; d < D; ++d) to[d] = from[d] * scale;
    }
}

// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols, in 16 x 16
// tiles: a row-by-row transpose writes each element to another cache line,
// at strides (1-2 KiB) that collide in L1.
void transpose(const float* src, int64_t lds, int64_t rows, int64_t cols, float* dst, int64_t ldd) {
  constexpr int64_t kTile = 16;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) dst[c * ldd + r] = src[r * lds + c];
    }
}

// K or V [B, Hkv, T, D] (any row stride) as [B, Hkv, D, T]: the right-hand
// operand of the products with K^T and V^T.
torch::Tensor keys_transposed(const torch::Tensor& t) { return t.transpose(2, 3).contiguous(); }

// Writes out, lse and (where save_probabilities(T)) probs: per (batch, K/V
// head) pair, every query block's probabilities as probs_before lays them out.
void attention_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, float scale,
                       torch::Tensor& out, torch::Tensor& lse, torch::Tensor& probs) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1), group = H / Hkv;
  const int64_t q_blocks = (T + kQueryBlock - 1) / kQueryBlock;
  const bool onednn = use_brgemm(T);
  out = torch::empty({B, T, H, D}, q.options());  // shape: [B, T, H, D], returned as [B, H, T, D]
  lse = torch::empty({B, H, T}, q.options());
  const int64_t pair_probs = group * probs_before(q_blocks, T);
  probs = save_probabilities(T) ? torch::empty({B * Hkv * pair_probs}, q.options()) : torch::Tensor();
  float* pp = probs.defined() ? probs.data_ptr<float>() : nullptr;
  const auto kt = keys_transposed(k);  // shape: [B, Hkv, D, T]
  const AttnStrides qs(q), vs(v);
  const float *qp = q.data_ptr<float>(), *ktp = kt.data_ptr<float>(), *vp = v.data_ptr<float>();
  float *op = out.data_ptr<float>(), *lp = lse.data_ptr<float>();
  // A task: one query block of the `group` heads that read one K/V head.
  keel::parallel_for(0, B * Hkv * q_blocks, 1, [&](int64_t begin, int64_t end) {
    const int64_t stacked = group * kQueryBlock;
    Scratch qg(stacked * D), scores(stacked * std::min(kKeyBlock, T)), acc(stacked * D);
    std::vector<float> row_max(stacked), row_sum(stacked);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / (Hkv * q_blocks), kvh = task / q_blocks % Hkv, m = task % q_blocks * kQueryBlock;
      const int64_t rows = std::min(kQueryBlock, T - m), keys = m + rows;
      const BlockRows L(group, rows, diagonal_subs(group));
      gather_rows(qp, qs, b, kvh * group, L, m, D, scale, qg.data());
      const float* kth = ktp + (b * Hkv + kvh) * D * T;
      const float* vh = vp + b * vs.b + kvh * vs.h;
      std::fill(row_max.begin(), row_max.end(), -INFINITY);
      std::fill(row_sum.begin(), row_sum.end(), 0.0f);
      // Saving (one key block: keys <= kKeyBlock), the scores are computed in
      // the saved block itself and normalised there before P V, so keeping
      // them costs no extra pass; the output then needs no division.
      float* saved = pp ? pp + (b * Hkv + kvh) * pair_probs + group * probs_before(m / kQueryBlock, T) : nullptr;
      for (int64_t n = 0; n < keys; n += kKeyBlock) {  // causal: keys [0, m + rows)
        const int64_t kb = std::min(kKeyBlock, keys - n);
        float* s = saved ? saved : scores.data();  // row stride kb
        for_each_segment(L, m, n, kb, [&](int64_t i0, int64_t cnt, int64_t seen) {
          // S = (scale Q) K^T; acc = acc * correction + P V
          nn_gemm(onednn, cnt, seen, D, qg.data() + i0 * D, D, kth + n, T, s + i0 * kb, kb, false);
          for (int64_t i = i0; i < i0 + cnt; ++i) {
            const int64_t visible = std::clamp<int64_t>(m + L.row(i) - n + 1, 0, seen);
            const float c = softmax_step(s + i * kb, visible, seen, &row_max[i], &row_sum[i]);
            if (saved) scale_in_place(s + i * kb, visible, 1.0f / row_sum[i]);
            if (n > 0)
              for (int64_t d = 0; d < D; ++d) acc[i * D + d] *= c;
          }
          nn_gemm(onednn, cnt, D, seen, s + i0 * kb, kb, vh + n * vs.t, vs.t, acc.data() + i0 * D, D, n > 0);
        });
      }
      for (int64_t i = 0; i < L.size(); ++i) {
        const int64_t h = kvh * group + L.head(i), t = m + L.row(i);
        float* o = op + (b * T + t) * H * D + h * D;
        scale_row(acc.data() + i * D, D, saved ? 1.0f : 1.0f / row_sum[i], o);
        lp[(b * H + h) * T + t] = row_max[i] + std::log(row_sum[i]);
      }
    }
  });
}

// dq [B, T, H, D]; dk, dv [B, T, Hkv, D]. A task is `heads` query heads of
// one K/V head and one batch row, all query blocks: the K/V gradients of a
// task accumulate in one place, transposed ([D, T]: the products dS^T Q and
// P^T dO are written as Q^T dS and dO^T P, brgemm taking no transposed
// operand), and are transposed back once at its end. Where there are fewer
// (batch, K/V head) pairs than threads, a group is split over several tasks,
// each with its own K/V gradient buffer, summed in task order afterwards.
// With the forward's probs (defined where it saved them) the backward reads
// P instead of recomputing it: one GEMM of five and the exponentials fewer.
void attention_backward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& out, const torch::Tensor& lse, const torch::Tensor& probs,
                        const torch::Tensor& dout, float scale, torch::Tensor& dq, torch::Tensor& dk,
                        torch::Tensor& dv) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1), group = H / Hkv;
  int64_t splits = 1;  // tasks per group: the smallest divisor of the group that gives every thread one
  while (B * Hkv * splits < at::get_num_threads() && splits < group) {
    ++splits;
    while (group % splits != 0) ++splits;
  }
  const int64_t heads = group / splits;
  const bool onednn = use_brgemm(T);
  dq = torch::empty({B, T, H, D}, q.options());
  // shape: [splits, B, T, Hkv, D]; every element is written by one task
  auto dk_parts = torch::empty({splits, B, T, Hkv, D}, q.options()), dv_parts = torch::empty_like(dk_parts);
  const auto kt = keys_transposed(k), vt = keys_transposed(v);  // shape: [B, Hkv, D, T]
  const AttnStrides qs(q), ks(k), os(out), gs(dout);
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *ktp = kt.data_ptr<float>();
  const float *vtp = vt.data_ptr<float>(), *op = out.data_ptr<float>(), *gp = dout.data_ptr<float>();
  const float* lp = lse.data_ptr<float>();
  const float* pp = probs.defined() ? probs.data_ptr<float>() : nullptr;  // one key block: T <= kKeyBlock
  const int64_t pair_probs = group * probs_before((T + kQueryBlock - 1) / kQueryBlock, T);
  float *dqp = dq.data_ptr<float>(), *dkp = dk_parts.data_ptr<float>(), *dvp = dv_parts.data_ptr<float>();
  const int64_t kv_row = Hkv * D, part = B * T * kv_row;  // row stride and size of one K/V gradient part
  keel::parallel_for(0, B * Hkv * splits, 1, [&](int64_t begin, int64_t end) {
    const int64_t stacked = heads * kQueryBlock, width = std::min(kKeyBlock, T);
    Scratch qg(stacked * D), qt(stacked * D), gg(stacked * D), gt(stacked * D), dqg(stacked * D);
    Scratch p(stacked * width), dp(stacked * width), dkt(D * T), dvt(D * T);
    std::vector<float> delta(stacked);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / (Hkv * splits), kvh = task / splits % Hkv, split = task % splits;
      const int64_t h0 = kvh * group + split * heads;
      const float* kh = kp + b * ks.b + kvh * ks.h;
      const float* kth = ktp + (b * Hkv + kvh) * D * T;
      const float* vth = vtp + (b * Hkv + kvh) * D * T;
      std::fill(dkt.data(), dkt.data() + D * T, 0.0f);
      std::fill(dvt.data(), dvt.data() + D * T, 0.0f);
      for (int64_t m = 0; m < T; m += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, T - m), keys = m + rows;
        const BlockRows L(heads, rows, diagonal_subs(group)), F(group, rows, diagonal_subs(group));  // F: the forward's
        const int64_t n_rows = L.size();
        gather_rows(qp, qs, b, h0, L, m, D, scale, qg.data());
        gather_rows(gp, gs, b, h0, L, m, D, 1.0f, gg.data());
        transpose(qg.data(), D, n_rows, D, qt.data(), n_rows);
        transpose(gg.data(), D, n_rows, D, gt.data(), n_rows);
        for (int64_t i = 0; i < n_rows; ++i)  // delta = rowsum(dO * O), the softmax's backward term
          delta[i] = attn_dot(gg.data() + i * D, op + b * os.b + (h0 + L.head(i)) * os.h + (m + L.row(i)) * os.t, D);
        // The block the forward saved holds all `group` heads: this task's rows of sub-block s start at row
        // s * F.sub_size() + split * L.sub_size() there.
        const float* saved = pp ? pp + (b * Hkv + kvh) * pair_probs + group * probs_before(m / kQueryBlock, T) : nullptr;
        for (int64_t n = 0; n < keys; n += kKeyBlock) {
          const int64_t kb = std::min(kKeyBlock, keys - n);
          for_each_segment(L, m, n, kb, [&](int64_t i0, int64_t cnt, int64_t seen) {
            const float* P = p.data() + i0 * kb;  // this segment's probabilities, row stride kb
            if (saved) {
              P = saved + (i0 / L.sub_size() * F.sub_size() + split * L.sub_size() + i0 % L.sub_size()) * kb;
            } else {
              nn_gemm(onednn, cnt, seen, D, qg.data() + i0 * D, D, kth + n, T, p.data() + i0 * kb, kb, false);  // S
              for (int64_t i = i0; i < i0 + cnt; ++i)
                probabilities(p.data() + i * kb, std::clamp<int64_t>(m + L.row(i) - n + 1, 0, seen), seen,
                              lp[(b * H + h0 + L.head(i)) * T + m + L.row(i)]);
            }
            // With dS = P (dP - delta): dV^T += dO^T P; dP = dO V^T; dQ / scale += dS K;
            // dK^T += (scale Q)^T dS
            float* dS = dp.data() + i0 * kb;
            nn_gemm(onednn, D, seen, cnt, gt.data() + i0, n_rows, P, kb, dvt.data() + n, T, true);
            nn_gemm(onednn, cnt, seen, D, gg.data() + i0 * D, D, vth + n, T, dS, kb, false);
            for (int64_t i = 0; i < cnt; ++i) softmax_grad(P + i * kb, dS + i * kb, seen, delta[i0 + i]);
            nn_gemm(onednn, cnt, D, seen, dS, kb, kh + n * ks.t, ks.t, dqg.data() + i0 * D, D, n > 0);
            nn_gemm(onednn, D, seen, cnt, qt.data() + i0, n_rows, dS, kb, dkt.data() + n, T, true);
          });
        }
        for (int64_t i = 0; i < n_rows; ++i) {
          float* to = dqp + (b * T + m + L.row(i)) * H * D + (h0 + L.head(i)) * D;
          for (int64_t d = 0; d < D; ++d) to[d] = dqg[i * D + d] * scale;
        }
      }
      transpose(dkt.data(), T, D, T, dkp + split * part + b * T * kv_row + kvh * D, kv_row);
      transpose(dvt.data(), T, D, T, dvp + split * part + b * T * kv_row + kvh * D, kv_row);
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
    torch::Tensor out, lse, probs;
    attention_forward(q, k, v, static_cast<float>(scale), out, lse, probs);
    auto y = out.transpose(1, 2);  // [B, H, T, D]
    ctx->save_for_backward({q, k, v, y, lse, probs});
    ctx->saved_data["scale"] = scale;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("keel::causal_attention_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    auto dout = attn_dense_rows(grads[0]);
    torch::Tensor dq, dk, dv;
    attention_backward(saved[0], saved[1], saved[2], saved[3], saved[4], saved[5], dout,
                       static_cast<float>(ctx->saved_data["scale"].toDouble()), dq, dk, dv);
    return {dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2), torch::Tensor()};
  }
};

}  // namespace

std::string cpu_causal_attention_gemm(int64_t T) { return use_brgemm(T) ? "brgemm" : "sgemm"; }

void allow_cpu_causal_attention(bool on) { g_allowed.store(on); }

void set_cpu_attention_gemm(CpuAttentionGemm gemm) { g_gemm.store(gemm); }

void set_cpu_attention_probs(CpuAttentionProbs probs) { g_probs.store(probs); }

int64_t cpu_causal_attention_saved_probs(int64_t T) {
  return save_probabilities(T) ? probs_before((T + kQueryBlock - 1) / kQueryBlock, T) : 0;
}

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
