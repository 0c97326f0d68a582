#include "model/parametrization.h"

#include <cmath>
#include <set>
#include <tuple>

#include "util/log.h"
#include "util/text.h"

namespace keel {

std::string width_role_name(WidthRole role) {
  switch (role) {
    case WidthRole::fixed: return "fixed";
    case WidthRole::vector: return "vector-like";
    case WidthRole::matrix: return "matrix-like";
  }
  return "?";
}

ForwardScaling forward_scaling(const ModelConfig& m) {
  ForwardScaling f;
  if (m.parametrization == Parametrization::standard) return f;
  const ModelConfig b = base_model_config(m);
  f.width_ratio = static_cast<double>(m.d_model) / static_cast<double>(b.d_model);
  if (b.d_model != m.d_model) f.output_mult = static_cast<double>(b.d_model) / static_cast<double>(m.d_model);
  // µP's 1/head_dim attention, anchored at the base: √d_b/d equals 1/√d at d = d_b.
  // The l2 QK-Norm's temperature replaces the scale (it has no head_dim in it).
  if (b.head_dim() != m.head_dim() && m.qk_norm.type != NormKind::l2)
    f.attn_scale = std::sqrt(static_cast<double>(b.head_dim())) / static_cast<double>(m.head_dim());
  if (m.parametrization == Parametrization::completep) {
    const double alpha = m.mup.depth_alpha;
    f.depth_ratio = static_cast<double>(m.n_layers) / static_cast<double>(b.n_layers);
    if (b.n_layers != m.n_layers) {
      f.residual_mult = std::pow(f.depth_ratio, -alpha);
      f.depth_lr_mult = std::pow(f.depth_ratio, alpha - 1.0);
    }
    if (b.n_layers != m.n_layers || b.d_model != m.d_model)
      f.adam_eps_mult = (1.0 / f.width_ratio) * std::pow(f.depth_ratio, -alpha);
  }
  return f;
}

bool wants_muon(const std::string& name, int64_t dims) {
  static const std::set<std::string> linears = {"wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"};
  return dims == 2 && linears.count(name.substr(name.rfind('.') + 1)) > 0;
}

bool normal_initialised(const std::string& name) {
  return name.find("norm") == std::string::npos && !ends_with(name, "temperature") &&
         !ends_with(name, "_sigma.gamma") && !ends_with(name, "bias") && !ends_with(name, "layer_scale") &&
         !ends_with(name, "softmax_beta");
}

double standard_init_std(const std::string& name, const ModelConfig& m, int64_t depth) {
  if (!normal_initialised(name)) return 0.0;
  if (m.init.depth_scaled && (ends_with(name, "wo") || ends_with(name, "w_down")))
    return m.init.std / std::sqrt(2.0 * static_cast<double>(depth));
  return m.init.std;
}

std::vector<std::string> describe_parametrization(const ModelConfig& m, const std::vector<ParamScaling>& params) {
  const ForwardScaling f = forward_scaling(m);
  const ModelConfig b = base_model_config(m);
  std::vector<std::string> lines;
  if (m.parametrization == Parametrization::standard) return lines;
  lines.push_back(strf("%s: base d %lld, head_dim %lld, %lld layers; width x%g, depth x%g",
                       name_of(m.parametrization).c_str(), static_cast<long long>(b.d_model),
                       static_cast<long long>(b.head_dim()), static_cast<long long>(b.n_layers), f.width_ratio,
                       f.depth_ratio));
  lines.push_back(strf("logits x%.4g, residual branches x%.4g, AdamW eps x%.4g, q.k scale %s", f.output_mult,
                       f.residual_mult, f.adam_eps_mult,
                       f.attn_scale ? strf("%.4g", *f.attn_scale).c_str() : "standard"));
  // One line per (role, optimizer, init std, LR x, decay x), in first-seen order.
  std::vector<std::tuple<std::string, double, double, double>> keys;
  std::vector<int64_t> counts;
  for (const auto& p : params) {
    const std::string label = width_role_name(p.role) + (p.muon ? " (Muon)" : "");
    auto key = std::make_tuple(label, p.init_std, p.lr_mult, p.wd_mult);
    size_t i = 0;
    while (i < keys.size() && keys[i] != key) ++i;
    if (i == keys.size()) {
      keys.push_back(key);
      counts.push_back(0);
    }
    ++counts[i];
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto& [label, std, lr, wd] = keys[i];
    lines.push_back(strf("%lld %s: init std %s, LR x%.4g, decay x%.4g", static_cast<long long>(counts[i]),
                         label.c_str(), std > 0 ? strf("%.4g", std).c_str() : "const", lr, wd));
  }
  return lines;
}

}  // namespace keel
