#include "monitor/spike_detector.h"
#include "util/json.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace keel {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Two-pass population mean/std of a container (exact and order-deterministic).
template <typename It>
void mean_std(It begin, It end, double* mean, double* stddev) {
  double n = 0.0, sum = 0.0;
  for (It it = begin; it != end; ++it) { sum += *it; n += 1.0; }
  if (n == 0.0) { *mean = 0.0; *stddev = 0.0; return; }
  const double m = sum / n;
  double ss = 0.0;
  for (It it = begin; it != end; ++it) { const double d = *it - m; ss += d * d; }
  *mean = m;
  *stddev = std::sqrt(ss / n);
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

const nlohmann::json& field(const nlohmann::json& j, const char* key) {
  require(j.is_object() && j.contains(key), std::string("spike state: missing '") + key + "'");
  return j.at(key);
}

int64_t get_int(const nlohmann::json& j, const char* key) {
  const auto& v = field(j, key);
  require(v.is_number_integer(), std::string("spike state: '") + key + "' must be an integer");
  return json_int<int64_t>(v);
}

double get_double(const nlohmann::json& j, const char* key) {
  const auto& v = field(j, key);
  require(v.is_number(), std::string("spike state: '") + key + "' must be a number");
  const double d = v.get<double>();
  require(std::isfinite(d), std::string("spike state: '") + key + "' must be finite");
  return d;
}

std::vector<double> get_values(const nlohmann::json& j) {
  const auto& v = field(j, "values");
  require(v.is_array(), "spike state: 'values' must be an array");
  std::vector<double> out;
  out.reserve(v.size());
  for (const auto& e : v) {
    require(e.is_number(), "spike state: 'values' must hold numbers");
    const double d = e.get<double>();
    require(std::isfinite(d), "spike state: 'values' must be finite");
    out.push_back(d);
  }
  return out;
}

void check_kind(const nlohmann::json& j, const char* kind) {
  require(j.is_object(), "spike state: not an object");
  const auto& k = field(j, "kind");
  require(k.is_string() && k.get<std::string>() == kind,
          std::string("spike state: expected kind '") + kind + "'");
  require(get_int(j, "version") == 1, "spike state: unsupported version");
}

}  // namespace

// ---------------------------------------------------------------- SpikeDetector

SpikeDetector::SpikeDetector(int64_t window, double threshold, int64_t warmup)
    : window_(window), threshold_(threshold), warmup_(warmup) {
  require(window >= 1, "SpikeDetector: window must be >= 1");
  require(warmup >= 1 && warmup <= window, "SpikeDetector: warmup must be in [1, window]");
  require(std::isfinite(threshold), "SpikeDetector: threshold must be finite");
}

SpikeVerdict SpikeDetector::observe(double value) {
  ++observed_;
  SpikeVerdict v;
  mean_std(values_.begin(), values_.end(), &v.mean, &v.std);
  v.active = static_cast<int64_t>(values_.size()) >= warmup_;
  if (!std::isfinite(value)) {
    v.z = kInf;
    v.spike = true;
    ++spikes_;
    return v;
  }
  const double diff = value - v.mean;
  if (v.std > 0.0) {
    v.z = diff / v.std;
  } else {
    v.z = diff > 0.0 ? kInf : (diff < 0.0 ? -kInf : 0.0);
  }
  v.spike = v.active && v.z > threshold_;
  if (v.spike) {
    ++spikes_;
    return v;  // outliers stay out of the window
  }
  values_.push_back(value);
  while (static_cast<int64_t>(values_.size()) > window_) values_.pop_front();
  return v;
}

nlohmann::json SpikeDetector::state() const {
  nlohmann::json j;
  j["kind"] = "SpikeDetector";
  j["version"] = 1;
  j["window"] = window_;
  j["threshold"] = threshold_;
  j["warmup"] = warmup_;
  j["observed"] = observed_;
  j["spikes"] = spikes_;
  j["values"] = nlohmann::json::array();
  for (double x : values_) j["values"].push_back(x);
  return j;
}

void SpikeDetector::load_state(const nlohmann::json& j) {
  check_kind(j, "SpikeDetector");
  SpikeDetector fresh(get_int(j, "window"), get_double(j, "threshold"), get_int(j, "warmup"));
  const std::vector<double> values = get_values(j);
  require(static_cast<int64_t>(values.size()) <= fresh.window_,
          "spike state: more values than the window");
  fresh.observed_ = get_int(j, "observed");
  fresh.spikes_ = get_int(j, "spikes");
  require(fresh.observed_ >= 0 && fresh.spikes_ >= 0 && fresh.spikes_ <= fresh.observed_,
          "spike state: inconsistent counters");
  fresh.values_.assign(values.begin(), values.end());
  *this = std::move(fresh);
}

// ---------------------------------------------------------------- SpikeScore

SpikeScore::SpikeScore(int64_t window, double sigma, int64_t min_history)
    : window_(window), sigma_(sigma), min_history_(min_history) {
  require(window >= 1, "SpikeScore: window must be >= 1");
  require(std::isfinite(sigma) && sigma >= 0.0, "SpikeScore: sigma must be finite and >= 0");
  require(min_history >= 1 && min_history <= window,
          "SpikeScore: min_history must be in [1, window]");
  ring_.assign(static_cast<size_t>(window), 0.0);
}

double SpikeScore::variance() const {
  if (count_ == 0) return 0.0;
  const double n = static_cast<double>(count_);
  const double m1 = sum1_ / n;
  const double var = sum2_ / n - m1 * m1;
  return var > 0.0 ? var : 0.0;
}

double SpikeScore::window_mean() const {
  return count_ == 0 ? 0.0 : shift_ + sum1_ / static_cast<double>(count_);
}

double SpikeScore::window_std() const { return std::sqrt(variance()); }

void SpikeScore::rebase() {
  // Exact two-pass recompute from the buffer, oldest to newest; shift := exact mean.
  double sum = 0.0;
  for (int64_t i = 0; i < count_; ++i) sum += ring_[static_cast<size_t>((head_ + i) % window_)];
  shift_ = count_ == 0 ? 0.0 : sum / static_cast<double>(count_);
  sum1_ = 0.0;
  sum2_ = 0.0;
  for (int64_t i = 0; i < count_; ++i) {
    const double d = ring_[static_cast<size_t>((head_ + i) % window_)] - shift_;
    sum1_ += d;
    sum2_ += d * d;
  }
  since_rebase_ = 0;
}

void SpikeScore::push(double x) {
  if (count_ == 0) {
    shift_ = x;
    sum1_ = 0.0;
    sum2_ = 0.0;
  }
  if (count_ == window_) {
    const double old = ring_[static_cast<size_t>(head_)] - shift_;
    sum1_ -= old;
    sum2_ -= old * old;
    ring_[static_cast<size_t>(head_)] = x;
    head_ = (head_ + 1) % window_;
  } else {
    ring_[static_cast<size_t>((head_ + count_) % window_)] = x;
    ++count_;
  }
  const double d = x - shift_;
  sum1_ += d;
  sum2_ += d * d;
  if (++since_rebase_ >= window_) rebase();
}

void SpikeScore::observe(double value) {
  ++observed_;
  if (!std::isfinite(value)) {
    ++scored_;
    ++flagged_;
    return;
  }
  if (count_ >= min_history_) {
    ++scored_;
    const double dev = std::fabs(value - window_mean());
    if (dev > 0.0 && dev >= sigma_ * window_std()) ++flagged_;
  }
  push(value);
}

double SpikeScore::score_percent() const {
  return scored_ == 0 ? 0.0 : 100.0 * static_cast<double>(flagged_) / static_cast<double>(scored_);
}

nlohmann::json SpikeScore::state() const {
  nlohmann::json j;
  j["kind"] = "SpikeScore";
  j["version"] = 1;
  j["window"] = window_;
  j["sigma"] = sigma_;
  j["min_history"] = min_history_;
  j["observed"] = observed_;
  j["scored"] = scored_;
  j["flagged"] = flagged_;
  j["values"] = nlohmann::json::array();
  for (int64_t i = 0; i < count_; ++i)
    j["values"].push_back(ring_[static_cast<size_t>((head_ + i) % window_)]);
  j["shift"] = shift_;
  j["sum1"] = sum1_;
  j["sum2"] = sum2_;
  j["since_rebase"] = since_rebase_;
  return j;
}

void SpikeScore::load_state(const nlohmann::json& j) {
  check_kind(j, "SpikeScore");
  SpikeScore fresh(get_int(j, "window"), get_double(j, "sigma"), get_int(j, "min_history"));
  const std::vector<double> values = get_values(j);
  require(static_cast<int64_t>(values.size()) <= fresh.window_,
          "spike state: more values than the window");
  fresh.observed_ = get_int(j, "observed");
  fresh.scored_ = get_int(j, "scored");
  fresh.flagged_ = get_int(j, "flagged");
  require(fresh.observed_ >= 0 && fresh.scored_ >= 0 && fresh.flagged_ >= 0 &&
              fresh.flagged_ <= fresh.scored_ && fresh.scored_ <= fresh.observed_,
          "spike state: inconsistent counters");
  for (size_t i = 0; i < values.size(); ++i) fresh.ring_[i] = values[i];
  fresh.head_ = 0;
  fresh.count_ = static_cast<int64_t>(values.size());
  fresh.shift_ = get_double(j, "shift");
  fresh.sum1_ = get_double(j, "sum1");
  fresh.sum2_ = get_double(j, "sum2");
  fresh.since_rebase_ = get_int(j, "since_rebase");
  require(fresh.since_rebase_ >= 0 && fresh.since_rebase_ < fresh.window_,
          "spike state: bad since_rebase");
  *this = std::move(fresh);
}

}  // namespace keel
