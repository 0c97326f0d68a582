#include "train/model_stats.h"

#include "optim/optimizer.h"
#include "train/device.h"

namespace keel {

nlohmann::json collect_model_stats(Transformer& model, const torch::Tensor& inputs, bool bf16_autocast) {
  torch::NoGradGuard no_grad;
  std::vector<AttentionStats> layers;
  ActivationRms activations;
  ForwardOptions options;
  options.attention_stats = &layers;
  options.activations = &activations;
  torch::Tensor logits;
  {
    AutocastScope autocast(bf16_autocast, inputs.device().type());
    logits = model->forward(inputs, options);
  }
  const int64_t V = model->config().vocab_size;
  auto real = logits.narrow(-1, 0, V).to(torch::kFloat32);  // padded ids are -inf by construction
  auto log_z = torch::logsumexp(real, -1);
  // One stacked tensor, one host transfer.
  std::vector<torch::Tensor> parts;
  for (const auto& s : layers)
    parts.push_back(torch::stack({s.max_score, s.max_score_capped, s.q_norm_mean, s.q_norm_max, s.k_norm_mean,
                                  s.k_norm_max, s.entropy, s.first_token_mass})
                        .to(torch::kFloat64));
  for (size_t i = 0; i < activations.names.size(); ++i)
    parts.push_back(torch::stack({activations.values[i], activations.max_abs[i]}).to(torch::kFloat64));
  parts.push_back(torch::stack({real.abs().max(), log_z.mean(), log_z.pow(2).mean()}).to(torch::kFloat64));
  auto host = torch::cat(parts).cpu();
  const double* v = host.data_ptr<double>();
  nlohmann::json attn = nlohmann::json::array();
  for (size_t i = 0; i < layers.size(); ++i, v += 8)
    attn.push_back({{"layer", i},
                    {"max_logit", v[0]},
                    {"max_logit_capped", v[1]},
                    {"q_norm_mean", v[2]},
                    {"q_norm_max", v[3]},
                    {"k_norm_mean", v[4]},
                    {"k_norm_max", v[5]},
                    {"entropy", v[6]},
                    {"first_token_mass", v[7]}});
  // The residual stream after each block and each sublayer's output as the stream receives it.
  nlohmann::json acts = nlohmann::json::object();
  for (size_t i = 0; i < activations.names.size(); ++i, v += 2)
    acts[activations.names[i]] = {{"rms", v[0]}, {"max_abs", v[1]}};
  return {{"attn", attn}, {"activations", acts}, {"output", {{"max_logit", v[0]}, {"mean_log_z", v[1]}, {"z_loss", v[2]}}}};
}

double parameter_norm(Transformer& model) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> params = model->parameters();
  auto norms = torch::_foreach_norm(params, 2.0, norm_dtype(params));
  return torch::stack(norms).norm().item<double>();
}

}  // namespace keel
