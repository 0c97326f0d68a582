// `keel replay RUN_DIR --step N --numerics`: did precision cause this spike?
// (torchtitan's numerics diff, per layer). From the run's newest checkpoint
// before N, the same steps run in the run's own precision and in higher ones
// (bf16 autocast -> fp32 and, on the CPU, fp64; fp32 -> fp64), each from the
// same weights, optimizer state and batches, each its own trajectory after.
// At every step the runs are compared in forward order: each block's residual
// stream and branch outputs, the logits, the loss, then each block's
// gradients; the report says where the run's precision first differs from
// the higher one by more than a relative threshold ||a - b|| / ||b||, and how
// the losses go on. Everything goes to RUN_DIR/branches/numerics-<N>/
// (numerics.json, numerics.md); the run itself is never written to. Runs on
// the CPU (fp64 has no other home); a CPU without bf16 hardware computes bf16
// GEMMs exactly as bf16 would (model/fused_ops.h).
#pragma once

#include <cstdint>
#include <string>

namespace keel {

struct NumericsOptions {
  std::string run_dir;
  int64_t step = 0;         // N: the spike's step
  int64_t steps = 2;        // the window runs through N + steps
  int64_t from = -1;        // the checkpoint to start from; -1 = the newest before N
  double threshold = 0.1;   // relative difference that counts as "differs"
  int threads = 0;          // 0 = all cores
};

// Returns 0; throws ConfigError / RunDirError / CheckpointError for bad input (exit 2).
int run_numerics_diff(const NumericsOptions& o);

}  // namespace keel
