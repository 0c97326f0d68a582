// Tests for keel::SpikeDetector (rolling one-sided z-score, llm.c / OLMo-core style) and
// keel::SpikeScore (OLMo 2 spike score). Expected values are computed independently here
// (long-double Welford / brute-force two-pass over an explicit history), never by calling
// the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "monitor/spike_detector.h"

namespace {

using keel::SpikeDetector;
using keel::SpikeScore;
using keel::SpikeVerdict;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool bits_equal(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void expect_same_verdict(const SpikeVerdict& a, const SpikeVerdict& b, int64_t step) {
  EXPECT_EQ(a.spike, b.spike) << "step " << step;
  EXPECT_EQ(a.active, b.active) << "step " << step;
  EXPECT_TRUE(bits_equal(a.z, b.z)) << "step " << step << ": " << a.z << " vs " << b.z;
  EXPECT_TRUE(bits_equal(a.mean, b.mean)) << "step " << step;
  EXPECT_TRUE(bits_equal(a.std, b.std)) << "step " << step;
}

// Independent population mean/std: Welford in long double.
void ref_mean_std(const std::vector<double>& xs, size_t begin, long double* mean,
                  long double* sd) {
  long double m = 0, m2 = 0;
  long double n = 0;
  for (size_t i = begin; i < xs.size(); ++i) {
    n += 1;
    const long double d = xs[i] - m;
    m += d / n;
    m2 += d * (xs[i] - m);
  }
  *mean = m;
  *sd = n > 0 ? std::sqrt(m2 / n) : 0;
}

// Slowly decaying loss with small deterministic noise (amplitude <= 0.015).
double base_loss(int64_t t) {
  return 2.0 + 3.0 * std::exp(-static_cast<double>(t) / 2000.0) + 0.01 * std::sin(0.37 * t) +
         0.005 * std::sin(1.3 * t + 0.5);
}

const std::set<int64_t> kPlantedUp = {200, 201, 777, 1500, 2999};
constexpr int64_t kPlantedDown = 1000;
constexpr int64_t kSeriesLen = 3000;

double planted_series(int64_t t) {
  double v = base_loss(t);
  if (kPlantedUp.count(t)) v += 0.5;
  if (t == kPlantedDown) v -= 0.5;
  return v;
}

// ------------------------------------------------------------------ SpikeDetector

TEST(SpikeDetector, FlagsExactlyPlantedSpikesWithIndependentZ) {
  std::vector<double> accepted;  // reference window (all accepted values)
  std::set<int64_t> flagged;
  SpikeDetector d2;  // 128, 6.0, 64
  for (int64_t t = 0; t < kSeriesLen; ++t) {
    const double x = planted_series(t);
    const SpikeVerdict v = d2.observe(x);
    const size_t begin = accepted.size() > 128 ? accepted.size() - 128 : 0;
    long double mean, sd;
    ref_mean_std(accepted, begin, &mean, &sd);
    const bool ref_active = accepted.size() - begin >= 64;
    EXPECT_EQ(v.active, ref_active) << t;
    EXPECT_NEAR(v.mean, static_cast<double>(mean), 1e-12 * std::fabs(static_cast<double>(mean)) + 1e-15) << t;
    EXPECT_NEAR(v.std, static_cast<double>(sd), 1e-9 * static_cast<double>(sd) + 1e-15) << t;
    if (sd > 0) {
      const double ref_z = static_cast<double>((x - mean) / sd);
      EXPECT_NEAR(v.z, ref_z, 1e-9 * std::max(1.0, std::fabs(ref_z))) << t;
    }
    const bool ref_spike = ref_active && sd > 0 && (x - mean) / sd > 6.0L;
    EXPECT_EQ(v.spike, ref_spike) << t;
    if (v.spike) flagged.insert(t);
    if (!ref_spike) accepted.push_back(x);
    if (t == kPlantedDown) {
      EXPECT_LT(v.z, -6.0);
    }  // large but downward: not a spike
  }
  EXPECT_EQ(flagged, kPlantedUp);
  EXPECT_EQ(d2.spikes(), static_cast<int64_t>(kPlantedUp.size()));
  EXPECT_EQ(d2.observed(), kSeriesLen);
  EXPECT_EQ(d2.size(), 128);
}

TEST(SpikeDetector, NothingFlaggedDuringWarmup) {
  SpikeDetector det(128, 6.0, 64);
  for (int64_t t = 0; t < 64; ++t) {
    const double x = (t == 10 || t == 63) ? 1000.0 : base_loss(t);  // huge outliers
    const SpikeVerdict v = det.observe(x);
    EXPECT_FALSE(v.active) << t;
    EXPECT_FALSE(v.spike) << t;
    EXPECT_EQ(det.size(), t + 1);  // accepted into the window while warming up
  }
  const SpikeVerdict v = det.observe(5000.0);  // window now has exactly 64 values
  EXPECT_TRUE(v.active);
  EXPECT_TRUE(v.spike);
  EXPECT_EQ(det.size(), 64);
}

TEST(SpikeDetector, OutlierExcludedFromWindow) {
  // A sees a spike at step 150; B never sees it. Every later verdict must be bit-identical.
  SpikeDetector a, b;
  for (int64_t t = 0; t < 150; ++t) {
    expect_same_verdict(a.observe(base_loss(t)), b.observe(base_loss(t)), t);
  }
  const SpikeVerdict s = a.observe(base_loss(150) + 1.0);
  EXPECT_TRUE(s.spike);
  for (int64_t t = 151; t < 400; ++t) {
    expect_same_verdict(a.observe(base_loss(t)), b.observe(base_loss(t)), t);
  }
  EXPECT_EQ(a.state()["values"], b.state()["values"]);
}

TEST(SpikeDetector, NonFiniteFlaggedAndNotAdded) {
  for (const double bad : {kNaN, kInf, -kInf}) {
    // Inactive (warm-up) and active cases.
    SpikeDetector early;
    early.observe(1.0);
    const SpikeVerdict e = early.observe(bad);
    EXPECT_TRUE(e.spike);
    EXPECT_FALSE(e.active);
    EXPECT_EQ(e.z, kInf);
    EXPECT_EQ(early.size(), 1);

    SpikeDetector a, b;
    for (int64_t t = 0; t < 100; ++t) { a.observe(base_loss(t)); b.observe(base_loss(t)); }
    const SpikeVerdict v = a.observe(bad);
    EXPECT_TRUE(v.spike);
    EXPECT_TRUE(v.active);
    EXPECT_EQ(v.z, kInf);
    EXPECT_EQ(a.spikes(), 1);
    for (int64_t t = 100; t < 300; ++t)
      expect_same_verdict(a.observe(base_loss(t)), b.observe(base_loss(t)), t);
  }
}

TEST(SpikeDetector, ZeroStdDoesNotDivideByZero) {
  SpikeDetector det(128, 6.0, 64);
  for (int i = 0; i < 64; ++i) det.observe(1.0);
  SpikeVerdict v = det.observe(1.0);  // equal to the mean: z = 0, accepted
  EXPECT_FALSE(v.spike);
  EXPECT_EQ(v.z, 0.0);
  EXPECT_EQ(v.std, 0.0);
  v = det.observe(1.0 + 1e-9);  // any rise above a constant window: z = +inf, spike
  EXPECT_TRUE(v.spike);
  EXPECT_EQ(v.z, kInf);
  EXPECT_EQ(det.size(), 65);
  v = det.observe(0.5);  // below: z = -inf, not a spike (one-sided), accepted
  EXPECT_FALSE(v.spike);
  EXPECT_EQ(v.z, -kInf);
  EXPECT_EQ(det.size(), 66);
  v = det.observe(1.0);  // now std > 0: finite z
  EXPECT_GT(v.std, 0.0);
  EXPECT_TRUE(std::isfinite(v.z));
}

TEST(SpikeDetector, StateRoundTripMidSeriesIsBitIdentical) {
  for (const int64_t cut : {int64_t{30}, int64_t{200}, int64_t{1400}}) {
    SpikeDetector full;
    std::vector<SpikeVerdict> expected;
    for (int64_t t = 0; t < kSeriesLen; ++t) expected.push_back(full.observe(planted_series(t)));

    SpikeDetector first;
    for (int64_t t = 0; t < cut; ++t) first.observe(planted_series(t));
    const std::string saved = first.state().dump();
    SpikeDetector resumed(10, 1.0, 5);  // config comes from the state
    resumed.load_state(nlohmann::json::parse(saved));
    EXPECT_EQ(resumed.window(), 128);
    EXPECT_EQ(resumed.threshold(), 6.0);
    EXPECT_EQ(resumed.warmup(), 64);
    std::set<int64_t> flagged;
    for (int64_t t = cut; t < kSeriesLen; ++t) {
      const SpikeVerdict v = resumed.observe(planted_series(t));
      expect_same_verdict(v, expected[static_cast<size_t>(t)], t);
      if (v.spike) flagged.insert(t);
    }
    std::set<int64_t> want;
    for (int64_t t : kPlantedUp) if (t >= cut) want.insert(t);
    EXPECT_EQ(flagged, want) << "cut " << cut;
    EXPECT_EQ(resumed.state(), full.state()) << "cut " << cut;
  }
}

TEST(SpikeDetector, RejectsBadArgumentsAndStates) {
  EXPECT_THROW(SpikeDetector(0, 6.0, 1), std::invalid_argument);
  EXPECT_THROW(SpikeDetector(128, 6.0, 0), std::invalid_argument);
  EXPECT_THROW(SpikeDetector(128, 6.0, 129), std::invalid_argument);
  EXPECT_THROW(SpikeDetector(128, kNaN, 64), std::invalid_argument);
  SpikeDetector det(4, 6.0, 2);
  for (int i = 0; i < 4; ++i) det.observe(i);
  nlohmann::json s = det.state();
  SpikeDetector other;
  nlohmann::json bad = s;
  bad["values"].push_back(1.0);  // 5 values > window 4
  EXPECT_THROW(other.load_state(bad), std::invalid_argument);
  bad = s;
  bad["kind"] = "SpikeScore";
  EXPECT_THROW(other.load_state(bad), std::invalid_argument);
  bad = s;
  bad.erase("values");
  EXPECT_THROW(other.load_state(bad), std::invalid_argument);
  // A failed load leaves the detector untouched.
  EXPECT_EQ(other.window(), 128);
  EXPECT_EQ(other.size(), 0);
}

// ------------------------------------------------------------------ SpikeScore

TEST(SpikeScore, HandComputedSmallSeries) {
  // window 5, sigma 2, min_history 2, population std.
  //  t  x    history (prev <=5)   mean  var              2*std   |x-mean|  scored flagged
  //  0  0    []                    -                                         no
  //  1  2    [0]                   -   (1 < min_history)                     no
  //  2  0    [0,2]                 1    1                2       1          yes    no
  //  3  2    [0,2,0]               2/3  8/9              1.886   1.333      yes    no
  //  4  0    [0,2,0,2]             1    1                2       1          yes    no
  //  5  2    [0,2,0,2,0]           0.4  1.12             2.117   1.6        yes    no
  //  6  10   [2,0,2,0,2]           1.2  0.96             1.960   8.8        yes    YES
  //  7  0    [0,2,0,2,10]          2.8  13.76            7.419   2.8        yes    no
  //  8  3    [2,0,2,10,0]          2.8  13.76            7.419   0.2        yes    no
  //  9  -20  [0,2,10,0,3]          3    13.6             7.376   23         yes    YES
  // 10  2    [2,10,0,3,-20]        -1   101.6            20.16   3          yes    no
  // scored = 9, flagged = 2, score = 200/9 %.
  SpikeScore s(5, 2.0, 2);
  const double xs[] = {0, 2, 0, 2, 0, 2, 10, 0, 3, -20, 2};
  const int64_t want_flagged[] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2};
  const int64_t want_scored[] = {0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  for (int i = 0; i < 11; ++i) {
    s.observe(xs[i]);
    EXPECT_EQ(s.flagged(), want_flagged[i]) << i;
    EXPECT_EQ(s.scored(), want_scored[i]) << i;
  }
  EXPECT_NEAR(s.score_percent(), 200.0 / 9.0, 1e-12);
  // History is now [10,0,3,-20,2]: mean -1, var 101.6.
  EXPECT_NEAR(s.window_mean(), -1.0, 1e-12);
  EXPECT_NEAR(s.window_std(), std::sqrt(101.6), 1e-12);
  EXPECT_EQ(s.size(), 5);
}

TEST(SpikeScore, AtLeastSigmaIsInclusiveAndConstantSeriesIsQuiet) {
  SpikeScore s(5, 2.0, 2);
  s.observe(0);
  s.observe(2);
  s.observe(3);  // history [0,2]: mean 1, std 1; |3-1| = 2 = 2*std exactly -> flagged
  EXPECT_EQ(s.flagged(), 1);
  EXPECT_EQ(s.scored(), 1);

  SpikeScore c(5, 7.0, 2);
  for (int i = 0; i < 20; ++i) c.observe(3.0);  // std 0 and x == mean: never flagged
  EXPECT_EQ(c.flagged(), 0);
  EXPECT_EQ(c.scored(), 18);
  c.observe(3.0 + 1e-9);  // std 0, x != mean: flagged
  EXPECT_EQ(c.flagged(), 1);
  EXPECT_EQ(c.score_percent(), 100.0 / 19.0);
  EXPECT_EQ(SpikeScore().score_percent(), 0.0);

  SpikeScore d;  // default min_history = 100: values 0..99 only feed the history
  for (int i = 0; i < 100; ++i) d.observe(i % 2 ? 1000.0 : -1000.0);
  EXPECT_EQ(d.scored(), 0);
  EXPECT_EQ(d.size(), 100);
  d.observe(0.0);
  EXPECT_EQ(d.scored(), 1);
  EXPECT_EQ(d.flagged(), 0);
}

// Deterministic uniform noise in [-1, 1] (64-bit LCG, top 53 bits).
struct Lcg {
  uint64_t s;
  double next() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(s >> 11) * (2.0 / 9007199254740992.0) - 1.0;
  }
};

// 1e5 values: offset + uniform noise (std 1/sqrt(3)) with k = 10 planted ±10σ spikes,
// 10000 steps apart (so at most one spike is in any 1000-value history).
void run_long_series(double offset, double std_rel_tol) {
  const int64_t n = 100000;
  const double noise_sd = 1.0 / std::sqrt(3.0);
  SpikeScore s;  // 1000, 7.0, min_history 100
  Lcg rng{12345};
  std::vector<double> hist;
  hist.reserve(n);
  int64_t k = 0;
  for (int64_t t = 0; t < n; ++t) {
    double x = offset + rng.next();
    if (t % 10000 == 5000) {
      x += (k % 2 == 0 ? 10.0 : -10.0) * noise_sd;
      ++k;
    }
    s.observe(x);
    hist.push_back(x);
    if (t % 101 == 0 || t == n - 1) {  // running stats vs brute force on the history
      const size_t begin = hist.size() > 1000 ? hist.size() - 1000 : 0;
      long double mean, sd;
      ref_mean_std(hist, begin, &mean, &sd);
      ASSERT_NEAR(s.window_mean(), static_cast<double>(mean),
                  1e-12 * std::fabs(static_cast<double>(mean)) + 1e-12) << t;
      ASSERT_NEAR(s.window_std(), static_cast<double>(sd), std_rel_tol * static_cast<double>(sd))
          << "offset " << offset << " t " << t;
    }
  }
  EXPECT_EQ(k, 10);
  EXPECT_EQ(s.scored(), n - 100);
  EXPECT_EQ(s.flagged(), k) << "offset " << offset;
  EXPECT_DOUBLE_EQ(s.score_percent(), 100.0 * k / static_cast<double>(n - 100));
}

TEST(SpikeScore, LongSeriesWithPlantedSpikes) { run_long_series(0.0, 1e-9); }
TEST(SpikeScore, LongSeriesLargeOffsetNoCancellation) {
  // Naive Σx² at offset 1e8 would lose all ~16 digits of the variance; the shifted,
  // periodically rebased sums must still match the brute force closely.
  run_long_series(1e4, 1e-9);
  run_long_series(1e8, 1e-7);
}

TEST(SpikeScore, NonFiniteCountsAsFlaggedAndIsNotAdded) {
  SpikeScore early;
  early.observe(kNaN);  // before min_history: still scored and flagged
  EXPECT_EQ(early.scored(), 1);
  EXPECT_EQ(early.flagged(), 1);
  EXPECT_EQ(early.size(), 0);

  SpikeScore s(50, 7.0, 2);
  Lcg rng{7};
  for (int i = 0; i < 120; ++i) s.observe(5.0 + rng.next());
  const double m = s.window_mean(), sd = s.window_std();
  const int64_t scored = s.scored(), flagged = s.flagged();
  for (const double bad : {kNaN, kInf, -kInf}) s.observe(bad);
  EXPECT_EQ(s.scored(), scored + 3);
  EXPECT_EQ(s.flagged(), flagged + 3);
  EXPECT_TRUE(bits_equal(s.window_mean(), m));
  EXPECT_TRUE(bits_equal(s.window_std(), sd));
  EXPECT_EQ(s.size(), 50);
}

TEST(SpikeScore, StateRoundTripMidSeriesIsBitIdentical) {
  const int64_t n = 30000, cut = 12345;  // cut mid-rebase-period, ring head != 0
  auto value = [](Lcg& rng, int64_t t) {
    return 1e4 + 0.001 * t + rng.next() + (t % 3000 == 1500 ? 8.0 : 0.0);
  };
  SpikeScore full;
  Lcg r1{99};
  std::vector<double> means, stds;  // per-step statistics of the uninterrupted run
  for (int64_t t = 0; t < n; ++t) {
    full.observe(value(r1, t));
    means.push_back(full.window_mean());
    stds.push_back(full.window_std());
  }

  SpikeScore first;
  Lcg r2{99};
  for (int64_t t = 0; t < cut; ++t) first.observe(value(r2, t));
  SpikeScore resumed(10, 1.0, 3);
  resumed.load_state(nlohmann::json::parse(first.state().dump()));
  EXPECT_EQ(resumed.window(), 1000);
  for (int64_t t = cut; t < n; ++t) {
    resumed.observe(value(r2, t));
    ASSERT_TRUE(bits_equal(resumed.window_mean(), means[static_cast<size_t>(t)])) << t;
    ASSERT_TRUE(bits_equal(resumed.window_std(), stds[static_cast<size_t>(t)])) << t;
  }

  EXPECT_GT(full.flagged(), 0);
  EXPECT_EQ(resumed.flagged(), full.flagged());
  EXPECT_EQ(resumed.scored(), full.scored());
  EXPECT_TRUE(bits_equal(resumed.window_mean(), full.window_mean()));
  EXPECT_TRUE(bits_equal(resumed.window_std(), full.window_std()));
  EXPECT_EQ(resumed.state(), full.state());
}

TEST(SpikeScore, RejectsBadArgumentsAndStates) {
  EXPECT_THROW(SpikeScore(0, 7.0, 1), std::invalid_argument);
  EXPECT_THROW(SpikeScore(10, -1.0, 2), std::invalid_argument);
  EXPECT_THROW(SpikeScore(10, 7.0, 11), std::invalid_argument);
  SpikeScore s(4, 2.0, 2);
  for (int i = 0; i < 6; ++i) s.observe(i);
  nlohmann::json bad = s.state();
  bad["flagged"] = 100;  // more flagged than scored
  SpikeScore other;
  EXPECT_THROW(other.load_state(bad), std::invalid_argument);
  bad = s.state();
  bad["kind"] = "SpikeDetector";
  EXPECT_THROW(other.load_state(bad), std::invalid_argument);
  EXPECT_EQ(other.window(), 1000);
}

}  // namespace
