#include "model/documents.h"

namespace keel {

DocumentLayout document_layout(const torch::Tensor& idx, const DocumentMasking& masking) {
  TORCH_CHECK(idx.dim() == 2, "document_layout: ids must be [B, T]");
  torch::NoGradGuard no_grad;
  DocumentLayout out;
  const auto is_eos = idx.eq(masking.eos_id);
  out.segments = is_eos.cumsum(1);  // int64
  if (masking.reset_positions) {
    const int64_t T = idx.size(1);
    auto t = torch::arange(T, idx.options().dtype(torch::kInt64)).expand_as(idx);
    // Each position's document start: the last EOS at or before it, else 0.
    auto start = std::get<0>(torch::where(is_eos, t, torch::zeros_like(t)).cummax(1));
    out.positions = t - start;
  }
  out.segments_host = out.segments.device().is_cpu() ? out.segments : out.segments.to(torch::kCPU);
  return out;
}

torch::Tensor document_attention_mask(const torch::Tensor& segments) {
  const int64_t T = segments.size(1);
  auto causal = torch::ones({T, T}, segments.options().dtype(torch::kBool)).tril();
  auto same = segments.unsqueeze(2).eq(segments.unsqueeze(1));  // [B, T, T]
  return same.logical_and_(causal).unsqueeze(1);
}

}  // namespace keel
