#include "model/fused_ops.h"
#include "model/fused_xent.h"

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "model/activation_checkpoint.h"
#include "model/cpu_parallel.h"
#include "model/simd_dispatch.h"
#include "util/host.h"

namespace keel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

thread_local int composite_only_depth = 0;  // CompositeOnly guards alive on this thread

// KEEL_CPU_KERNELS=composite: neither the fused kernels nor oneDNN linears,
// i.e. the ATen composites CUDA runs (CI runs the model tests so too).
bool composite_requested() {
  const char* env = std::getenv("KEEL_CPU_KERNELS");
  return env && std::strcmp(env, "composite") == 0;
}

// KEEL_CPU_FUSED=0 turns the norm and RoPE kernels off (to measure what they buy).
bool fused_kernels_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("KEEL_CPU_FUSED");
    return !(env && std::strcmp(env, "0") == 0) && !composite_requested();
  }();
  return on && composite_only_depth == 0;
}

bool cpu_float_or_double(const torch::Tensor& t) {
  return fused_kernels_enabled() && t.defined() && t.device().is_cpu() && !t.is_sparse() &&
         (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kFloat64);
}

// Eight independent partial sums: the compiler vectorises them, and the
// result does not depend on how rows are split over threads.
template <typename T>
[[gnu::always_inline]] inline T dot(const T* __restrict a, const T* __restrict b, int64_t n) {
  T acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[j + k] * b[j + k];
  T s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; j < n; ++j) s += a[j] * b[j];
  return s;
}

// Where row i of x, viewed as [rows, x.size(-1)], starts. The last dimension
// must be dense (stride 1); the leading ones may have any strides, so a head
// slice of the fused q/k/v projection's output is read in place, not copied.
struct RowOffsets {
  explicit RowOffsets(const torch::Tensor& x) : n(x.size(-1)), contiguous(x.is_contiguous()) {
    for (int64_t d = 0; d + 1 < x.dim(); ++d) {
      sizes.push_back(x.size(d));
      strides.push_back(x.stride(d));
    }
  }
  int64_t operator()(int64_t i) const {
    if (contiguous) return i * n;
    int64_t offset = 0;
    for (size_t d = sizes.size(); d-- > 0;) {
      offset += (i % sizes[d]) * strides[d];
      i /= sizes[d];
    }
    return offset;
  }
  int64_t n;
  bool contiguous;
  std::vector<int64_t> sizes, strides;
};

// A dense last dimension as RowOffsets needs (a copy only when it is not).
torch::Tensor rows_readable(const torch::Tensor& x) { return x.stride(-1) == 1 ? x : x.contiguous(); }

// ---------------------------------------------------------------- row norm

// One row of length n: y = x r (times the gain w where there is one);
// returns r, rsqrt(mean(x^2) + eps) or 1 / max(||x||, eps).
template <typename T>
[[gnu::always_inline]] inline T norm_forward_row(const T* __restrict xi, const T* __restrict wi, T* __restrict yi,
                                                 int64_t n, T eps, bool l2) {
  const T ss = dot(xi, xi, n);
  const T ri = l2 ? T(1) / std::max(std::sqrt(ss), eps) : T(1) / std::sqrt(ss / static_cast<T>(n) + eps);
  if (wi) {
    for (int64_t j = 0; j < n; ++j) yi[j] = (xi[j] * ri) * wi[j];
  } else {
    for (int64_t j = 0; j < n; ++j) yi[j] = xi[j] * ri;
  }
  return ri;
}
// float rows run on keel's AVX-512 / AVX2 copies (simd_dispatch.h); double
// (tests' reference precision) on the base ISA.
KEEL_SIMD_KERNEL(float, norm_forward_row_f32,
                 (const float* __restrict xi, const float* __restrict wi, float* __restrict yi, int64_t n, float eps,
                  bool l2),
                 (xi, wi, yi, n, eps, l2)) {
  return norm_forward_row<float>(xi, wi, yi, n, eps, l2);
}

// Rows of length n; the gain (if any) has `period` rows and row i uses gain
// row i % period. r[i] is the row's scale.
template <typename T>
void row_norm_forward(const T* x, const RowOffsets& x_rows, const T* w, T* y, T* r, int64_t rows, int64_t n,
                      int64_t period, double eps, bool l2) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n));
  keel::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* wi = w ? w + (i % period) * n : nullptr;
      if constexpr (std::is_same_v<T, float>)
        r[i] = norm_forward_row_f32(x + x_rows(i), wi, y + i * n, n, static_cast<T>(eps), l2);
      else
        r[i] = norm_forward_row<T>(x + x_rows(i), wi, y + i * n, n, static_cast<T>(eps), l2);
    }
  });
}

// One row of the backward: dx = r * (g - xhat * c), g = dy * w, xhat = x * r,
// and c = mean(g * xhat) (rms) or sum(g * xhat) (l2, where the norm exceeds
// eps; below it the scale is the constant 1/eps and dx = r * g); pw += dy *
// xhat where there is a gain. g and xhat: scratch rows of n.
template <typename T>
[[gnu::always_inline]] inline void norm_backward_row(const T* __restrict xi, const T* __restrict wi, T ri,
                                                     const T* __restrict dyi, T* __restrict dxi, T* __restrict pw,
                                                     T* __restrict g, T* __restrict xhat, int64_t n, T eps, bool l2) {
  for (int64_t j = 0; j < n; ++j) xhat[j] = xi[j] * ri;
  if (wi) {
    for (int64_t j = 0; j < n; ++j) {
      g[j] = dyi[j] * wi[j];
      pw[j] += dyi[j] * xhat[j];
    }
  } else {
    for (int64_t j = 0; j < n; ++j) g[j] = dyi[j];
  }
  T c = dot(g, xhat, n);
  if (!l2) c /= static_cast<T>(n);
  else if (std::sqrt(dot(xi, xi, n)) < eps) c = 0;  // norm below eps: constant scale
  for (int64_t j = 0; j < n; ++j) dxi[j] = ri * (g[j] - xhat[j] * c);
}
KEEL_SIMD_KERNEL(void, norm_backward_row_f32,
                 (const float* __restrict xi, const float* __restrict wi, float ri, const float* __restrict dyi,
                  float* __restrict dxi, float* __restrict pw, float* __restrict g, float* __restrict xhat, int64_t n,
                  float eps, bool l2),
                 (xi, wi, ri, dyi, dxi, pw, g, xhat, n, eps, l2)) {
  norm_backward_row<float>(xi, wi, ri, dyi, dxi, pw, g, xhat, n, eps, l2);
}

// dw = sum over rows of dy * xhat, in a fixed number of row blocks summed in
// order (deterministic).
template <typename T>
void row_norm_backward(const T* x, const RowOffsets& x_rows, const T* w, const T* r, const T* dy, T* dx, T* dw,
                       int64_t rows, int64_t n, int64_t period, double eps, bool l2) {
  const int64_t blocks = std::min<int64_t>(rows, 64);
  const int64_t per_block = (rows + blocks - 1) / blocks;
  const int64_t W = period * n;
  std::vector<T> partial(w ? static_cast<size_t>(blocks * W) : 0, T(0));
  keel::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<T> g(static_cast<size_t>(n)), xhat(static_cast<size_t>(n));
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t i = b * per_block; i < std::min(rows, (b + 1) * per_block); ++i) {
        const int64_t p = (i % period) * n;
        const T* wi = w ? w + p : nullptr;
        T* pw = w ? partial.data() + b * W + p : nullptr;
        if constexpr (std::is_same_v<T, float>)
          norm_backward_row_f32(x + x_rows(i), wi, r[i], dy + i * n, dx + i * n, pw, g.data(), xhat.data(), n,
                                static_cast<T>(eps), l2);
        else
          norm_backward_row<T>(x + x_rows(i), wi, r[i], dy + i * n, dx + i * n, pw, g.data(), xhat.data(), n,
                               static_cast<T>(eps), l2);
      }
  });
  if (w) {
    std::fill(dw, dw + W, T(0));
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t k = 0; k < W; ++k) dw[k] += partial[static_cast<size_t>(b * W + k)];
  }
}

struct RowNormFn : public torch::autograd::Function<RowNormFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& weight_in,
                               int64_t n, double eps, bool l2) {
    // An empty weight stands for "no gain" (autograd inputs must be defined).
    auto x = rows_readable(x_in);
    auto w = weight_in.contiguous();
    const bool has_w = w.numel() > 0;
    const int64_t rows = x.numel() / n, period = has_w ? w.numel() / n : 1;
    auto y = torch::empty(x.sizes(), x.options());
    auto r = torch::empty({rows}, x.options());
    RECORD_FUNCTION("keel::row_norm", std::vector<c10::IValue>());  // one kernel for train/op_counter.h
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "keel_row_norm_forward", [&] {
      row_norm_forward<scalar_t>(x.data_ptr<scalar_t>(), RowOffsets(x), has_w ? w.data_ptr<scalar_t>() : nullptr,
                                 y.data_ptr<scalar_t>(), r.data_ptr<scalar_t>(), rows, n, period, eps, l2);
    });
    ctx->save_for_backward({x, w, r});
    ctx->saved_data["n"] = n;
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["l2"] = l2;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1], &r = saved[2];
    const int64_t n = ctx->saved_data["n"].toInt();
    const double eps = ctx->saved_data["eps"].toDouble();
    const bool l2 = ctx->saved_data["l2"].toBool();
    auto dy = grads[0].contiguous();
    const bool has_w = w.numel() > 0;
    const int64_t rows = x.numel() / n, period = has_w ? w.numel() / n : 1;
    auto dx = torch::empty(x.sizes(), x.options());
    torch::Tensor dw = has_w ? torch::empty_like(w) : torch::Tensor();
    RECORD_FUNCTION("keel::row_norm_backward", std::vector<c10::IValue>());
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "keel_row_norm_backward", [&] {
      row_norm_backward<scalar_t>(x.data_ptr<scalar_t>(), RowOffsets(x), has_w ? w.data_ptr<scalar_t>() : nullptr,
                                  r.data_ptr<scalar_t>(), dy.data_ptr<scalar_t>(), dx.data_ptr<scalar_t>(),
                                  has_w ? dw.data_ptr<scalar_t>() : nullptr, rows, n, period, eps, l2);
    });
    return {dx, dw, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// ---------------------------------------------------------------- RoPE

// y[j] = x[j] c[j] - x[j+h] s[j] (j < h), x[j] c[j] + x[j-h] s[j] (j >= h):
// x * cos + cat(-x2, x1) * sin with the composite's rounding. The backward
// (transpose) is dx[j] = dy[j] c[j] + dy[j+h] s[j+h] (j < h),
// dy[j] c[j] - dy[j-h] s[j-h] (j >= h).
template <typename T>
void rope_kernel(const T* x, const RowOffsets& x_rows, const T* cos, const T* sin, T* y, int64_t rows,
                 int64_t T_len, int64_t heads, int64_t d, bool backward) {
  const int64_t h = d / 2;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, d));
  keel::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t t = (i / heads) % T_len;
      const T* __restrict xi = x + x_rows(i);
      const T* __restrict c = cos + t * d;
      const T* __restrict s = sin + t * d;
      T* __restrict yi = y + i * d;
      if (!backward) {
        for (int64_t j = 0; j < h; ++j) yi[j] = xi[j] * c[j] - xi[j + h] * s[j];
        for (int64_t j = h; j < d; ++j) yi[j] = xi[j] * c[j] + xi[j - h] * s[j];
      } else {
        for (int64_t j = 0; j < h; ++j) yi[j] = xi[j] * c[j] + xi[j + h] * s[j + h];
        for (int64_t j = h; j < d; ++j) yi[j] = xi[j] * c[j] - xi[j - h] * s[j - h];
      }
    }
  });
}

torch::Tensor run_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, bool backward) {
  auto y = torch::empty(x.sizes(), x.options());
  const int64_t T_len = x.size(1), heads = x.size(2), d = x.size(3);
  RECORD_FUNCTION(backward ? "keel::rope_backward" : "keel::rope", std::vector<c10::IValue>());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "keel_rope", [&] {
    rope_kernel<scalar_t>(x.data_ptr<scalar_t>(), RowOffsets(x), cos.data_ptr<scalar_t>(), sin.data_ptr<scalar_t>(),
                          y.data_ptr<scalar_t>(), x.numel() / d, T_len, heads, d, backward);
  });
  return y;
}

struct RopeFn : public torch::autograd::Function<RopeFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return run_rope(rows_readable(x), cos, sin, false);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    return {run_rope(grads[0].contiguous(), saved[0], saved[1], true), torch::Tensor(), torch::Tensor()};
  }
};

// ---------------------------------------------------------------- linear

// oneDNN's fp32 matmul through the operator the PyTorch CPU inductor uses;
// null when this LibTorch lacks it.
const c10::OperatorHandle* onednn_linear_op() {
  static const c10::OperatorHandle* op = []() -> const c10::OperatorHandle* {
    if (composite_requested() || !at::hasMKLDNN()) return nullptr;
    auto handle = c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""});
    if (!handle) return nullptr;
    return new c10::OperatorHandle(*handle);
  }();
  return op;
}

// x [..., in] (any strides), w [out, in] (any strides) -> x w^T [..., out].
torch::Tensor onednn_matmul_t(const torch::Tensor& x, const torch::Tensor& w) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  std::vector<c10::IValue> stack{x, w, c10::IValue(), std::string("none"), c10::List<std::optional<at::Scalar>>(),
                                 c10::IValue()};
  onednn_linear_op()->callBoxed(&stack);
  return stack[0].toTensor();
}

// dx = dy w ([M, out] x [out, in]); dw = dy^T x ([out, M] x [M, in]); transposes are views,
// which oneDNN's operator copies and at::mm takes as they lie.
variable_list onednn_linear_backward(AutogradContext* ctx, const torch::Tensor& grad) {
  auto saved = ctx->get_saved_variables();
  const auto &x = saved[0], &w = saved[1];
  const int64_t in = w.size(1), out = w.size(0);
  auto dy = grad.reshape({-1, out});
  torch::Tensor dx, dw;
  if (ctx->needs_input_grad(0)) dx = onednn_matmul_t(dy, w.t()).view(x.sizes());
  if (ctx->needs_input_grad(1))
    dw = onednn_weight_grad_enabled() ? onednn_matmul_t(dy.t(), x.reshape({-1, in}).t())
                                      : dy.t().mm(x.reshape({-1, in}));
  return {dx, dw};
}

struct OneDnnLinearFn : public torch::autograd::Function<OneDnnLinearFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w) {
    ctx->save_for_backward({x, w});
    return onednn_matmul_t(x, w);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return onednn_linear_backward(ctx, grads[0]);
  }
};

// Selective checkpointing's recompute (activation_checkpoint.h): x w^T as
// the forward computed it, handed back without multiplying again, with the
// backward of OneDnnLinearFn, so the gradients are the same bits.
struct ReplayedOneDnnLinearFn : public torch::autograd::Function<ReplayedOneDnnLinearFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& y) {
    ctx->save_for_backward({x, w});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto d = onednn_linear_backward(ctx, grads[0]);
    return {d[0], d[1], torch::Tensor()};
  }
};

// The same for at::linear's path (CUDA, autocast, the composite CPU path):
// y = x w^T + b as the forward computed it, in the compute dtype; backward
// forms at::linear's derivative in that dtype (under autocast: x and w cast
// to it, as autocast cast them) and returns each gradient in its input's
// dtype: the matmuls of ATen's derivative of linear. On the CPU the
// gradients are a plain backward's bit for bit (tests/model/
// test_activation_checkpoint.cpp, also with KEEL_CPU_KERNELS=composite);
// cuBLAS may pick other kernels for them, so on CUDA they may differ in
// the last bits.
struct ReplayedAtenLinearFn : public torch::autograd::Function<ReplayedAtenLinearFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& b, const torch::Tensor& y) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["has_bias"] = b.defined() && b.numel() > 0;
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(b.defined() ? b.scalar_type() : w.scalar_type());
    ctx->saved_data["dtype"] = static_cast<int64_t>(y.scalar_type());
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1];
    const auto cdt = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const int64_t in = w.size(1), out = w.size(0);
    auto dy = grads[0].to(cdt);
    auto dy2 = dy.reshape({-1, out});
    torch::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) dx = at::matmul(dy, w.to(cdt)).to(x.scalar_type());
    if (ctx->needs_input_grad(1)) dw = dy2.t().mm(x.to(cdt).reshape({-1, in})).to(w.scalar_type());
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2))
      db = dy2.sum(0).to(static_cast<torch::ScalarType>(ctx->saved_data["bias_dtype"].toInt()));
    return {dx, dw, db, torch::Tensor()};
  }
};

}  // namespace

bool fused_cpu_kernels_enabled() { return fused_kernels_enabled(); }

namespace {
int onednn_linear_override = -1;  // -1: the default; 0 ATen; 1 oneDNN
}  // namespace

// An environment variable naming the CPU path: "aten" or "onednn", else `fallback`.
static bool onednn_requested(const char* name, bool fallback) {
  const char* env = std::getenv(name);
  if (env && std::strcmp(env, "aten") == 0) return false;
  if (env && std::strcmp(env, "onednn") == 0) return true;
  return fallback;
}

bool onednn_linear_by_default() {
  static const bool on = onednn_requested("KEEL_CPU_LINEAR", cpu_vendor() != "GenuineIntel");
  return on;
}
void set_onednn_linear(bool on) { onednn_linear_override = on ? 1 : 0; }
void reset_onednn_linear() { onednn_linear_override = -1; }

namespace {
int onednn_weight_grad_override = -1;  // -1: the default; 0 at::mm; 1 oneDNN
}  // namespace

bool onednn_weight_grad_by_default() {
  static const bool on = onednn_requested("KEEL_CPU_LINEAR_DW", false);
  return on;
}
void set_onednn_weight_grad(bool on) { onednn_weight_grad_override = on ? 1 : 0; }
void reset_onednn_weight_grad() { onednn_weight_grad_override = -1; }
bool onednn_weight_grad_enabled() {
  return onednn_weight_grad_override >= 0 ? onednn_weight_grad_override == 1 : onednn_weight_grad_by_default();
}

bool onednn_linear_enabled() {
  if (onednn_linear_op() == nullptr || composite_only_depth != 0) return false;
  return onednn_linear_override >= 0 ? onednn_linear_override == 1 : onednn_linear_by_default();
}

CompositeOnly::CompositeOnly() { ++composite_only_depth; }
CompositeOnly::~CompositeOnly() { --composite_only_depth; }
bool composite_only_active() { return composite_only_depth != 0; }

namespace {
int bf16_gemm_override = -1;  // -1: the default; 0 native; 1 emulated

bool cpu_has_bf16_hardware() {
  static const bool has = [] {
    const std::string isa = " " + cpu_isa() + " ";  // util/host.h: the flags keel's kernels care about
    return isa.find(" avx512_bf16 ") != std::string::npos || isa.find(" amx_bf16 ") != std::string::npos;
  }();
  return has;
}

bool bf16_cpu(const torch::Tensor& t) { return t.device().is_cpu() && t.scalar_type() == torch::kBFloat16; }
}  // namespace

bool cpu_bf16_gemm_emulated() {
  if (bf16_gemm_override >= 0) return bf16_gemm_override == 1;
  static const bool on = [] {
    const char* v = std::getenv("KEEL_CPU_BF16_GEMM");
    if (v && std::string(v) == "native") return false;
    if (v && std::string(v) == "emulated") return true;
    return !cpu_has_bf16_hardware();
  }();
  return on;
}
void set_cpu_bf16_gemm_emulated(bool on) { bf16_gemm_override = on ? 1 : 0; }
void reset_cpu_bf16_gemm_emulated() { bf16_gemm_override = -1; }

namespace {
// Whether a GEMM of these CPU operands would run in bf16 (they are bf16, or
// CPU autocast casts them to it) and should be emulated.
bool emulate_bf16_gemm(const torch::Tensor& a, const torch::Tensor& b) {
  if (!a.device().is_cpu() || !cpu_bf16_gemm_emulated()) return false;
  if (bf16_cpu(a) && bf16_cpu(b)) return true;
  return at::autocast::is_autocast_enabled(at::kCPU) && at::autocast::get_autocast_dtype(at::kCPU) == torch::kBFloat16 &&
         a.is_floating_point() && b.is_floating_point();
}
torch::Tensor round_bf16(const torch::Tensor& t) { return t.to(torch::kBFloat16).to(torch::kFloat32); }
}  // namespace

torch::Tensor matmul_bf16(const torch::Tensor& a, const torch::Tensor& b) {
  if (!emulate_bf16_gemm(a, b)) return torch::matmul(a, b);
  AutocastOff off(c10::DeviceType::CPU);
  return torch::matmul(round_bf16(a), round_bf16(b)).to(torch::kBFloat16);
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  // CPU bf16 autocast, or bf16 operands, without bf16 hardware: an fp32 GEMM
  // of the rounded operands, its output rounded (cpu_bf16_gemm_emulated).
  // Autograd goes through the casts, so the gradients are rounded as
  // autocast's own casts would round them.
  if (emulate_bf16_gemm(x, w)) {
    AutocastOff off(c10::DeviceType::CPU);
    return linear(round_bf16(x), round_bf16(w), b.defined() ? round_bf16(b) : b).to(torch::kBFloat16);
  }
  const bool onednn = x.device().is_cpu() && w.device().is_cpu() && x.scalar_type() == torch::kFloat32 &&
                      w.scalar_type() == torch::kFloat32 && x.dim() >= 2 && w.dim() == 2 && x.numel() > 0 &&
                      x.layout() == torch::kStrided && onednn_linear_enabled() &&
                      // under CPU autocast at::linear is what gets cast to bf16
                      !at::autocast::is_autocast_enabled(at::kCPU);
  if (auto* cache = active_linear_cache()) {  // selective checkpointing: keep, or hand back, the output
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = w.size(0);
    if (cache->replaying) {
      auto y = cache->take(sizes);
      if (!onednn) return ReplayedAtenLinearFn::apply(x, w, b.defined() ? b : torch::empty({0}, w.options()), y);
      y = ReplayedOneDnnLinearFn::apply(x, w, y);
      return b.defined() ? y + b : y;
    }
    auto y = onednn ? onednn_matmul_t(x, w) : torch::nn::functional::linear(x, w, b);  // no graph: a checkpoint's forward
    cache->outputs.push_back(y);
    return onednn && b.defined() ? y + b : y;
  }
  if (!onednn) return torch::nn::functional::linear(x, w, b);
  auto y = OneDnnLinearFn::apply(x, w);
  return b.defined() ? y + b : y;
}

torch::Tensor fused_cpu_row_norm(const torch::Tensor& x, const torch::Tensor& weight, int64_t dim, double eps,
                                 bool l2) {
  if (!cpu_float_or_double(x) || dim <= 0 || x.dim() < 1 || x.size(-1) != dim || x.numel() == 0) return {};
  if (weight.defined()) {
    // The gain must cover x's trailing dimensions exactly, in x's dtype.
    if (!cpu_float_or_double(weight) || weight.scalar_type() != x.scalar_type() || weight.dim() > x.dim())
      return {};
    for (int64_t k = 1; k <= weight.dim(); ++k)
      if (weight.size(-k) != x.size(-k)) return {};
  }
  return RowNormFn::apply(x, weight.defined() ? weight : torch::empty({0}, x.options()), dim, eps, l2);
}

torch::Tensor fused_cpu_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  if (!cpu_float_or_double(x) || x.dim() != 4 || x.size(-1) % 2 != 0 || x.numel() == 0) return {};
  const int64_t T = x.size(1), d = x.size(3);
  if (!cos.defined() || !sin.defined() || cos.dim() != 2 || cos.size(0) < T || cos.size(1) != d ||
      sin.sizes() != cos.sizes() || !cos.device().is_cpu() || !sin.device().is_cpu())
    return {};
  auto c = cos.narrow(0, 0, T).to(x.scalar_type()).contiguous();
  auto s = sin.narrow(0, 0, T).to(x.scalar_type()).contiguous();
  return RopeFn::apply(x, c, s);
}

}  // namespace keel
