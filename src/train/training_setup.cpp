#include "train/training_setup.h"

#include "model/init.h"
#include "util/error.h"
#include "util/log.h"

namespace keel {

BatchGeometry batch_geometry(const Config& cfg, int world) {
  BatchGeometry g;
  g.seq_len = cfg.seq_len();
  g.global_batch = cfg.train.batch_tokens > 0 ? cfg.train.batch_tokens / g.seq_len : cfg.train.batch_size;
  ConfigErrors e;
  if (g.global_batch % world != 0) {
    e.add(cfg.train.batch_tokens > 0 ? "train.batch_tokens" : "train.batch_size",
          strf("the global batch of %lld sequences does not split evenly over %d ranks",
               static_cast<long long>(g.global_batch), world));
    throw ConfigError(e);
  }
  g.rows_per_rank = g.global_batch / world;
  g.micro_batch = cfg.train.micro_batch_size > 0 ? cfg.train.micro_batch_size : g.rows_per_rank;
  if (g.rows_per_rank % g.micro_batch != 0) {
    e.add("train.micro_batch_size", strf("%lld does not divide the %lld sequences each of the %d rank(s) gets per step",
                                         static_cast<long long>(g.micro_batch),
                                         static_cast<long long>(g.rows_per_rank), world));
    throw ConfigError(e);
  }
  g.n_micro = g.rows_per_rank / g.micro_batch;
  // Validation batches hold micro_batch_size sequences (the global batch when
  // unset), split over the ranks when they divide evenly, else all on rank 0.
  g.val_rows = cfg.train.micro_batch_size > 0 ? cfg.train.micro_batch_size : g.global_batch;
  return g;
}

TrainingParts build_training_parts(const Config& cfg, const ComputeSetup& compute, const BatchGeometry& geometry) {
  TrainingParts p;
  p.model = build_model(cfg.model, static_cast<uint64_t>(cfg.run.seed), compute.device);
  p.size = model_size(cfg.model, geometry.seq_len);
  std::vector<NamedParam> params;
  for (auto& item : p.model->named_parameters(true)) params.push_back({item.key(), item.value()});
  p.optimizer = make_optimizer(params, cfg.train, cfg.model.d_model / cfg.model.n_heads);
  p.runner = std::make_unique<StepRunner>(p.model, *p.optimizer, cfg, compute, geometry.micro_batch);
  return p;
}

}  // namespace keel
