#include "monitor/param_stats.h"

#include <cmath>
#include <iterator>
#include <map>

#include "optim/grad_norms.h"

namespace keel {

namespace {
// Optimizer::step_stats keys, in the order of the row's last columns.
constexpr const char* kStepStats[] = {"ns_rms", "ns_sigma_max", "update_spectral"};
}  // namespace

nlohmann::json param_stats(const Optimizer& optimizer, const std::vector<torch::Tensor>& before, double eps,
                           double beta2) {
  torch::NoGradGuard no_grad;
  const auto& params = optimizer.params();
  TORCH_CHECK(before.size() == params.size(), "param_stats: one tensor before the update per parameter");
  std::map<std::string, torch::Tensor> state;
  for (auto& [name, t] : optimizer.state()) state.emplace(name, t);
  auto find = [&](const std::string& key) {
    auto it = state.find(key);
    return it == state.end() ? torch::Tensor() : it->second;
  };
  auto rms = [](const torch::Tensor& t) { return t.to(torch::kFloat32).pow(2).mean().sqrt(); };
  std::vector<torch::Tensor> rows;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    const auto w = p.param.detach();
    const auto nan = torch::full({}, NAN, w.options().dtype(torch::kFloat32));
    const auto g = p.param.grad();
    std::vector<torch::Tensor> row = {g.defined() ? rms(g) : nan, rms(w), rms(w - before[i])};
    const auto m = find("exp_avg." + p.name), v = find("exp_avg_sq." + p.name), step = find("step." + p.name);
    const bool has_moments = m.defined() && v.defined() && step.defined();
    if (has_moments) {
      // √v̂ with Adam's bias correction at this tensor's own step count.
      const auto t = step.to(torch::kFloat32).to(w.device());
      const auto v_hat = v.to(torch::kFloat32) / (1.0 - torch::pow(torch::full({}, beta2, t.options()), t));
      const auto root = v_hat.sqrt();
      row.push_back(rms(m));
      row.push_back(root.lt(eps).to(torch::kFloat32).mean());
      row.push_back(root.lt(10 * eps).to(torch::kFloat32).mean());
    } else if (const auto mu = find("muon_momentum." + p.name); mu.defined()) {
      row.push_back(rms(mu));  // Muon's momentum: its first moment
      row.insert(row.end(), 2, nan);
    } else {
      row.insert(row.end(), 3, nan);
    }
    // Statistics only the optimizer saw (Muon's Newton–Schulz output), or NaN.
    const auto extra = optimizer.step_stats().find(p.name);
    for (const char* key : kStepStats) {
      torch::Tensor v;
      if (extra != optimizer.step_stats().end()) {
        auto it = extra->second.find(key);
        if (it != extra->second.end()) v = it->second.to(torch::kFloat32).to(w.device());
      }
      row.push_back(v.defined() ? v.reshape({}) : nan);
    }
    row.push_back(torch::full({}, has_moments ? 1.0 : 0.0, w.options().dtype(torch::kFloat32)));
    rows.push_back(torch::stack(row));
  }
  nlohmann::json out = nlohmann::json::object();
  if (rows.empty()) return out;
  // ZeRO-1: a parameter's gradient and moments are whole on its owner only.
  const auto host = rows_from_owners(torch::stack(rows), optimizer.grad_shard()).to(torch::kFloat64).cpu();  // the one sync
  const int64_t has_moments_col = host.size(1) - 1;
  const auto a = host.accessor<double, 2>();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto r = static_cast<int64_t>(i);
    auto& e = out[params[i].name];
    auto put = [&](const char* key, double x) { e[key] = std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(); };
    put("grad_rms", a[r][0]);
    put("weight_rms", a[r][1]);
    put("update_rms", a[r][2]);
    put("update_ratio", a[r][1] > 0 ? a[r][2] / a[r][1] : NAN);
    if (std::isfinite(a[r][3])) put("m_rms", a[r][3]);
    for (size_t k = 0; k < std::size(kStepStats); ++k)
      if (std::isfinite(a[r][6 + static_cast<int64_t>(k)])) put(kStepStats[k], a[r][6 + static_cast<int64_t>(k)]);
    if (a[r][has_moments_col] > 0.5) {
      put("v_below_eps", a[r][4]);
      put("v_below_10eps", a[r][5]);
    }
  }
  return out;
}

}  // namespace keel
