// µP and CompleteP (docs/papers.md#mup-and-completep): how each parameter's
// init, learning rate and weight decay, and three forward multipliers, scale
// from the base model the hyperparameters were tuned on to this model.
//
// Width follows the `mup` package (Yang et al. 2022, Tensor Programs V): a
// dimension is "infinite" when it differs from the base model's; a parameter
// with two infinite dimensions is matrix-like (init std ÷ √r, AdamW LR ÷ r,
// weight decay × r, r = fan_in / base fan_in), one with fewer is vector-like
// (unchanged); the output logits are multiplied by 1/r of the head's fan-in.
// Depth follows CompleteP (Dey et al. 2025; EleutherAI/nanoGPT-mup's
// `completep` branch): residual branches × (L_base/L)^α, the LR of every
// parameter inside the blocks × (L/L_base)^(α−1), AdamW ε × (1/r_width)·(L/L_base)^(−α).
// With the base equal to the model every factor is exactly 1 and the model,
// its init and its updates are the standard ones bit for bit.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace keel {

// How a parameter's shape scales with width (mup's InfShape.ninf()).
enum class WidthRole { fixed, vector, matrix };
std::string width_role_name(WidthRole role);

struct ParamScaling {
  std::string name;
  std::vector<int64_t> shape, base_shape;
  WidthRole role = WidthRole::fixed;
  double fan_in_ratio = 1.0;  // fan_in / base fan_in (mup's width_mult: the last infinite dimension)
  bool muon = false;          // trained by Muon (train.optimizer: muon and a hidden matrix)
  double init_std = 0.0;      // std of the normal init; 0 for parameters filled with a constant
  double lr_mult = 1.0;       // × the schedule's LR (× muon.adamw_lr's ratio for Muon's AdamW part)
  double wd_mult = 1.0;       // × train.weight_decay
};

// The forward multipliers, from the model config alone.
struct ForwardScaling {
  double width_ratio = 1.0;     // d_model / base_width
  double depth_ratio = 1.0;     // n_layers / base_depth (completep)
  double output_mult = 1.0;     // logits × this: base_width / d_model (mup's MuReadout 1/width_mult)
  double residual_mult = 1.0;   // residual branches × this: (base_depth / n_layers)^α (completep)
  double adam_eps_mult = 1.0;   // AdamW ε × this (completep)
  double depth_lr_mult = 1.0;   // LR of parameters inside the blocks × this (completep): (L/L_base)^(α−1)
  std::optional<double> attn_scale;  // q·k scale when it is not 1/√head_dim: √base_head_dim / head_dim
};
ForwardScaling forward_scaling(const ModelConfig& m);

// The standard init std of a parameter by name (model/init.cpp's rules) and
// whether it is drawn from a normal at all (false: filled with a constant).
// `depth` is the n_layers the GPT-2 depth-scaled output init uses.
bool normal_initialised(const std::string& name);
// Whether Muon trains a parameter of `dims` dimensions named `name`: a 2-D
// weight of an attention or MLP linear (wq, wk, wv, wo, w_gate, w_up, w_down);
// the rest (embeddings, head, gains) train with AdamW.
bool wants_muon(const std::string& name, int64_t dims);
double standard_init_std(const std::string& name, const ModelConfig& m, int64_t depth);

// Every parameter of the model built from `m`, in registration order, with
// its scaling under m.parametrization for the optimizer `t` names.
std::vector<ParamScaling> param_scalings(const ModelConfig& m, const TrainConfig& t);

// Settings-table lines: the forward multipliers and one line per group of
// parameters that scale alike.
std::vector<std::string> describe_parametrization(const ModelConfig& m, const std::vector<ParamScaling>& params);

}  // namespace keel
