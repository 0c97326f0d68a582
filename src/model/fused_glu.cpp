// The MLP's activations on the CPU in one pass each way (fused_ops.h).
// fused_cpu_glu: the composite runs silu (or tanh-GELU) and a multiply
// forward, and three passes backward (dh * u, the activation's backward,
// dh * act(g)), each a full read and write of [tokens, ffn_dim] tensors.
// fused_cpu_gelu: ATen's erf-GELU backward computes two exponentials per
// element where one serves (erf's and the density's are both e^(-x^2/2)).
#include <ATen/record_function.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "model/cpu_parallel.h"
#include "model/fast_exp.h"
#include "model/simd_dispatch.h"
#include "model/fused_ops.h"
#include "model/fused_xent.h"

namespace keel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr float kGeluK0 = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluK1 = 0.044715f;

// act(g) and act'(g). silu: g s, s + g s (1 - s) with s = sigmoid(g).
// tanh-GELU: 0.5 g (1 + t), 0.5 (1 + t) + 0.5 g (1 - t^2) k0 (1 + 3 k1 g^2)
// with t = tanh(k0 (g + k1 g^3)).
template <bool kSilu>
inline float act(float g) {
  if constexpr (kSilu) return g * sigmoid_poly(g);
  return 0.5f * g * (1.0f + tanh_poly(kGeluK0 * (g + kGeluK1 * g * g * g)));
}
template <bool kSilu>
inline float act_grad(float g) {
  if constexpr (kSilu) {
    const float s = sigmoid_poly(g);
    return s + g * s * (1.0f - s);
  }
  const float t = tanh_poly(kGeluK0 * (g + kGeluK1 * g * g * g));
  return 0.5f * (1.0f + t) + 0.5f * g * (1.0f - t * t) * kGeluK0 * (1.0f + 3.0f * kGeluK1 * g * g);
}

// One activation per loop, so each vectorises (a run-time switch inside the loop kept it scalar).
template <bool kSilu>
inline void forward_row(const float* __restrict g, const float* __restrict u, float* __restrict h, int64_t n) {
  for (int64_t j = 0; j < n; ++j) h[j] = act<kSilu>(g[j]) * u[j];
}
template <bool kSilu>
inline void backward_row(const float* __restrict g, const float* __restrict u, const float* __restrict dh,
                         float* __restrict dg, float* __restrict du, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    dg[j] = dh[j] * u[j] * act_grad<kSilu>(g[j]);
    du[j] = dh[j] * act<kSilu>(g[j]);
  }
}

KEEL_SIMD_KERNEL(void, glu_forward_row,
                 (const float* __restrict g, const float* __restrict u, float* __restrict h, int64_t n, bool silu),
                 (g, u, h, n, silu)) {
  silu ? forward_row<true>(g, u, h, n) : forward_row<false>(g, u, h, n);
}

KEEL_SIMD_KERNEL(void, glu_backward_row,
                 (const float* __restrict g, const float* __restrict u, const float* __restrict dh,
                  float* __restrict dg, float* __restrict du, int64_t n, bool silu),
                 (g, u, dh, dg, du, n, silu)) {
  silu ? backward_row<true>(g, u, dh, dg, du, n) : backward_row<false>(g, u, dh, dg, du, n);
}

// Rows of [rows, n] views whose last dimension is dense (the linears' outputs are contiguous).
torch::Tensor rows_of(const torch::Tensor& t) { return t.contiguous().view({-1, t.size(-1)}); }

struct GluFn : public torch::autograd::Function<GluFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& g_in, const torch::Tensor& u_in, bool silu) {
    RECORD_FUNCTION("keel::glu", std::vector<c10::IValue>());  // one kernel for train/op_counter.h
    auto g = rows_of(g_in), u = rows_of(u_in);
    auto h = torch::empty_like(g);
    const int64_t n = g.size(1);
    const float *gp = g.data_ptr<float>(), *up = u.data_ptr<float>();
    float* hp = h.data_ptr<float>();
    keel::parallel_for(0, g.size(0), 16, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) glu_forward_row(gp + r * n, up + r * n, hp + r * n, n, silu);
    });
    ctx->save_for_backward({g, u});
    ctx->saved_data["silu"] = silu;
    return h.view(g_in.sizes());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("keel::glu_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const auto& g = saved[0];
    const auto& u = saved[1];
    const bool silu = ctx->saved_data["silu"].toBool();
    auto dh = rows_of(grads[0]);
    auto dg = torch::empty_like(g), du = torch::empty_like(u);
    const int64_t n = g.size(1);
    const float *gp = g.data_ptr<float>(), *up = u.data_ptr<float>(), *dhp = dh.data_ptr<float>();
    float *dgp = dg.data_ptr<float>(), *dup = du.data_ptr<float>();
    keel::parallel_for(0, g.size(0), 16, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        glu_backward_row(gp + r * n, up + r * n, dhp + r * n, dgp + r * n, dup + r * n, n, silu);
    });
    const auto sizes = grads[0].sizes();
    return {dg.view(sizes), du.view(sizes), torch::Tensor()};
  }
};

// Φ(x), the standard normal CDF, by Abramowitz and Stegun's 7.1.26 for
// erfc (absolute error <= 1.5e-7), the approximation ATen's vectorised erf
// uses, so the kernel and the composite round alike. Also sets *gauss =
// e^(-x^2/2), which the backward's density reuses. Φ is formed from erfc
// directly on either side of 0, not as 0.5 (1 + erf), which would cancel to
// nothing in the left tail.
inline float normal_cdf(float x, float* gauss) {
  constexpr float kSqrtHalf = 0.70710678118654752f;
  const float a = std::fabs(x) * kSqrtHalf;
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  const float poly = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t;
  const float e = exp_poly(-0.5f * x * x);
  *gauss = e;
  const float half_erfc = 0.5f * poly * e;  // 0.5 erfc(|x| / sqrt 2) = Φ(-|x|)
  return x < 0.0f ? half_erfc : 1.0f - half_erfc;
}

// GELU(x) = x Φ(x); its derivative Φ(x) + x φ(x), φ(x) = e^(-x^2/2) / sqrt(2 pi).
KEEL_SIMD_KERNEL(void, gelu_forward_row, (const float* __restrict x, float* __restrict y, int64_t n), (x, y, n)) {
  for (int64_t j = 0; j < n; ++j) {
    float e;
    y[j] = x[j] * normal_cdf(x[j], &e);
  }
}
KEEL_SIMD_KERNEL(void, gelu_backward_row,
                 (const float* __restrict x, const float* __restrict dy, float* __restrict dx, int64_t n),
                 (x, dy, dx, n)) {
  constexpr float kInvSqrt2Pi = 0.39894228040143268f;
  for (int64_t j = 0; j < n; ++j) {
    float e;
    const float cdf = normal_cdf(x[j], &e);
    dx[j] = dy[j] * (cdf + x[j] * kInvSqrt2Pi * e);
  }
}

struct GeluFn : public torch::autograd::Function<GeluFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in) {
    RECORD_FUNCTION("keel::gelu", std::vector<c10::IValue>());
    auto x = rows_of(x_in);
    auto y = torch::empty_like(x);
    const int64_t n = x.size(1);
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    keel::parallel_for(0, x.size(0), 16, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) gelu_forward_row(xp + r * n, yp + r * n, n);
    });
    ctx->save_for_backward({x});
    return y.view(x_in.sizes());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("keel::gelu_backward", std::vector<c10::IValue>());
    const auto x = ctx->get_saved_variables()[0];
    auto dy = rows_of(grads[0]);
    auto dx = torch::empty_like(x);
    const int64_t n = x.size(1);
    const float *xp = x.data_ptr<float>(), *dyp = dy.data_ptr<float>();
    float* dxp = dx.data_ptr<float>();
    keel::parallel_for(0, x.size(0), 16, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) gelu_backward_row(xp + r * n, dyp + r * n, dxp + r * n, n);
    });
    return {dx.view(grads[0].sizes())};
  }
};

// Whether the environment variable `name` is 0, which turns one kernel alone
// off (to measure what it buys): KEEL_CPU_FUSED_GLU, KEEL_CPU_FUSED_GELU.
bool switched_off(const char* name) {
  const char* env = std::getenv(name);
  return env && std::string(env) == "0";
}

bool glu_kernel_enabled() {
  static const bool on = !switched_off("KEEL_CPU_FUSED_GLU");
  return on;
}

bool gelu_kernel_enabled() {
  static const bool on = !switched_off("KEEL_CPU_FUSED_GELU");
  return on;
}

}  // namespace

bool fused_cpu_glu_enabled() { return fused_cpu_kernels_enabled() && glu_kernel_enabled(); }

torch::Tensor fused_cpu_gelu(const torch::Tensor& x) {
  if (!fused_cpu_kernels_enabled() || !gelu_kernel_enabled() || !x.defined() || !x.device().is_cpu() ||
      x.scalar_type() != torch::kFloat32 || x.dim() < 1 || x.numel() == 0)
    return {};
  return GeluFn::apply(x);
}

torch::Tensor fused_cpu_glu(const torch::Tensor& g, const torch::Tensor& u, bool silu) {
  if (!fused_cpu_glu_enabled() || !g.defined() || !u.defined() || !g.device().is_cpu() || !u.device().is_cpu() ||
      g.scalar_type() != torch::kFloat32 || u.scalar_type() != torch::kFloat32 || g.sizes() != u.sizes() ||
      g.dim() < 1 || g.numel() == 0)
    return {};
  return GluFn::apply(g, u, silu);
}

}  // namespace keel
