#include "optim/muon.h"

#include <cmath>
#include <set>
#include <tuple>
#include <stdexcept>

#include "util/error.h"
#include "util/log.h"
#include "util/text.h"

namespace keel {

namespace {

// Keller Jordan's quintic coefficients, tuned for the largest slope at zero.
constexpr double kA = 3.4445, kB = -4.7750, kC = 2.0315;

std::string leaf_of(const std::string& name) { return name.substr(name.rfind('.') + 1); }

}  // namespace

torch::Tensor newton_schulz(const torch::Tensor& g, int64_t steps, torch::ScalarType dtype, double eps) {
  if (g.dim() != 2 && g.dim() != 3)
    throw std::invalid_argument("newton_schulz takes [m, n] or [B, m, n], got " + std::to_string(g.dim()) + "-D");
  torch::NoGradGuard no_grad;
  auto x = g.to(dtype);
  // Iterate on the wide orientation: the Gram matrix is then the smaller one.
  const bool tall = x.size(-2) > x.size(-1);
  if (tall) x = x.transpose(-2, -1);
  // Spectral norm at most 1: divide each matrix by its Frobenius norm.
  if (x.dim() == 2) x = x / x.norm().clamp_min(eps);
  else x = x / torch::linalg_vector_norm(x, 2, {-2, -1}, /*keepdim=*/true).clamp_min(eps);
  for (int64_t s = 0; s < steps; ++s) {
    if (x.dim() == 2) {
      auto gram = torch::mm(x, x.t());                          // shape: [m, m]
      auto poly = torch::addmm(gram, gram, gram, kB, kC);       // b·A + c·A²
      x = torch::addmm(x, poly, x, kA);                         // a·X + (b·A + c·A²)·X
    } else {
      auto gram = torch::bmm(x, x.transpose(-2, -1));          // shape: [B, m, m]
      auto poly = torch::baddbmm(gram, gram, gram, kB, kC);
      x = torch::baddbmm(x, poly, x, kA);
    }
  }
  return tall ? x.transpose(-2, -1) : x;
}

double muon_lr_adjustment(MuonAdjustLr rule, int64_t m, int64_t n) {
  if (rule == MuonAdjustLr::spectral) return std::sqrt(std::max(1.0, static_cast<double>(m) / static_cast<double>(n)));
  return 0.2 * std::sqrt(static_cast<double>(std::max(m, n)));  // match_rms_adamw: an update of AdamW's RMS
}

Muon::Muon(std::vector<NamedParam> params, const TrainConfig& t, int64_t head_dim) : cfg_(t) {
  params_ = params;
  std::vector<NamedParam> rest;
  for (auto& p : params) (wants_muon(p.name, p.param.dim()) ? muon_params_ : rest).push_back(p);
  adamw_lr_ratio_ = t.muon.adamw_lr > 0 ? t.muon.adamw_lr / t.lr : 1.0;
  // As AdamW's: Wortsman et al.'s independent decay follows the schedule's shape, not its size.
  weight_decay_ = t.independent_weight_decay ? t.weight_decay / t.lr : t.weight_decay;
  adamw_ = std::make_unique<AdamW>(rest, t);
  const bool cuda = !muon_params_.empty() && muon_params_[0].param.is_cuda();
  ns_dtype_ = t.muon.ns_dtype == MuonNsDtype::bf16 || (t.muon.ns_dtype == MuonNsDtype::automatic && cuda)
                  ? torch::kBFloat16
                  : torch::kFloat32;
  std::map<std::tuple<int64_t, int64_t, double, double>, size_t> by_shape;
  for (size_t i = 0; i < muon_params_.size(); ++i) {
    const auto& p = muon_params_[i].param;
    momentum_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    const std::string leaf = leaf_of(muon_params_[i].name);
    // Kimi K2 orthogonalises q, k and v per head for MuonClip: rows of head_dim.
    const bool split = t.muon.split_qkv_heads && head_dim > 0 && (leaf == "wq" || leaf == "wk" || leaf == "wv") &&
                       p.size(0) % head_dim == 0;
    split_.push_back(split ? head_dim : 0);
    const int64_t m = split ? head_dim : p.size(0), n = p.size(1);
    const double lr_mult = muon_params_[i].lr_mult, wd_mult = muon_params_[i].wd_mult;
    auto it = by_shape.find({m, n, lr_mult, wd_mult});
    if (it == by_shape.end()) {
      it = by_shape.emplace(std::make_tuple(m, n, lr_mult, wd_mult), groups_.size()).first;
      const double adjust = muon_lr_adjustment(t.muon.adjust_lr, m, n);
      groups_.push_back({m, n, {}, lr_mult == 1.0 ? adjust : adjust * lr_mult, lr_mult, wd_mult});
    }
    groups_[it->second].index.push_back(i);
  }
}

int64_t Muon::pieces(size_t i) const { return split_[i] ? muon_params_[i].param.size(0) / split_[i] : 1; }

void Muon::step(double lr, const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  adamw_->step(lr * adamw_lr_ratio_, found_inf);
  step_muon(lr, torch::Tensor(), found_inf);
}

void Muon::step(const torch::Tensor& lr, const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  adamw_->step(adamw_lr_ratio_ == 1.0 ? lr : lr * adamw_lr_ratio_, found_inf);
  step_muon(0.0, lr, found_inf);
}

void Muon::step_muon(double lr, const torch::Tensor& lr_tensor, const torch::Tensor& found_inf) {
  const double mu = cfg_.muon.momentum;
  for (const auto& g : groups_) {
    // Momentum and the Nesterov look-ahead, then one batched Newton–Schulz per shape.
    std::vector<torch::Tensor> updates, keep;
    std::vector<size_t> present;
    for (size_t i : g.index) {
      const auto& p = muon_params_[i].param;
      if (!p.grad().defined()) continue;
      const auto& grad = p.grad();
      if (found_inf.defined()) {
        // A skipped step leaves the buffer as it was, still without a host sync.
        momentum_[i].copy_(torch::where(found_inf > 0, momentum_[i], momentum_[i].lerp(grad, 1.0 - mu)));
      } else {
        momentum_[i].lerp_(grad, 1.0 - mu);
      }
      auto u = cfg_.muon.nesterov ? grad.lerp(momentum_[i], mu) : momentum_[i];
      updates.push_back(u.reshape({pieces(i), g.m, g.n}));  // shape: [pieces, m, n]
      present.push_back(i);
    }
    if (updates.empty()) continue;
    // Decay at the group's LR (the schedule's × lr_mult) with its decay × wd_mult: µP keeps the product put.
    const double decay = weight_decay_ * g.lr_mult * g.wd_mult;
    auto batch = updates.size() == 1 && updates[0].size(0) == 1 ? updates[0][0] : torch::cat(updates, 0);
    auto ortho = newton_schulz(batch, cfg_.muon.ns_steps, ns_dtype_);
    if (ortho.dim() == 2) ortho = ortho.unsqueeze(0);
    int64_t row = 0;
    for (size_t i : present) {
      auto& p = muon_params_[i].param;
      if (record_step_stats_) {  // monitor steps only: a few reductions and one small SVD per matrix
        torch::NoGradGuard no_grad;
        const auto pieces_o = ortho.narrow(0, row, pieces(i)).to(torch::kFloat32);  // shape: [pieces, m, n]
        const auto sigma = torch::linalg_matrix_norm(pieces_o, 2, {-2, -1}).amax();
        auto& st = step_stats_[muon_params_[i].name];
        st["ns_rms"] = pieces_o.pow(2).mean().sqrt();
        st["ns_sigma_max"] = sigma;
        if (!lr_tensor.defined()) st["update_spectral"] = sigma * (lr * g.lr_adjustment);
      }
      auto o = ortho.narrow(0, row, pieces(i)).reshape(p.sizes()).to(p.scalar_type());
      row += pieces(i);
      if (!lr_tensor.defined() && !found_inf.defined()) {
        p.mul_(1.0 - lr * decay);  // decoupled decay, at the unadjusted LR as torch.optim.Muon
        p.add_(o, -lr * g.lr_adjustment);
        continue;
      }
      auto eta = lr_tensor.defined() ? lr_tensor.to(p.scalar_type()) : torch::full({}, lr, p.options());
      auto updated = p * (1.0 - eta * decay) - o * (eta * g.lr_adjustment);
      p.copy_(found_inf.defined() ? torch::where(found_inf > 0, p, updated) : updated);
    }
  }
}

std::vector<std::pair<std::string, torch::Tensor>> Muon::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < muon_params_.size(); ++i) out.emplace_back("muon_momentum." + muon_params_[i].name, momentum_[i]);
  for (auto& s : adamw_->state()) out.push_back(s);
  return out;
}

void Muon::load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  for (size_t i = 0; i < muon_params_.size(); ++i) {
    const std::string key = "muon_momentum." + muon_params_[i].name;
    auto it = by_name.find(key);
    if (it == by_name.end())
      throw CheckpointError("optimizer state has no entry '" + key + "' (was the checkpoint trained with AdamW?)");
    if (it->second.sizes() != momentum_[i].sizes()) throw CheckpointError("optimizer state '" + key + "' has the wrong shape");
    momentum_[i].copy_(it->second);
  }
  adamw_->load_state(state);
}

std::vector<std::string> Muon::describe() const {
  int64_t muon_count = 0, adam_count = 0;
  for (const auto& p : muon_params_) muon_count += p.param.numel();
  for (const auto& p : adamw_->params()) adam_count += p.param.numel();
  std::string shapes;
  for (const auto& g : groups_) {
    int64_t n = 0;
    for (size_t i : g.index) n += pieces(i);
    shapes += (shapes.empty() ? "" : ", ") + std::to_string(n) + "×[" + std::to_string(g.m) + "," + std::to_string(g.n) +
              "] lr×" + strf("%.3g", g.lr_adjustment);
  }
  const std::string adam_lr = cfg_.muon.adamw_lr > 0 ? strf("%g", cfg_.muon.adamw_lr) : "train.lr";
  return {strf("Muon on %zu matrices (%s parameters), momentum %g%s, %lld Newton–Schulz steps in %s; shape groups: %s",
               muon_params_.size(), si(static_cast<double>(muon_count)).c_str(), cfg_.muon.momentum,
               cfg_.muon.nesterov ? " Nesterov" : "", static_cast<long long>(cfg_.muon.ns_steps),
               ns_dtype_ == torch::kBFloat16 ? "bf16" : "fp32", shapes.c_str()),
          strf("AdamW on %zu tensors (%s parameters: embedding, head, norms, biases, scales), LR %s",
               adamw_->params().size(), si(static_cast<double>(adam_count)).c_str(), adam_lr.c_str())};
}

}  // namespace keel
