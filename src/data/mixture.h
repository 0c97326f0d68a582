// Weighted data mixtures: data.sources entries {path, weight} draw training
// sequences from each source in proportion to its weight, whatever its size.
//
// A source is one data.sources entry (a file or a whole directory); its
// documents are a contiguous range of the train split, because `keel
// prepare` writes files in order and records each one's train tokens (and
// the entry it came from) in the manifest.
//
// Which source global sample g comes from, with weights w_s (normalized to
// sum 1) and W_s = w_0 + ... + w_{s-1}: samples are taken in blocks of
// kMixtureBlock. Block b gives source s exactly
//     q_s(b) = C_s((b+1)B) - C_s(bB),  C_s(n) = floor(W_{s+1} n) - floor(W_s n)
// of its slots, so after n samples each source has had floor(w_s n) +- 1 of
// them: its share is exact to 1/n at block ends. Inside a block the slots are
// shuffled by a seeded permutation (permutation.h); slot j belongs to the
// source whose range [Q_s, Q_s + q_s) holds it, and is that source's sample
// number C_s(bB) + (j - Q_s). Megatron-LM's BlendedDataset keeps the same
// invariant (each dataset's count within one sample of weight x index) with a
// sequential greedy; this closed form needs no pass over earlier samples, so a
// resumed run or one rank of many finds its samples directly.
//
// Within a source, its k-th sample is a window exactly as BatchLoader's
// single-stream order takes them (a seeded permutation of its windows per
// epoch, the window grid shifted in later epochs), with the source's own
// seed. A source that needs more samples than it has windows is upsampled
// (several epochs); one that needs fewer is capped (a fraction of an epoch).
// Everything is a pure function of (data, weights, seed, g): unchanged under
// data parallelism (g is the global sample index) and resume.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/data_config.h"

namespace keel {

// kMixtureBlock, kMinMixtureShare and kMaxMixtureWeight: config/data_config.h,
// where data.sources' weights are checked against them.

struct MixtureSource {
  std::string name;      // the data.sources entry
  int64_t begin = 0;     // its first token in the train split
  int64_t tokens = 0;    // its train tokens
  double weight = 0;     // as configured (not normalized)
};

class Mixture {
 public:
  // Throws DataError naming data.sources[i] for a source with fewer than
  // seq_len + 1 train tokens, a weight that is not a number in
  // (0, kMaxMixtureWeight], or a share below kMinMixtureShare.
  Mixture(std::vector<MixtureSource> sources, int64_t seq_len, uint64_t seed);

  // The source of global sample g, and that source's sample number.
  int source_of(int64_t g, int64_t* index_in_source = nullptr) const;
  // The split offset of sample g's window of seq_len + 1 tokens.
  int64_t window_start(int64_t g) const;
  // Samples source s has had among the first n (exact at block ends).
  int64_t count_before(int s, int64_t n) const;

  const std::vector<MixtureSource>& sources() const { return sources_; }
  double share(int s) const { return share_[s]; }      // normalized weight
  int64_t windows(int s) const { return windows_[s]; }  // distinct windows per epoch
  // Epochs of source s that `samples` global samples use: > 1 upsampled, < 1 capped.
  double epochs(int s, int64_t samples) const;
  // One line per source for the settings table and the run's records.
  std::vector<std::string> describe(int64_t samples) const;

 private:
  int64_t floor_cum(int s, int64_t n) const;  // floor(W_s * n), exact in integers

  std::vector<MixtureSource> sources_;
  std::vector<double> share_;
  std::vector<int64_t> cum_num_;  // W_s as a fraction cum_num_[s] / kDen, so rounding is the same everywhere
  std::vector<int64_t> windows_;
  std::vector<bool> shift_;
  int64_t seq_len_;
  uint64_t seed_;
};

}  // namespace keel
