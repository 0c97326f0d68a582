// What `keel train` and `keel bench` build alike from a config: how the global
// batch splits over ranks and micro-batches, and the model with its optimizer
// and step runner. One place, so that what bench times is what train runs.
#pragma once

#include <memory>

#include "config/config.h"
#include "model/model_size.h"
#include "model/transformer.h"
#include "train/device.h"
#include "optim/optimizer.h"
#include "train/step_runner.h"

namespace keel {

class Dist;

// A global batch of `global_batch` sequences of `seq_len` tokens, split evenly
// over `world` ranks, each rank's rows in `n_micro` micro-batches.
struct BatchGeometry {
  int64_t seq_len = 0;
  int64_t global_batch = 0;   // sequences per optimizer step, all ranks together
  int64_t rows_per_rank = 0;  // global_batch / world
  int64_t micro_batch = 0;    // sequences per forward/backward
  int64_t n_micro = 0;        // micro-batches per step on each rank
  int64_t val_rows = 0;       // sequences per validation batch, all ranks together
  int64_t tokens_per_step() const { return global_batch * seq_len; }
};

// From train.batch_size (or train.batch_tokens), train.micro_batch_size and
// the world size. Throws ConfigError naming the key when the batch does not
// split evenly.
BatchGeometry batch_geometry(const Config& cfg, int world);

struct TrainingParts {
  ModelSize size;                      // counted on the built model
  Transformer model{nullptr};
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<StepRunner> runner;  // holds a reference to *optimizer
};

// The optimizer train.optimizer names over the model's parameters, with
// model.parametrization's per-parameter LR and decay multipliers and AdamW ε
// (model/parametrization.h).
// With dist.zero 1 and `dist` a group of several ranks, wrapped in ZeRO-1's
// ShardedOptimizer (collective: every rank at once).
std::unique_ptr<Optimizer> make_model_optimizer(Transformer& model, const Config& cfg, Dist* dist = nullptr);

// The model from run.seed on the compute device, its optimizer (train.optimizer),
// and the StepRunner for micro-batches of geometry.micro_batch.
TrainingParts build_training_parts(const Config& cfg, const ComputeSetup& compute, const BatchGeometry& geometry,
                                   Dist* dist = nullptr);

}  // namespace keel
