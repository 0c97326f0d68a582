#include "train/training_setup.h"

#include "model/init.h"
#include "model/parametrization.h"
#include "optim/zero.h"
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

std::unique_ptr<Optimizer> make_model_optimizer(Transformer& model, const Config& cfg, Dist* dist) {
  std::vector<NamedParam> params;
  for (auto& item : model->named_parameters(true)) params.push_back({item.key(), item.value()});
  TrainConfig t = cfg.train;
  if (cfg.model.parametrization != Parametrization::standard) {
    // µP/CompleteP: per-parameter LR and decay multipliers, CompleteP's ε.
    const auto scalings = param_scalings(cfg.model, cfg.train);
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].lr_mult = scalings.at(i).lr_mult;
      params[i].wd_mult = scalings.at(i).wd_mult;
    }
    t.eps *= forward_scaling(cfg.model).adam_eps_mult;
  }
  const int64_t head_dim = cfg.model.head_dim();
  if (cfg.dist.zero > 0 && dist && dist->world() > 1)
    return std::make_unique<ShardedOptimizer>(std::move(params), *dist, [t, head_dim](std::vector<NamedParam> mine) {
      return make_optimizer(std::move(mine), t, head_dim);
    });
  return make_optimizer(std::move(params), t, head_dim);
}

TrainingParts build_training_parts(const Config& cfg, const ComputeSetup& compute, const BatchGeometry& geometry,
                                   Dist* dist) {
  TrainingParts p;
  p.model = build_model(cfg.model, static_cast<uint64_t>(cfg.run.seed), compute.device);
  if (compute.fp64) p.model->to(torch::kFloat64);  // before the optimizer: its state follows the parameters
  p.model->set_activation_checkpointing(cfg.train.activation_checkpointing, cfg.train.checkpoint_every_n);
  p.model->set_fp32_head(cfg.train.fp32_head);
  p.size = model_size(cfg.model, geometry.seq_len);
  p.optimizer = make_model_optimizer(p.model, cfg, dist);
  p.runner = std::make_unique<StepRunner>(p.model, *p.optimizer, cfg, compute, geometry.micro_batch);
  return p;
}

}  // namespace keel
