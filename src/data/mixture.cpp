#include "data/mixture.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "data/permutation.h"
#include "util/error.h"
#include "util/hashing.h"

namespace keel {

namespace {
// Cumulative weights as integers over 2^40, so that every machine rounds the
// same way (C_s(n) = floor(W n) must agree across ranks and resumes).
constexpr int64_t kDen = int64_t{1} << 40;

std::string weight_text(double w) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", w);
  return buf;
}
}  // namespace

Mixture::Mixture(std::vector<MixtureSource> sources, int64_t seq_len, uint64_t seed)
    : sources_(std::move(sources)), seq_len_(seq_len), seed_(seed) {
  if (sources_.empty()) throw DataError("data.sources: a mixture needs at least one source");
  double total = 0;
  for (size_t i = 0; i < sources_.size(); ++i) {
    const auto& s = sources_[i];
    if (!(s.weight > 0) || !std::isfinite(s.weight))
      throw DataError("data.sources[" + std::to_string(i) + "].weight must be a positive number");
    if (s.weight > kMaxMixtureWeight)
      throw DataError("data.sources[" + std::to_string(i) + "].weight " + weight_text(s.weight) + " is above " +
                      weight_text(kMaxMixtureWeight) + "; weights are relative, so scale them all down");
    total += s.weight;
  }
  int64_t cum = 0;
  double acc = 0;
  cum_num_.push_back(0);
  for (size_t i = 0; i < sources_.size(); ++i) {
    const auto& s = sources_[i];
    const std::string where = "data.sources[" + std::to_string(i) + "] (" + s.name + ")";
    share_.push_back(s.weight / total);
    if (share_.back() < kMinMixtureShare)
      throw DataError(where + ": weight " + std::to_string(s.weight) + " is a share of " +
                      std::to_string(share_.back()) + ", below the smallest keel mixes (" +
                      std::to_string(kMinMixtureShare) + "); raise it or drop the source");
    if (s.tokens < seq_len + 1)
      throw DataError(where + " has " + std::to_string(s.tokens) + " train tokens, fewer than one window of " +
                      std::to_string(seq_len + 1) + " (seq_len + 1)");
    acc += s.weight;
    cum = i + 1 == sources_.size() ? kDen : std::llround(acc / total * static_cast<double>(kDen));
    cum_num_.push_back(cum);
    int64_t n = (s.tokens - seq_len) / seq_len;
    shift_.push_back(n >= 1);  // shorter than 2T: one window, never shifted (as BatchLoader)
    windows_.push_back(std::max<int64_t>(1, n));
  }
}

int64_t Mixture::floor_cum(int s, int64_t n) const {
  return static_cast<int64_t>((static_cast<__int128>(cum_num_[s]) * n) / kDen);
}

int64_t Mixture::count_before(int s, int64_t n) const { return floor_cum(s + 1, n) - floor_cum(s, n); }

int Mixture::source_of(int64_t g, int64_t* index) const {
  const int64_t b = g / kMixtureBlock, p = g % kMixtureBlock;
  const uint64_t key = mix64(seed_ ^ mix64(static_cast<uint64_t>(b) + 0x6d1c));
  const auto j = static_cast<int64_t>(Permutation(kMixtureBlock, key)(static_cast<uint64_t>(p)));
  int64_t start = 0;  // Q_s: the block's first slot of source s
  const int64_t lo = b * kMixtureBlock, hi = lo + kMixtureBlock;
  for (size_t s = 0; s < sources_.size(); ++s) {
    const int64_t before = count_before(static_cast<int>(s), lo);
    const int64_t q = count_before(static_cast<int>(s), hi) - before;
    if (j < start + q) {
      if (index) *index = before + (j - start);
      return static_cast<int>(s);
    }
    start += q;
  }
  throw std::logic_error("Mixture: slot outside every source");  // the q_s sum to the block size
}

int64_t Mixture::window_start(int64_t g) const {
  int64_t k = 0;
  const int s = source_of(g, &k);
  const int64_t n = windows_[s], epoch = k / n;
  const uint64_t source_seed = mix64(seed_ ^ mix64(static_cast<uint64_t>(s) + 0x50c7ce));
  const uint64_t epoch_key = mix64(source_seed ^ mix64(static_cast<uint64_t>(epoch) + 0x5eed));
  const int64_t offset = (epoch == 0 || !shift_[s]) ? 0 : static_cast<int64_t>(mix64(epoch_key) % seq_len_);
  return sources_[s].begin + offset +
         static_cast<int64_t>(Permutation(n, epoch_key)(static_cast<uint64_t>(k % n))) * seq_len_;
}

double Mixture::epochs(int s, int64_t samples) const {
  return static_cast<double>(count_before(s, samples)) / static_cast<double>(windows_[s]);
}

std::vector<std::string> Mixture::describe(int64_t samples) const {
  std::vector<std::string> out;
  for (size_t s = 0; s < sources_.size(); ++s) {
    const double e = epochs(static_cast<int>(s), samples);
    char line[256];
    std::snprintf(line, sizeof line, "%.1f%% of sequences, %lld tokens, %.2f epochs (%s)", 100 * share_[s],
                  static_cast<long long>(sources_[s].tokens), e,
                  e > 1 ? "upsampled" : e < 1 ? "capped" : "exactly once");
    out.push_back(sources_[s].name + ": " + line);
  }
  return out;
}

}  // namespace keel
