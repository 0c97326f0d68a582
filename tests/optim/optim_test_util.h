// What the optimizer tests share: a two-layer model small enough to step by
// hand, its parameters by name, and seeded gradients.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "config/config.h"
#include "model/transformer.h"
#include "optim/optimizer.h"

namespace keel_test {

inline keel::ModelConfig tiny_optim_model() {
  keel::ModelConfig m;
  m.vocab_size = 50;
  m.pad_vocab_multiple = 64;
  m.max_seq_len = 8;
  m.d_model = 16;
  m.n_layers = 2;
  m.n_heads = 2;
  m.n_kv_heads = 1;
  m.qk_norm.type = keel::NormKind::rms;
  return m;
}

inline std::vector<keel::NamedParam> named(keel::Transformer& model) {
  std::vector<keel::NamedParam> out;
  for (auto& p : model->named_parameters(true)) out.push_back({p.key(), p.value()});
  return out;
}

// Every parameter's gradient drawn from N(0, 1) under `seed`.
inline void set_grads(std::vector<keel::NamedParam>& ps, int64_t seed) {
  torch::manual_seed(seed);
  for (auto& p : ps) p.param.mutable_grad() = torch::randn_like(p.param);
}

}  // namespace keel_test
