// Intra-document attention (data.document_mask; docs/reference.md#document-masking).
//
// keel's token stream is documents each followed by EOS. Under the mask an
// EOS opens the document after it, as a BOS token would (GPT-2's
// <|endoftext|> plays both parts): a document is [EOS, its tokens], the EOS
// predicts the document's first token from nothing but itself, and every
// token of the document can attend to it. The last token of a document still
// predicts the EOS that follows (its target), so the loss at the boundary is
// the loss without the mask; only what each position can attend to changes.
//
// The layout is a function of the input ids alone, so training, validation,
// monitoring and sampling all see the same documents without the loader
// carrying anything extra.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace keel {

// What the model does at document boundaries (TransformerImpl::set_documents).
struct DocumentMasking {
  int64_t eos_id = -1;           // < 0: off (every token attends to the whole window before it)
  bool reset_positions = true;   // RoPE positions restart at each document's EOS
  bool enabled() const { return eos_id >= 0; }
};

struct DocumentLayout {
  torch::Tensor segments;       // int64 [B, T]: document index within the row, non-decreasing
  torch::Tensor positions;      // int64 [B, T]: position within the document; undefined without reset
  torch::Tensor segments_host;  // `segments` on the CPU (the blockwise path plans its blocks on the host)
};

// The layout of idx [B, T]: segments[b, t] counts the EOS tokens in idx[b, 0..t]
// (an EOS starts a document); positions[b, t] = t - the last EOS at or before t
// (t itself before the first EOS).
DocumentLayout document_layout(const torch::Tensor& idx, const DocumentMasking& masking);

// True where query t may attend key s: s <= t and the same document.
// Bool [B, 1, T, T], the mask SDPA and the explicit reference take.
torch::Tensor document_attention_mask(const torch::Tensor& segments);

}  // namespace keel
