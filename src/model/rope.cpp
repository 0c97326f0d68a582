#include "model/rope.h"

#include "model/fused_cuda.h"
#include "model/fused_ops.h"

namespace keel {

RopeTables make_rope_tables(int64_t seq_len, int64_t head_dim, double theta, torch::Device device) {
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  // inv_freq[i] = theta^(-2i/d), i < d/2 (computed in fp32 as HF does).
  auto inv_freq =
      1.0 / torch::pow(theta, torch::arange(0, head_dim, 2, torch::TensorOptions().dtype(torch::kInt64))
                                  .to(torch::kFloat32) /
                                  static_cast<double>(head_dim));
  auto pos = torch::arange(seq_len, f32);
  auto freqs = torch::outer(pos, inv_freq);      // [T, d/2]
  auto emb = torch::cat({freqs, freqs}, -1);     // [T, d]
  auto sin_half = freqs.sin();
  RopeTables t;
  t.cos = emb.cos().to(device);
  t.sin = emb.sin().to(device);
  t.sin_signed = torch::cat({-sin_half, sin_half}, -1).to(device);
  return t;
}

RopeTables RopeTables::with_dtype(int64_t T, torch::ScalarType dtype) const {
  RopeTables out = *this;
  if (dtype != cos.scalar_type()) {
    out.cos_lowp = cos.narrow(0, 0, T).to(dtype);
    out.sin_signed_lowp = sin_signed.narrow(0, 0, T).to(dtype);
  }
  return out;
}

torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& t, const torch::Tensor& positions) {
  if (positions.defined()) {
    const int64_t B = x.size(0), T = x.size(1);
    TORCH_CHECK(positions.dim() == 2 && positions.size(0) == B && positions.size(1) == T,
                "apply_rope: positions must be [B, T] like x's first two dimensions");
    const auto flat = positions.reshape({-1});
    auto gather = [&](const torch::Tensor& table) {  // shape: [B, T, 1, D], x's dtype
      return table.index_select(0, flat).view({B, T, 1, -1}).to(x.scalar_type());
    };
    return x * gather(t.cos) + x.roll(x.size(-1) / 2, -1) * gather(t.sin_signed);
  }
  // One fused pass forward and backward, same values: CPU (src/model/fused_ops.h),
  // CUDA where switched on (src/model/fused_cuda.h).
  if (auto fused = fused_cpu_rope(x, t.cos, t.sin); fused.defined()) return fused;
  if (auto fused = fused_cuda_rope(x, t.cos, t.sin); fused.defined()) return fused;
  const int64_t T = x.size(1), half = x.size(-1) / 2;
  const bool lowp = t.cos_lowp.defined() && t.cos_lowp.scalar_type() == x.scalar_type() && t.cos_lowp.size(0) >= T;
  const auto& cos_table = lowp ? t.cos_lowp : t.cos;
  const auto& sin_table = lowp ? t.sin_signed_lowp : t.sin_signed;
  auto cos = cos_table.narrow(0, 0, T).view({1, T, 1, -1}).to(x.scalar_type());  // no-op when dtypes match
  auto sin = sin_table.narrow(0, 0, T).view({1, T, 1, -1}).to(x.scalar_type());
  // (-x2) * s == x2 * (-s) exactly, so this equals x * cos + cat(-x2, x1) * sin bit for bit.
  return x * cos + x.roll(half, -1) * sin;
}

}  // namespace keel
