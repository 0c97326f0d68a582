// Intra-document attention (data.document_mask; docs/papers.md#document-masking).
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
#include <memory>
#include <utility>

namespace keel {

// What the model does at document boundaries (TransformerImpl::set_documents).
struct DocumentMasking {
  int64_t eos_id = -1;           // < 0: off (every token attends to the whole window before it)
  bool reset_positions = true;   // RoPE positions restart at each document's EOS
  bool enabled() const { return eos_id >= 0; }
};

struct DocumentLayout {
  torch::Tensor segments;   // int64 [B, T]: document index within the row, non-decreasing
  torch::Tensor positions;  // int64 [B, T]: position within the document; undefined without reset

  // Made on first use and shared by every layer of one forward (and by the
  // copies activation checkpointing keeps), so a device-to-host copy happens
  // at most once per forward, and only on a path that needs it:
  //   segments_host  `segments` on the CPU: the blockwise path plans its
  //                  blocks there, the varlen path its offsets (a D2H copy on CUDA)
  //   varlen         cumulative document lengths over the flattened batch
  //                  (int32, on segments' device) and the longest document
  //   mask           document_attention_mask(segments), for SDPA's mask path
  const torch::Tensor& segments_host() const;
  std::pair<torch::Tensor, int64_t> varlen() const;
  const torch::Tensor& mask() const;

 private:
  struct Derived {
    torch::Tensor segments_host, cu_seqlens, mask;
    int64_t longest = 0;
  };
  std::shared_ptr<Derived> derived_ = std::make_shared<Derived>();
};

// How many times a DocumentLayout made its host copy of the segments, since
// the process started: the CPU tests count them per forward (one at most).
int64_t document_host_copies();

// The layout of idx [B, T]: segments[b, t] counts the EOS tokens in idx[b, 0..t]
// (an EOS starts a document); positions[b, t] = t - the last EOS at or before t
// (t itself before the first EOS).
DocumentLayout document_layout(const torch::Tensor& idx, const DocumentMasking& masking);

// True where query t may attend key s: s <= t and the same document.
// Bool [B, 1, T, T], the mask SDPA and the explicit reference take.
torch::Tensor document_attention_mask(const torch::Tensor& segments);

}  // namespace keel
