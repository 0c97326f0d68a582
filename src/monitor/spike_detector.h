// Loss / grad-norm spike signals (REFERENCE.md §5). Plain C++ + nlohmann::json; no torch.
//
// SpikeDetector: online rolling z-score detector in the style of OLMo-core's stability
//   monitor and llm.c (window 128, threshold 6σ, active once 64 values exist).
//   - z = (value − mean) / std over the window of *previously accepted* values
//     (the current value is never part of its own statistics).
//   - std is the POPULATION standard deviation (divide by n, ddof = 0).
//   - One-sided, like llm.c: only upward deviations count; spike = active && z > threshold
//     (strictly greater). A large downward value is not a spike and IS added to the window.
//   - active once the window holds at least `warmup` accepted values.
//   - Flagged spikes are NOT added to the window (llm.c keeps outliers out), so the value
//     after a spike sees exactly the statistics it would have seen without the spike.
//     Consequence (same as llm.c): a permanent upward level shift keeps being flagged.
//   - Non-finite values (NaN, ±inf) are always flagged, even during warm-up, with
//     z = +inf, and are never added to the window; mean/std report the current window.
//   - std == 0 (constant window): z = +inf if value > mean (a spike once active),
//     z = 0 if value == mean, z = −inf if value < mean (never a spike). No division by 0.
//   - Statistics are recomputed from the window on every call (two-pass, O(window)):
//     exact, order-deterministic, and bit-reproducible after load_state().
//
// SpikeScore: the OLMo 2 spike score: percentage of values lying at least `sigma`
//   standard deviations from the rolling mean of the previous `window` values.
//   - For value x_t the statistics are over the last min(t', window) values before it
//     (the current value excluded; all finite values enter the history, outliers included,
//     as in a plain rolling mean). std is the POPULATION std (ddof = 0).
//   - x_t is "scored" once the history holds at least `min_history` values (default 100);
//     scored() is the denominator. Earlier values only feed the history. Why not 2: with
//     2–3 history values the std estimate is degenerate, and even i.i.d. uniform noise then
//     produces ">7σ" flags (seen in testing at t = 2); 100 values give a usable std while
//     scoring all but the first 100 steps. Pass min_history = window for pandas-style
//     rolling(window) semantics (score only full windows).
//   - Two-sided: flagged iff |x − mean| >= sigma·std and |x − mean| > 0 (the second
//     clause keeps a constant series from flagging itself when std == 0; with std == 0
//     any x != mean is flagged).
//   - Non-finite values are always scored and flagged (even before min_history) and are
//     never added to the history.
//   - score_percent() = 100 · flagged / scored (0 when nothing was scored).
//   - Efficiency: O(1) amortised per value. Running sums Σ(x−K) and Σ(x−K)² over a ring
//     buffer, with a shift K (the first value, then the window mean at each rebase).
//     Every `window` insertions the sums are recomputed from the buffer (two-pass, K reset
//     to the exact mean), which bounds drift and catastrophic cancellation
//     (var = S2/n − (S1/n)², clamped at 0). The sums are part of state(), so a restored
//     score continues bit-identically.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include <nlohmann/json.hpp>

namespace keel {

struct SpikeVerdict {
  bool spike = false;   // flagged (active && z > threshold, or non-finite value)
  double z = 0.0;       // (value − mean) / std; +inf for non-finite values
  double mean = 0.0;    // mean of the window (previous accepted values); 0 if empty
  double std = 0.0;     // population std of the window; 0 if fewer than 2 values
  bool active = false;  // window holds >= warmup values
};

class SpikeDetector {
 public:
  // Requires window >= 1, 1 <= warmup <= window, finite threshold; else std::invalid_argument.
  explicit SpikeDetector(int64_t window = 128, double threshold = 6.0, int64_t warmup = 64);

  SpikeVerdict observe(double value);

  int64_t window() const { return window_; }
  double threshold() const { return threshold_; }
  int64_t warmup() const { return warmup_; }
  int64_t size() const { return static_cast<int64_t>(values_.size()); }  // accepted values held
  int64_t observed() const { return observed_; }  // all calls to observe()
  int64_t spikes() const { return spikes_; }      // flagged calls (incl. non-finite)

  // {"kind":"SpikeDetector","version":1,"window","threshold","warmup","observed","spikes",
  //  "values":[oldest..newest]}. load_state restores everything, config included
  // (the state's config wins over the constructor's); throws std::invalid_argument on a
  // malformed state.
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);

 private:
  int64_t window_;
  double threshold_;
  int64_t warmup_;
  std::deque<double> values_;
  int64_t observed_ = 0;
  int64_t spikes_ = 0;
};

class SpikeScore {
 public:
  // Requires window >= 1, sigma >= 0 finite, 1 <= min_history <= window.
  explicit SpikeScore(int64_t window = 1000, double sigma = 7.0, int64_t min_history = 100);

  void observe(double value);

  double score_percent() const;
  int64_t flagged() const { return flagged_; }
  int64_t scored() const { return scored_; }
  int64_t observed() const { return observed_; }
  int64_t size() const { return count_; }  // values in the history (<= window)
  // Statistics of the current history (what the next value will be judged against).
  double window_mean() const;
  double window_std() const;

  int64_t window() const { return window_; }
  double sigma() const { return sigma_; }
  int64_t min_history() const { return min_history_; }

  // {"kind":"SpikeScore","version":1,"window","sigma","min_history","observed","scored",
  //  "flagged","values":[oldest..newest],"shift","sum1","sum2","since_rebase"}.
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);

 private:
  void push(double x);
  void rebase();
  double variance() const;

  int64_t window_;
  double sigma_;
  int64_t min_history_;
  std::vector<double> ring_;  // capacity window_
  int64_t head_ = 0;          // index of the oldest value
  int64_t count_ = 0;
  double shift_ = 0.0;
  double sum1_ = 0.0;  // Σ (x − shift)
  double sum2_ = 0.0;  // Σ (x − shift)²
  int64_t since_rebase_ = 0;
  int64_t observed_ = 0;
  int64_t scored_ = 0;
  int64_t flagged_ = 0;
};

}  // namespace keel
