#include "model/rope.h"

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
  return {emb.cos().to(device), emb.sin().to(device)};
}

torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& t) {
  // CPU: one fused pass forward and backward (src/model/fused_ops.h), same values.
  if (auto fused = fused_cpu_rope(x, t.cos, t.sin); fused.defined()) return fused;
  const int64_t T = x.size(1), half = x.size(-1) / 2;
  auto cos = t.cos.narrow(0, 0, T).view({1, T, 1, -1}).to(x.scalar_type());
  auto sin = t.sin.narrow(0, 0, T).view({1, T, 1, -1}).to(x.scalar_type());
  auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  auto rotated = torch::cat({-x2, x1}, -1);
  return x * cos + rotated * sin;
}

}  // namespace keel
