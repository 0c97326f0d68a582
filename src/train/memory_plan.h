// What a training run needs in memory per rank, from its config alone
// (`keel plan`): parameters, gradients, optimizer state (replicated or
// sharded by ZeRO-1, dealt exactly as optim/zero.h deals them), and the
// activations one micro-batch keeps for backward under each
// train.activation_checkpointing mode, so that a user can see what fits a
// card before renting it. The activation model counts the tensors keel's
// block saves for backward (docs/data-parallel.md, "Memory"); tests hold it
// to the CPU's measured peak.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"

namespace keel {

struct MemoryPlanOptions {
  int ranks = 1;
  bool cuda = true;  // the device the plan is for (train.device auto: CUDA)
  std::vector<double> memory_gib = {24, 48, 80};
};

struct MemoryPlan {
  int ranks = 1;
  bool cuda = true;
  std::string precision;  // "bf16 autocast", "fp32", "fp64"
  int64_t params = 0, matmul_params = 0, seq_len = 0, micro_batch = 0;
  // Bytes on one rank that do not grow with the micro-batch.
  double weights = 0;          // the trained (master) weights
  double weight_casts = 0;     // bf16 autocast: the cast copies of the matmul weights, alive during a step
  double gradients = 0;        // one gradient per weight (data parallel: the buckets)
  double optimizer_replicated = 0;
  double optimizer_per_rank = 0;  // ZeRO-1's largest shard when dist.zero is 1 and ranks > 1, else replicated
  double ema = 0;                 // train.ema_decay: one copy of the weights on every rank (ZeRO-1 too)
  double static_bytes() const { return weights + weight_casts + gradients + optimizer_per_rank + ema; }
  double bytes_per_param() const { return static_bytes() / static_cast<double>(params); }
  // Bytes per sequence of a micro-batch: what the forward keeps for
  // backward, and what backward holds on top of it at its first block.
  double saved_per_seq = 0, transient_per_seq = 0;
  double mask_per_seq = 0;  // of saved_per_seq: data.document_mask's [T, T] mask (and on CUDA its per-layer bias)
  // The output head's loss (model/chunked_loss.h): the head's gradient,
  // formed in the forward and kept, and a chunk of logits with their
  // log-softmax: min(chunk_tokens, micro-batch tokens) x logit_bytes
  // (chunk_tokens 0: the whole micro-batch at once), freed before backward.
  int64_t chunk_tokens = 0;
  double logit_bytes = 0, head_gradient = 0;
  double logit_chunk(int64_t b) const {
    const int64_t tokens = b * seq_len;
    return static_cast<double>(chunk_tokens > 0 ? std::min(chunk_tokens, tokens) : tokens) * logit_bytes;
  }
  // The peak for a micro-batch of `b` sequences: the end of the forward
  // (the logits chunk) or backward's first block (its working set),
  // whichever is larger, on top of what the forward keeps.
  double peak_bytes(int64_t b) const {
    const double n = static_cast<double>(b);
    return static_bytes() + head_gradient + n * saved_per_seq + std::max(logit_chunk(b), n * transient_per_seq);
  }
  // What a card of `gib` GiB leaves for training: CUDA keeps 1 GiB for its
  // context and kernels' workspaces outside the allocator, and the caching
  // allocator's fragmentation takes about 10% (an assumption until a GPU
  // run measures it: docs/data-parallel.md).
  static double usable_bytes(double gib, bool cuda);
  // The largest micro-batch whose peak fits `gib` GiB (0: not even one sequence).
  int64_t max_micro_batch(double gib) const;
  std::vector<std::string> assumptions;
};

MemoryPlan plan_memory(const Config& cfg, const MemoryPlanOptions& options);
// The plan for a run as it was set up: on its device, in the precision
// setup_compute resolved (bf16 autocast or not), over `ranks` ranks.
MemoryPlan plan_memory_for_run(const Config& cfg, bool cuda, bool bf16_autocast, int ranks);

// The table `keel plan` prints, and its JSON.
std::string format_memory_plan(const MemoryPlan& plan, const Config& cfg, const MemoryPlanOptions& options);
std::string memory_plan_json(const MemoryPlan& plan, const MemoryPlanOptions& options);

}  // namespace keel
