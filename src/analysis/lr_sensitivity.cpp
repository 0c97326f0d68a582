#include "analysis/lr_sensitivity.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace keel {

LrSensitivity lr_sensitivity(const std::vector<LrResult>& results, double init_loss) {
  struct PerLr {
    double sum = 0;
    size_t n = 0;
    bool any_diverged = false;
  };
  std::map<double, PerLr> by_lr;  // ordered by LR
  LrSensitivity s{NAN, NAN, NAN, NAN, 0, 0};
  for (const auto& r : results) {
    const bool counts_as_l0 = r.diverged || !std::isfinite(r.final_loss) || r.final_loss >= init_loss;
    auto& p = by_lr[r.lr];
    p.sum += counts_as_l0 ? init_loss : std::min(r.final_loss, init_loss);
    ++p.n;
    p.any_diverged = p.any_diverged || counts_as_l0;
    s.diverged += counts_as_l0;
  }
  s.grid_points = by_lr.size();
  if (by_lr.empty()) return s;
  std::vector<std::pair<double, double>> capped;  // (lr, min(l(eta), l0))
  for (const auto& [lr, p] : by_lr) {
    capped.emplace_back(lr, p.sum / static_cast<double>(p.n));
    if (!p.any_diverged) s.max_stable_lr = lr;
  }
  s.best_loss = capped.front().second;
  s.best_lr = capped.front().first;
  for (const auto& [lr, loss] : capped)
    if (loss < s.best_loss) {
      s.best_loss = loss;
      s.best_lr = lr;
    }
  if (!(s.best_loss < init_loss)) {  // nothing trained below l0: the mean would read 0, "insensitive"
    s.best_lr = NAN;
    return s;
  }
  double total = 0;
  for (const auto& [lr, loss] : capped) total += loss - s.best_loss;
  s.sensitivity = total / static_cast<double>(capped.size());
  return s;
}

}  // namespace keel
