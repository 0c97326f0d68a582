// Validation loss: train.eval_batches fixed batches of the validation split,
// the same windows whatever the number of ranks. Owns its loader and the
// best loss so far, which it saves in and restores from checkpoints. Also
// the held-out sets of eval.sets, each scored the same way (as Paloma
// reports a loss per domain).
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

// Where eval.sets[i] is read from: the entry itself when it is a prepared
// data directory, else (text, JSON Lines or Parquet sources, as data.sources
// takes them) a directory under data.dir/eval_sets/ that prepare_eval_sets
// fills with data.dir's tokenizer, held out whole.
std::string eval_set_directory(const Config& cfg, size_t i);
// The name a set's metrics carry: sets/<name>/loss (its base name).
std::string eval_set_name(const Config& cfg, size_t i);
// Rank 0, before any rank reads them: prepares the sources of eval.sets
// that are not prepared yet (a no-op for those already prepared).
void prepare_eval_sets(const Config& cfg, const DataManifest& data);

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
  // eval.sets: {name: {"loss", "ppl"}} (name: the directory's base name), on every rank.
  nlohmann::json evaluate_sets(Transformer& model);
  const nlohmann::json& last_sets() const { return last_sets_; }
  double best() const { return best_; }
  // The same losses without keeping them (last, best): other weights than
  // the run's, such as its weight EMA.
  double loss(Transformer& model);
  nlohmann::json loss_sets(Transformer& model);

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
  struct HeldOutSet {
    std::string name;
    std::unique_ptr<BatchLoader> loader;  // null on ranks without a share
  };
  std::vector<HeldOutSet> sets_;
  nlohmann::json last_sets_;

  std::unique_ptr<BatchLoader> share(const std::string& dir, const std::string& split, int64_t seq_len) const;
  double mean_loss(Transformer& model, const BatchLoader* loader, const char* what);
};

}  // namespace keel
