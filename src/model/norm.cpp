#include "model/norm.h"

#include <stdexcept>

#include "model/fused_ops.h"

namespace keel {

NormImpl::NormImpl(NormKind kind_, int64_t dim_, bool gain, bool with_bias, double eps_,
                   std::vector<int64_t> param_shape, bool unit_offset_)
    : kind(kind_), dim(dim_), eps(eps_), unit_offset(unit_offset_) {
  if (param_shape.empty()) param_shape = {dim};
  // Values are set by init_weights(); construction only allocates.
  if (gain && kind != NormKind::none) weight = register_parameter("weight", torch::empty(param_shape));
  if (with_bias && kind == NormKind::layernorm)
    bias = register_parameter("bias", torch::empty(param_shape));
}

torch::Tensor rms_normalize(const torch::Tensor& x, double eps) {
  return at::rms_norm(x, {x.size(-1)}, c10::nullopt, eps);
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  // Gemma's form stores w and multiplies by (1 + w): the same function as a
  // plain gain of 1 + w, but weight decay and init act on w (init 0).
  torch::Tensor weight = unit_offset && this->weight.defined() ? this->weight + 1.0 : this->weight;
  // A bf16 input (a QK-Norm under autocast, or the reordered and sandwich
  // layouts' norm of a bf16 sublayer output) with fp32 gains: at::rms_norm
  // then falls back to its multi-pass composite with a warning (CUDA's fused
  // kernel wants one dtype), and a per-head gain would promote the output to
  // fp32. Take the gain to the input's dtype (a differentiable cast: its
  // gradient still reaches the fp32 master weight). LayerNorm needs none:
  // autocast runs it in fp32, gains included.
  const bool reduced = x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kHalf;
  if (reduced && kind != NormKind::layernorm && weight.defined() && weight.scalar_type() != x.scalar_type())
    weight = weight.to(x.scalar_type());
  // A gain of shape [dim] can go into the fused kernels; a per-head gain
  // ([heads, dim]) is applied afterwards by broadcasting.
  const bool fused_affine = weight.defined() && weight.dim() == 1;
  torch::Tensor y;
  switch (kind) {
    case NormKind::none:
      return x;
    case NormKind::rms:
      // On the CPU at::rms_norm is a composite of several passes: use the fused
      // kernel (src/model/fused_ops.h), which also takes per-head gains.
      if (auto fused = fused_cpu_row_norm(x, weight, dim, eps, /*l2=*/false); fused.defined()) return fused;
      y = at::rms_norm(x, {dim}, fused_affine ? c10::optional<at::Tensor>(weight) : c10::nullopt, eps);
      break;
    case NormKind::layernorm: {
      const bool fused_bias = bias.defined() && bias.dim() == 1;
      y = at::layer_norm(x, {dim}, fused_affine ? c10::optional<at::Tensor>(weight) : c10::nullopt,
                         fused_bias ? c10::optional<at::Tensor>(bias) : c10::nullopt, eps);
      if (bias.defined() && !fused_bias) {
        y = weight.defined() && !fused_affine ? y * weight + bias : y + bias;
        return y;
      }
      break;
    }
    case NormKind::l2: {
      if (auto fused = fused_cpu_row_norm(x, weight, dim, eps, /*l2=*/true); fused.defined()) return fused;
      // x / max(||x||, eps): unit vectors, so a dot product is a cosine. A bf16
      // or fp16 x gets its norm and quotient in fp32, rounded once to its own
      // dtype: CUDA autocast takes a vector norm in fp32, and the bf16 / fp32
      // quotient would promote to fp32; a norm in bf16 would round twice.
      const auto acc = reduced ? c10::optional<at::ScalarType>(at::kFloat) : c10::nullopt;
      const auto n = at::linalg_vector_norm(x, 2, at::IntArrayRef{-1}, /*keepdim=*/true, acc).clamp_min(eps);
      y = reduced ? (x / n).to(x.scalar_type()) : x / n;
      if (fused_affine) y = y * weight;
      break;
    }
  }
  if (weight.defined() && !fused_affine) y = y * weight;
  return y;
}

}  // namespace keel
