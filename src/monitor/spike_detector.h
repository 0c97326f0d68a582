// Loss / grad-norm spike signals, plain C++ (no torch):
//   SpikeDetector  one-sided rolling z-score (OLMo-core / llm.c defaults:
//                  window 128, 6 sigma, active after 64 values); flagged
//                  values stay out of the window
//   SpikeScore     the OLMo 2 spike score: % of values >= sigma std devs from
//                  the rolling mean of the previous `window` values
// Both are exact and order-deterministic, and their state() restores them
// bit-identically. Their precise semantics (population std, non-finite
// values, a constant window, warm-up) are in docs/stability.md#spike-detection-exactly
// and the definitions in docs/papers.md#spike-and-divergence-signals.
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
