// BatchLoader: (inputs, targets) batches from a prepared data directory.
//
// A split is one token stream (token_stream.h). A sample is a window of T+1
// tokens; inputs are its first T, targets its last T.
//
// Training order (get): windows start at o_e + k*T for k in [0, n), with
// n = floor((N - T) / T) so that every offset o_e in [0, T) fits (if the
// split is shorter than 2T, n = 1 and o_e = 0). Epoch 0 uses o_0 = 0; later
// epochs shift the window grid by a seeded offset so a model trained for
// several epochs does not see the same context boundaries every time.
// Global sample g = step * global_batch + j lives in epoch e = g / n and is
// window perm_e(g % n), perm_e a seeded permutation (permutation.h). Rank r
// of W gets rows [r*B/W, (r+1)*B/W) of the global batch. So the batch is a
// pure function of (data, seed, step, rank, world size): a resumed run sees
// exactly the batches it would have seen, ranks are disjoint, and together
// they form the single-process global batch.
//
// Aligned windows (data.align: eos | bos, train split only): the grid is
// replaced by windows that start at document boundaries, found once by
// scanning the split: an opening EOS (eos) or the token after it (bos), and
// the split's first token. Window k+1 starts where window k's T inputs end
// (e = s + T) when e is a boundary or window k held one document; when a
// document that began inside window k is cut at e, window k+1 starts at that
// document again if it fits in a window (its head is then seen twice, the
// price of every document being seen from its start and no token dropped),
// and at e otherwise (a document longer than a window continues). The
// windows are permuted per epoch as on the grid (no epoch offset: the
// boundaries are the data's), so the batch stays a pure function of
// (data, seed, step, rank, world size).
//
// Validation order (val_batch): window k starts at k*T, k in
// [0, floor((N-1)/T)); batch i holds windows i*B + j (mod the window count),
// the same for every run and seed.
//
// Mixture (data.sources with weights, mixture.h): training sample g comes
// from the window Mixture::window_start(g) instead, the same pure function of
// (data, weights, seed, g); validation is unchanged.
//
// A background thread builds the next `prefetch` batches after each get(),
// so a training loop that asks for steps in order finds them ready.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "config/data_config.h"
#include "data/manifest.h"
#include "data/mixture.h"
#include "data/token_stream.h"

namespace keel {

struct Batch {
  torch::Tensor inputs;   // int64 [rows, T], CPU
  torch::Tensor targets;  // int64 [rows, T], CPU: inputs shifted by one
};

class BatchLoader {
 public:
  // Opens data_dir/manifest.json and the shards of `split` ("train" or
  // "val"); with `verify`, reads every shard once (checksum, ids < vocab).
  // Throws DataError for a bad directory or a split shorter than T+1 tokens,
  // std::invalid_argument for inconsistent arguments.
  // `mixture`: (data.sources entry, weight) per entry, or empty for the
  // single-stream order; the train split only.
  BatchLoader(const std::string& data_dir, const std::string& split, int64_t seq_len, int64_t global_batch,
              int64_t rank, int64_t world_size, uint64_t seed, int64_t prefetch, bool verify = true,
              const std::vector<std::pair<std::string, double>>& mixture = {},
              WindowAlign align = WindowAlign::none);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // This rank's rows of global training batch `step` (a pure function of the
  // constructor arguments and step), from the prefetch thread when ready.
  Batch get(int64_t step);
  // The same, always computed on the calling thread.
  Batch make_batch(int64_t step) const;
  // This rank's rows of the i-th fixed sequential batch (for validation).
  Batch val_batch(int64_t i) const;

  // Stream offsets of this rank's windows in batch `step` (for tests/debugging).
  std::vector<int64_t> window_starts(int64_t step) const;
  std::vector<int64_t> val_window_starts(int64_t i) const;

  int64_t rows() const { return rows_; }                  // global_batch / world_size
  int64_t seq_len() const { return seq_len_; }
  int64_t tokens() const { return stream_.size(); }       // tokens in this split
  int64_t windows_per_epoch() const { return windows_; }  // training order
  int64_t val_windows() const { return val_windows_; }    // distinct sequential windows
  double epochs_at(int64_t step) const;                   // epochs consumed after `step` steps
  WindowAlign align() const { return align_; }
  // Aligned windows: the share of an epoch's input tokens that another
  // window also holds (the heads of cut documents seen again); 0 on the grid.
  double repeated_fraction() const { return repeated_fraction_; }
  int64_t vocab_size() const { return manifest_.tokenizer.vocab_size; }
  int32_t eos_id() const { return manifest_.tokenizer.eos_id; }
  const DataManifest& manifest() const { return manifest_; }
  const Mixture* mixture() const { return mixture_.get(); }  // null without weights

  // Build batches in pinned (page-locked) host memory from now on, so that
  // copies to a CUDA device are asynchronous. Needs a CUDA runtime.
  void set_pinned(bool pinned) { pinned_ = pinned; }
  bool pinned() const { return pinned_; }

  // Milliseconds the last get() blocked the caller (0 when prefetched in
  // time), and the sum over all get() calls.
  double last_wait_ms() const { return last_wait_ms_; }
  double total_wait_ms() const { return total_wait_ms_; }

 private:
  int64_t window_start(int64_t sample) const;
  std::unique_ptr<Mixture> make_mixture(const std::string& dir, const std::string& split,
                                        const std::vector<std::pair<std::string, double>>& mixture) const;
  Batch assemble(const std::vector<int64_t>& starts) const;
  void prefetch_loop();

  DataManifest manifest_;
  TokenStream stream_;
  int64_t seq_len_, global_batch_, rank_, rows_;
  uint64_t seed_;
  int64_t windows_ = 0, val_windows_ = 0;
  bool shift_epochs_ = true;
  WindowAlign align_ = WindowAlign::none;
  std::vector<int64_t> aligned_starts_;  // data.align: the windows' starts, in stream order
  double repeated_fraction_ = 0;
  void find_aligned_windows(const std::string& dir);
  std::unique_ptr<Mixture> mixture_;
  std::atomic<bool> pinned_{false};

  int64_t prefetch_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<int64_t> queued_;          // steps requested but not started
  int64_t in_progress_ = -1;          // step being built, or -1
  std::map<int64_t, Batch> ready_;
  std::set<int64_t> failed_;          // built with an exception; get() rebuilds them to rethrow
  bool stop_ = false;
  double last_wait_ms_ = 0, total_wait_ms_ = 0;
};

}  // namespace keel
