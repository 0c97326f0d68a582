// Fused CPU kernels, with their own backward, for the elementwise work that
// LibTorch's CPU backend runs as several passes over memory: RMSNorm and the
// L2 norm (at::rms_norm is a pow/mean/rsqrt/mul composite on the CPU, and so
// is its autograd backward) and rotate-half RoPE (narrow, neg, cat, two
// multiplies and an add; the backward adds zero-filled slices). On the bench
// configs these passes cost about as much as the matmuls (README, "Speed").
// The output head's softmax work has its own kernel in fused_xent.h, causal
// attention in cpu_attention.h; their loops run through cpu_parallel.h.
//
// Each function returns an undefined tensor when it does not apply (not a
// CPU tensor, not fp32/fp64, shapes it does not handle); callers then use the
// composite ATen path, which is also what CUDA uses. Results equal the
// composite path up to float rounding (RoPE: bit for bit); the backward is
// deterministic for a given shape, whatever the thread count.
// KEEL_CPU_FUSED=0 turns them off (to measure what they buy);
// KEEL_CPU_KERNELS=composite turns them and the oneDNN linears off, so the CPU
// runs the same ATen composites as CUDA (CI runs the model tests both ways).
#pragma once

#include <torch/torch.h>

#include "model/autocast.h"

namespace keel {

// Normalises each row of the last `dim` elements of x: rms (x * rsqrt(mean(x^2)
// + eps)) or l2 (x / max(||x||, eps)), then multiplies by `weight` (undefined:
// no gain), whose shape must equal x's trailing dimensions ([dim], or
// [heads, dim] for a per-head QK gain).
torch::Tensor fused_cpu_row_norm(const torch::Tensor& x, const torch::Tensor& weight, int64_t dim, double eps,
                                 bool l2);

// x @ w^T + b for every linear layer. On an AMD CPU in fp32 it runs forward
// and both backward matmuls on oneDNN (mkldnn::_linear_pointwise) instead of
// at::linear's BLAS: the MKL build in the PyTorch wheel uses its AVX2 kernels
// on AMD CPUs, oneDNN uses AVX-512 where the CPU has it (about 2x on a Zen 5,
// docs/speed.md). On Intel CPUs MKL runs its AVX-512 kernels and takes
// transposed operands as they are, where oneDNN's operator copies them for
// the weight gradient: at::linear is the faster there (docs/speed.md, "On an
// Intel Xeon"), and the default. Elsewhere it is torch::nn::functional::linear.
// KEEL_CPU_LINEAR=aten|onednn overrides the choice.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b = {});
// Whether linear() uses oneDNN for this CPU fp32 tensor (for tests and bench).
bool onednn_linear_enabled();
// The choice without overrides: KEEL_CPU_LINEAR, else oneDNN unless the CPU is an Intel one.
bool onednn_linear_by_default();
// For tests and the peak measurement: force the choice (where this LibTorch
// has oneDNN); reset() goes back to the default.
void set_onednn_linear(bool on);
void reset_onednn_linear();
// The weight gradient dW = dy^T x of a oneDNN linear: mkldnn::_linear_pointwise
// takes row-major a b^T only, so it copies dy^T and x^T first, where at::mm
// (MKL) reads them as they lie. The copies cost more than oneDNN's faster
// kernel gains: at::mm is the default (scripts/bench/bench_linear.py on a
// Zen 4, docs/speed.md), and the forward and input gradient stay on oneDNN.
// KEEL_CPU_LINEAR_DW=aten|onednn overrides; set/reset as above, for tests.
bool onednn_weight_grad_enabled();
bool onednn_weight_grad_by_default();
void set_onednn_weight_grad(bool on);
void reset_onednn_weight_grad();

// bf16 GEMMs on a CPU without bf16 hardware (AVX2 only, or AVX-512 without
// its BF16 extension): ATen's bf16 matmul takes a slow path there, 12-17x
// an fp32 one on one thread of the Zen 3 VM, so bf16 autocast trained 13x
// slower than fp32 (docs/speed.md, "bf16 on a CPU without bf16 hardware"). The same numbers come from an
// fp32 GEMM of the bf16-rounded operands (exact in fp32) whose output is
// rounded to bf16: only the order of the fp32 sums differs, as between two
// BLAS builds. linear() under CPU bf16 autocast and matmul_bf16() take that
// path when it is on: by default on such CPUs; KEEL_CPU_BF16_GEMM=native keeps
// ATen's bf16 kernels, =emulated forces the fp32 path (for tests).
bool cpu_bf16_gemm_emulated();
// For tests: force the choice (true: emulate, false: native); reset() goes back to the default.
void set_cpu_bf16_gemm_emulated(bool on);
void reset_cpu_bf16_gemm_emulated();
// a @ b for bf16 CPU tensors as a bf16 GEMM gives it (emulated when on); any
// other a, b: torch::matmul.
torch::Tensor matmul_bf16(const torch::Tensor& a, const torch::Tensor& b);


// While one is alive, this thread's calls take the composite ATen path that
// CUDA runs (no fused norm or RoPE kernel, at::linear): tests compare the
// kernels with the production composites through it.
class CompositeOnly {
 public:
  CompositeOnly();
  ~CompositeOnly();
  CompositeOnly(const CompositeOnly&) = delete;
  CompositeOnly& operator=(const CompositeOnly&) = delete;
};
// Whether a CompositeOnly guard is alive on this thread (the CUDA kernels, fused_cuda.h, ask too).
bool composite_only_active();

// The gated MLP's hidden activation, act(g) * u, for CPU fp32 g and u of one
// shape: act = silu (SwiGLU) or GELU with the tanh approximation (GeGLU,
// Gemma's gelu_pytorch_tanh), one pass forward and one backward
// (fused_glu.cpp) where the composite makes two and three. Undefined where it
// does not apply (as above, or KEEL_CPU_FUSED_GLU=0 for this one alone).
torch::Tensor fused_cpu_glu(const torch::Tensor& g, const torch::Tensor& u, bool silu);
// Whether fused_cpu_glu runs for CPU fp32 tensors on this thread now (for the memory plan).
bool fused_cpu_glu_enabled();

// The exact (erf) GELU, x Φ(x), for a CPU fp32 x (the non-gated MLP's
// activation), one pass forward and one backward that computes one
// exponential per element where ATen's backward computes two (fused_glu.cpp).
// Undefined where it does not apply (as above, or KEEL_CPU_FUSED_GELU=0 for
// this one alone).
torch::Tensor fused_cpu_gelu(const torch::Tensor& x);

// Rotate-half RoPE on x [B, T, heads, D] with tables cos, sin [>= T, D] (any
// float dtype; converted to x's): x * cos + rotate_half(x) * sin.
torch::Tensor fused_cpu_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace keel
