#include "train/evaluator.h"

#include "model/chunked_loss.h"

namespace keel {

Evaluator::Evaluator(const Config& cfg, const DataManifest& data, const BatchGeometry& g, Dist& dist,
                     const ComputeSetup& compute)
    : cfg_(cfg), dist_(dist), compute_(compute), rows_(g.val_rows) {
  enabled_ = data.val.tokens > g.seq_len;
  if (!enabled_) return;
  const uint64_t seed = static_cast<uint64_t>(cfg.run.seed);
  // Split over the ranks when the batch divides evenly, else all on rank 0:
  // either way the same windows as a single process.
  if (rows_ % dist.world() == 0)
    loader_ = std::make_unique<BatchLoader>(cfg.data.dir, "val", g.seq_len, rows_, dist.rank(), dist.world(), seed, 0,
                                            cfg.data.verify);
  else if (dist.rank() == 0)
    loader_ = std::make_unique<BatchLoader>(cfg.data.dir, "val", g.seq_len, rows_, 0, 1, seed, 0, cfg.data.verify);
}

double Evaluator::evaluate(Transformer& model) {
  torch::NoGradGuard no_grad;
  auto total = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(compute_.device));
  for (int64_t i = 0; loader_ && i < cfg_.train.eval_batches; ++i) {
    Batch b = loader_->val_batch(i);
    AutocastScope autocast(compute_.bf16_autocast, compute_.device.type());
    auto ce = model_loss(*model, b.inputs.to(compute_.device), b.targets.to(compute_.device), 0.0,
                         cfg_.train.loss_chunk_tokens).ce;
    total += ce.to(torch::kFloat64) * static_cast<double>(b.inputs.size(0));
  }
  dist_.all_reduce_sum(total, "the validation all-reduce");
  last_ = total.item<double>() / static_cast<double>(rows_ * cfg_.train.eval_batches);  // sync point
  best_ = std::min(best_, last_);
  return last_;
}

void Evaluator::save_state(nlohmann::json& extra) const {
  extra["best_val_loss"] = std::isfinite(best_) ? nlohmann::json(best_) : nlohmann::json();
  // The summary of a run resumed at its last step reports it (issue 20, defect 11).
  extra["last_val_loss"] = std::isfinite(last_) ? nlohmann::json(last_) : nlohmann::json();
}

void Evaluator::load_state(const nlohmann::json& extra) {
  if (extra.contains("best_val_loss") && extra["best_val_loss"].is_number()) best_ = extra["best_val_loss"].get<double>();
  if (extra.contains("last_val_loss") && extra["last_val_loss"].is_number()) last_ = extra["last_val_loss"].get<double>();
}

}  // namespace keel
