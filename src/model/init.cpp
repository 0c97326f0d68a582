#include "model/init.h"

#include <cmath>

#include <map>

#include "model/parametrization.h"
#include "model/sigma_reparam.h"
#include "util/text.h"

namespace keel {

namespace {

// N(0, std), optionally truncated at +-k std by inverse-CDF sampling (the
// method of torch.nn.init.trunc_normal_), drawn from `gen` on the CPU.
void fill_normal(torch::Tensor& t, double std, c10::optional<double> truncate, at::Generator& gen) {
  torch::NoGradGuard no_grad;
  auto cpu = torch::empty(t.sizes(), torch::kFloat32);
  if (!truncate) {
    cpu.normal_(0.0, std, gen);
  } else {
    const double k = *truncate;
    auto cdf = [](double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); };
    const double lo = cdf(-k), hi = cdf(k);
    cpu.uniform_(2 * lo - 1, 2 * hi - 1, gen);
    cpu.erfinv_().mul_(std * std::sqrt(2.0)).clamp_(-k * std, k * std);
  }
  t.copy_(cpu);
}

double initial_temperature(const ModelConfig& cfg) {
  if (cfg.qk_norm.temperature_init) return *cfg.qk_norm.temperature_init;
  return henry_temperature(cfg.qk_norm.henry_seq_len > 0 ? cfg.qk_norm.henry_seq_len : cfg.max_seq_len);
}

}  // namespace

// Rules by parameter name (names are fixed by the modules in transformer.cpp):
//   *norm*.weight -> 1 (0 with model.norm_unit_offset, whose gain is 1 + w),
//   *norm*.bias and other biases -> 0,
//   *temperature  -> qk_norm.temperature_init (or Henry et al.'s log2(L^2-L)),
//   *layer_scale  -> model.layer_scale, *softmax_beta -> model.attn_temperature,
//   wo, w_down -> std / sqrt(2 n_layers) when depth_scaled,
//   every other weight (embeddings, projections, head) -> N(0, std);
// under model.parametrization mup/completep the std each normal weight gets
// comes from model/parametrization.h (matrix-like ÷ √fan-in ratio; the depth
// scaling at the base model's depth).
void init_weights(Transformer& model, const ModelConfig& cfg, uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::map<std::string, double> std_of;
  if (cfg.parametrization != Parametrization::standard)
    for (const auto& s : param_scalings(cfg, TrainConfig{})) std_of[s.name] = s.init_std;
  auto normal_std = [&](const std::string& name) {
    auto it = std_of.find(name);
    return it != std_of.end() ? it->second : standard_init_std(name, cfg, cfg.n_layers);
  };
  // Parameters first, in registration order, then buffers (non-learnable temperature).
  for (auto& item : model->named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    if (name.find("norm") != std::string::npos) {
      if (ends_with(name, "weight")) p.fill_(cfg.norm_unit_offset ? 0.0 : 1.0);
      else p.zero_();
    } else if (ends_with(name, "temperature")) {
      p.fill_(initial_temperature(cfg));
    } else if (ends_with(name, "_sigma.gamma")) {
      p.fill_(1.0);  // sigmaReparam's gamma (model/sigma_reparam.h)
    } else if (ends_with(name, "layer_scale")) {
      p.fill_(*cfg.layer_scale);  // LayerScale's per-channel gains (Touvron et al. 2021)
    } else if (ends_with(name, "softmax_beta")) {
      p.fill_(*cfg.attn_temperature);  // the learned soft temperature, per head
    } else if (ends_with(name, "bias")) {
      p.zero_();
    } else {
      fill_normal(p, normal_std(name), cfg.init.truncate, gen);
    }
  }
  for (auto& item : model->named_buffers(true)) {
    if (ends_with(item.key(), "temperature")) {
      item.value().fill_(initial_temperature(cfg));
    }
  }
  // sigmaReparam's power-iteration vectors: seeded unit vectors, drawn after
  // every parameter so turning it on does not change the weights.
  uint64_t k = 0;
  for (auto& item : model->named_modules("", false))
    if (auto* s = item.value()->as<SigmaReparamImpl>()) init_sigma_reparam(*s, seed * 1000003ull + ++k);
  // A random u, v can give u^T W v near 0 (and a huge 1/sigma): converge them
  // before the first forward; training then adds one step per optimizer step.
  if (k > 0)
    for (int i = 0; i < 20; ++i) sigma_reparam_power_step(*model);
}

Transformer build_model(const ModelConfig& cfg, uint64_t seed, torch::Device device) {
  Transformer model(cfg);
  init_weights(model, cfg, seed);
  model->to(device);
  return model;
}

}  // namespace keel
