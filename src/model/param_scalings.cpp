// param_scalings: the per-parameter half of model/parametrization.h, which
// needs the modules themselves (LibTorch) for the shapes of the model and of
// its base.
#include <cmath>
#include <map>

#include "model/parametrization.h"
#include "model/transformer.h"

namespace keel {

namespace {

std::vector<int64_t> shape_of(const torch::Tensor& t) { return t.sizes().vec(); }

// A block parameter's name in a base model with `layers` blocks: blocks past
// the base's last are shaped like its last.
std::string base_name(const std::string& name, int64_t layers) {
  if (name.rfind("blocks.", 0) != 0) return name;
  const size_t dot = name.find('.', 7);
  const int64_t index = std::stoll(name.substr(7, dot - 7));
  if (index < layers) return name;
  return "blocks." + std::to_string(layers - 1) + name.substr(dot);
}

}  // namespace

std::vector<ParamScaling> param_scalings(const ModelConfig& m, const TrainConfig& t) {
  const ModelConfig b = base_model_config(m);
  const ForwardScaling f = forward_scaling(m);
  // Shapes from the modules themselves (torch::empty: nothing is filled).
  Transformer model(m), base(b);
  std::map<std::string, std::vector<int64_t>> base_shapes;
  for (const auto& item : base->named_parameters(true)) base_shapes[item.key()] = shape_of(item.value());

  std::vector<ParamScaling> out;
  for (const auto& item : model->named_parameters(true)) {
    ParamScaling s;
    s.name = item.key();
    s.shape = shape_of(item.value());
    s.base_shape = base_shapes.at(base_name(s.name, b.n_layers));
    int64_t inf = 0;
    for (size_t d = 0; d < s.shape.size(); ++d)
      if (s.shape[d] != s.base_shape[d]) {
        ++inf;
        s.fan_in_ratio = static_cast<double>(s.shape[d]) / static_cast<double>(s.base_shape[d]);  // the last one
      }
    s.role = inf >= 2 ? WidthRole::matrix : inf == 1 ? WidthRole::vector : WidthRole::fixed;
    s.muon = t.optimizer == OptimizerKind::muon && wants_muon(s.name, item.value().dim());
    const double std0 = standard_init_std(s.name, m, b.n_layers);
    const bool inside_blocks = s.name.rfind("blocks.", 0) == 0;
    double width_lr = 1.0;
    if (s.role == WidthRole::matrix) {
      s.init_std = std0 / std::sqrt(s.fan_in_ratio);
      if (!s.muon) {
        width_lr = 1.0 / s.fan_in_ratio;  // MuAdam: LR ÷ width_mult
      } else if (t.muon.adjust_lr == MuonAdjustLr::match_rms_adamw) {
        // Muon's orthogonal update has spectral norm adjust·η; match_rms's
        // 0.2·√max(m, n) grows as √width, µP's spectral condition wants it
        // constant for a hidden matrix (docs/papers.md#mup-and-completep).
        const double big = static_cast<double>(std::max(s.shape[0], s.shape[1]));
        const double base_big = static_cast<double>(std::max(s.base_shape[0], s.base_shape[1]));
        width_lr = std::sqrt(base_big / big);
      }  // spectral: √max(1, m/n) already satisfies the spectral condition
      s.wd_mult = 1.0 / width_lr;  // MuAdam: weight decay × width_mult, so LR × decay stays put
    } else {
      s.init_std = std0;
    }
    s.lr_mult = width_lr * (inside_blocks ? f.depth_lr_mult : 1.0);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace keel
