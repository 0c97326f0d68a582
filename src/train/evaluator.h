// Validation loss: train.eval_batches fixed batches of the validation split,
// the same windows whatever the number of ranks. Owns its loader and the
// best loss so far, which it saves in and restores from checkpoints.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <memory>

#include "config/config.h"
#include "data/loader.h"
#include "data/manifest.h"
#include "distributed/process_group.h"
#include "model/transformer.h"
#include "train/device.h"
#include "train/training_setup.h"

namespace keel {

class Evaluator {
 public:
  Evaluator(const Config& cfg, const DataManifest& data, const BatchGeometry& geometry, Dist& dist,
            const ComputeSetup& compute);
  // False when the prepared data has no validation split (data.val_fraction = 0).
  bool enabled() const { return enabled_; }
  // Mean validation loss; every rank evaluates its share and the sums are
  // all-reduced. Updates last() and best().
  double evaluate(Transformer& model);
  double last() const { return last_; }
  double best() const { return best_; }

  void save_state(nlohmann::json& extra) const;
  void load_state(const nlohmann::json& extra);

 private:
  const Config& cfg_;
  Dist& dist_;
  ComputeSetup compute_;
  int64_t rows_ = 0;  // sequences per validation batch, all ranks together
  bool enabled_ = false;
  std::unique_ptr<BatchLoader> loader_;  // null on ranks without a share
  double last_ = NAN, best_ = INFINITY;
};

}  // namespace keel
