#include "model/documents.h"

#include <atomic>

#include "model/attention.h"

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
  return out;
}

namespace {
std::atomic<int64_t> host_copies{0};
}

int64_t document_host_copies() { return host_copies.load(); }

const torch::Tensor& DocumentLayout::segments_host() const {
  if (!derived_->segments_host.defined()) {
    ++host_copies;
    derived_->segments_host = segments.device().is_cpu() ? segments.contiguous() : segments.to(torch::kCPU).contiguous();
  }
  return derived_->segments_host;
}

std::pair<torch::Tensor, int64_t> DocumentLayout::varlen() const {
  if (!derived_->cu_seqlens.defined()) {
    auto [cu, longest] = document_cu_seqlens(segments_host());
    // From pageable host memory: ordered on the stream, and the host does not
    // wait for the kernels before it (it already waited for segments_host).
    derived_->cu_seqlens = cu.to(segments.device());
    derived_->longest = longest;
  }
  return {derived_->cu_seqlens, derived_->longest};
}

const torch::Tensor& DocumentLayout::mask() const {
  if (!derived_->mask.defined()) derived_->mask = document_attention_mask(segments);
  return derived_->mask;
}

torch::Tensor document_attention_mask(const torch::Tensor& segments) {
  const int64_t T = segments.size(1);
  auto causal = torch::ones({T, T}, segments.options().dtype(torch::kBool)).tril();
  auto same = segments.unsqueeze(2).eq(segments.unsqueeze(1));  // [B, T, T]
  return same.logical_and_(causal).unsqueeze(1);
}

}  // namespace keel
