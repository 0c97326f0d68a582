// Muon (Jordan et al. 2024; Liu et al. 2025, "Muon is scalable for LLM
// training"): SGD momentum whose update, for each 2-D weight matrix of the
// attention and MLP linears, is orthogonalised by a quintic Newton–Schulz
// iteration before it is applied. Every other parameter (embedding, output
// head, norm gains, biases, QK-Norm gains, L2 temperatures, σReparam scales)
// is trained by AdamW with its own learning rate.
//
// The update follows torch.optim.Muon (PyTorch 2.9+), which the parity tests
// hold keel to (tests/python/test_muon_parity.py):
//   B ← μB + (1 − μ)G;   U = nesterov ? (1 − μ)G + μB : B
//   O = NS₅(U / ‖U‖_F)   (a, b, c) = (3.4445, −4.7750, 2.0315)
//   W ← W·(1 − η·λ) − η·adjust(m, n)·O
// adjust: match_rms_adamw 0.2·√max(m, n) (Moonlight), spectral √max(1, m/n)
// (Keller Jordan's). docs/papers.md#muon has the definitions.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "optim/optimizer.h"

#include "model/parametrization.h"

namespace keel {

// wants_muon(name, param), which parameters Muon trains: model/parametrization.h
// (the parameter's role in the model, which µP's scalings also read).

// The quintic Newton–Schulz iteration on a matrix [m, n] or a batch of them
// [B, m, n], in `dtype` (bf16 or fp32); each matrix is first divided by its
// Frobenius norm (at least eps). Returns the result in `dtype`.
torch::Tensor newton_schulz(const torch::Tensor& g, int64_t steps, torch::ScalarType dtype, double eps = 1e-7);

// The LR multiplier of a matrix [m, n] that Muon orthogonalises.
double muon_lr_adjustment(MuonAdjustLr rule, int64_t m, int64_t n);

class Muon : public Optimizer {
 public:
  // `head_dim` is used when train.muon.split_qkv_heads orthogonalises wq, wk
  // and wv one head at a time.
  Muon(std::vector<NamedParam> params, const TrainConfig& t, int64_t head_dim);

  void step(double lr, const torch::Tensor& found_inf = {}) override;
  void step(const torch::Tensor& lr, const torch::Tensor& found_inf = {}) override;
  // "muon_momentum.<param>" for Muon's parameters, then AdamW's state of the others.
  std::vector<std::pair<std::string, torch::Tensor>> state() const override;
  void load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) override;
  std::vector<std::string> describe() const override;
  // Newton-Schulz and the momentum stay on the device; its AdamW may not.
  std::string graph_capture_obstacle() const override { return adamw_->graph_capture_obstacle(); }

  // The parameters each part trains (for the settings table and the tests).
  const std::vector<NamedParam>& muon_params() const { return muon_params_; }
  const AdamW& adamw() const { return *adamw_; }

 private:
  // Matrices of one shape [m, n] (and one µP LR and decay multiplier) that
  // Newton–Schulz runs on as one batch.
  struct ShapeGroup {
    int64_t m = 0, n = 0;
    std::vector<size_t> index;  // into muon_params_
    double lr_adjustment = 1.0;  // adjust(m, n) × the parameters' lr_mult
    double lr_mult = 1.0, wd_mult = 1.0;
  };
  // lr_tensor, when defined, takes the place of lr (CUDA-graph capture).
  void step_muon(double lr, const torch::Tensor& lr_tensor, const torch::Tensor& found_inf);
  int64_t pieces(size_t i) const;  // matrices parameter i is split into

  std::vector<NamedParam> muon_params_;
  std::vector<torch::Tensor> momentum_;
  std::vector<ShapeGroup> groups_;
  std::unique_ptr<AdamW> adamw_;
  double adamw_lr_ratio_ = 1.0;  // AdamW's LR / train.lr: the schedule scales both alike
  double weight_decay_ = 0.0;    // per unit of LR (independent decay already divided by the peak LR)
  std::vector<int64_t> split_;   // rows per piece of each Muon parameter (0: whole matrix)
  TrainConfig cfg_;
  torch::ScalarType ns_dtype_ = torch::kFloat32;
};

}  // namespace keel
