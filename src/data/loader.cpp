#include "data/loader.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "data/permutation.h"
#include "util/error.h"
#include "util/hashing.h"

namespace keel {

BatchLoader::BatchLoader(const std::string& dir, const std::string& split, int64_t seq_len, int64_t global_batch,
                         int64_t rank, int64_t world_size, uint64_t seed, int64_t prefetch, bool verify,
                         const std::vector<std::pair<std::string, double>>& mixture, WindowAlign align)
    : manifest_(read_data_manifest(dir)),
      stream_(dir, manifest_, split, verify),
      seq_len_(seq_len),
      global_batch_(global_batch),
      rank_(rank),
      seed_(seed),
      align_(align),
      prefetch_(prefetch) {
  if (seq_len < 1 || global_batch < 1 || world_size < 1 || rank < 0 || rank >= world_size || prefetch < 0)
    throw std::invalid_argument("BatchLoader: need seq_len >= 1, global_batch >= 1, 0 <= rank < world_size, "
                                "prefetch >= 0");
  if (global_batch % world_size != 0)
    throw std::invalid_argument("BatchLoader: global batch " + std::to_string(global_batch) +
                                " is not divisible by world size " + std::to_string(world_size));
  rows_ = global_batch / world_size;
  const int64_t N = stream_.size(), T = seq_len;
  if (N < T + 1)
    throw DataError(dir + ": the " + split + " split has " + std::to_string(N) + " tokens, fewer than one window of " +
                    std::to_string(T + 1) + " (seq_len + 1); use a shorter seq_len or more text");
  val_windows_ = (N - 1) / T;
  windows_ = (N - T) / T;
  if (windows_ < 1) {  // shorter than 2T: a single window, never shifted
    windows_ = 1;
    shift_epochs_ = false;
  }
  if (!mixture.empty()) mixture_ = make_mixture(dir, split, mixture);
  if (align_ != WindowAlign::none) {
    if (split != "train") throw std::invalid_argument("BatchLoader: data.align applies to the train split");
    if (mixture_) throw std::invalid_argument("BatchLoader: data.align does not combine with a mixture");
    find_aligned_windows(dir);
  }
  if (prefetch_ > 0) thread_ = std::thread(&BatchLoader::prefetch_loop, this);
}

// Each data.sources entry's range of the train split, from the manifest's
// per-file train tokens (files are in entry order, their tokens contiguous).
std::unique_ptr<Mixture> BatchLoader::make_mixture(const std::string& dir, const std::string& split,
                                                   const std::vector<std::pair<std::string, double>>& mixture) const {
  if (split != "train") throw std::invalid_argument("BatchLoader: a mixture applies to the train split");
  std::vector<MixtureSource> sources(mixture.size());
  for (size_t i = 0; i < mixture.size(); ++i) {
    sources[i].name = mixture[i].first;
    sources[i].weight = mixture[i].second;
  }
  int64_t pos = 0;
  for (const auto& f : manifest_.sources) {
    if (f.train_tokens < 0 || f.entry < 0)
      throw DataError(dir + " was prepared before keel recorded each source's tokens, which a mixture needs; "
                            "re-run keel prepare --force");
    if (f.entry >= static_cast<int64_t>(sources.size()))
      throw DataError(dir + " was prepared from more data.sources entries than the " + std::to_string(sources.size()) +
                      " weighted ones; re-run keel prepare, or give every entry a weight");
    if (f.train_tokens > stream_.size() - pos)  // checked before adding: a hostile count cannot overflow
      throw DataError(dir + ": the sources' train tokens add up to more than the " + std::to_string(stream_.size()) +
                      " the train shards hold (a corrupt manifest); re-run keel prepare --force");
    auto& s = sources[f.entry];
    if (s.tokens == 0) s.begin = pos;
    else if (s.begin + s.tokens != pos)
      throw DataError(dir + ": the files of data.sources[" + std::to_string(f.entry) + "] are not contiguous in the manifest");
    s.tokens += f.train_tokens;
    pos += f.train_tokens;
  }
  if (pos != stream_.size())
    throw DataError(dir + ": the sources' train tokens add up to " + std::to_string(pos) + ", the train shards hold " +
                    std::to_string(stream_.size()) + " (a corrupt manifest); re-run keel prepare --force");
  return std::make_unique<Mixture>(std::move(sources), seq_len_, seed_);
}

void BatchLoader::find_aligned_windows(const std::string& dir) {
  const int64_t N = stream_.size(), T = seq_len_, eos = manifest_.tokenizer.eos_id;
  // Document boundaries in stream order: 0, then each opening EOS (eos) or the token after one (bos).
  std::vector<int64_t> bounds{0};
  std::vector<int64_t> chunk;
  constexpr int64_t kChunk = 1 << 20;
  for (int64_t begin = 0; begin < N; begin += kChunk) {
    const int64_t n = std::min(kChunk, N - begin);
    chunk.resize(static_cast<size_t>(n));
    stream_.read(begin, n, chunk.data());
    for (int64_t i = 0; i < n; ++i) {
      if (chunk[static_cast<size_t>(i)] != eos) continue;
      const int64_t b = begin + i + (align_ == WindowAlign::bos ? 1 : 0);
      if (b > bounds.back() && b < N) bounds.push_back(b);
    }
  }
  // The start of the document holding position p, and the next boundary after it (N at the end).
  auto doc_start = [&](int64_t p) { return *(std::upper_bound(bounds.begin(), bounds.end(), p) - 1); };
  auto next_bound = [&](int64_t p) {
    auto it = std::upper_bound(bounds.begin(), bounds.end(), p);
    return it == bounds.end() ? N : *it;
  };
  int64_t covered_end = 0, repeated = 0;
  for (int64_t s = 0; s + T + 1 <= N;) {
    aligned_starts_.push_back(s);
    if (s < covered_end) repeated += covered_end - s;
    covered_end = s + T;
    const int64_t e = s + T, d = doc_start(e);
    if (d == e || d <= s || next_bound(d) - d > T) s = e;  // a boundary, or a document that continues
    else s = d;                                              // a cut document starts the next window whole
  }
  if (aligned_starts_.empty())
    throw DataError(dir + ": the train split has no window of " + std::to_string(T + 1) + " tokens for data.align");
  windows_ = static_cast<int64_t>(aligned_starts_.size());
  shift_epochs_ = false;
  repeated_fraction_ = static_cast<double>(repeated) / static_cast<double>(windows_ * T);
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int64_t BatchLoader::window_start(int64_t g) const {
  if (mixture_) return mixture_->window_start(g);
  const int64_t epoch = g / windows_, k = g % windows_;
  const uint64_t epoch_key = mix64(seed_ ^ mix64(static_cast<uint64_t>(epoch) + 0x5eed));
  if (!aligned_starts_.empty())
    return aligned_starts_[static_cast<size_t>(Permutation(windows_, epoch_key)(static_cast<uint64_t>(k)))];
  const int64_t offset = (epoch == 0 || !shift_epochs_) ? 0 : static_cast<int64_t>(mix64(epoch_key) % seq_len_);
  return offset + static_cast<int64_t>(Permutation(windows_, epoch_key)(static_cast<uint64_t>(k))) * seq_len_;
}

std::vector<int64_t> BatchLoader::window_starts(int64_t step) const {
  if (step < 0) throw std::invalid_argument("BatchLoader: negative step");
  std::vector<int64_t> starts(rows_);
  for (int64_t j = 0; j < rows_; ++j) starts[j] = window_start(step * global_batch_ + rank_ * rows_ + j);
  return starts;
}

std::vector<int64_t> BatchLoader::val_window_starts(int64_t i) const {
  if (i < 0) throw std::invalid_argument("BatchLoader: negative validation batch index");
  std::vector<int64_t> starts(rows_);
  for (int64_t j = 0; j < rows_; ++j) starts[j] = ((i * global_batch_ + rank_ * rows_ + j) % val_windows_) * seq_len_;
  return starts;
}

Batch BatchLoader::assemble(const std::vector<int64_t>& starts) const {
  const int64_t T = seq_len_;
  const auto opts = torch::TensorOptions().dtype(torch::kInt64).pinned_memory(pinned_.load());
  Batch b{torch::empty({rows_, T}, opts), torch::empty({rows_, T}, opts)};
  int64_t* in = b.inputs.data_ptr<int64_t>();
  int64_t* tg = b.targets.data_ptr<int64_t>();
  for (int64_t j = 0; j < rows_; ++j) {
    stream_.read(starts[j], T, in + j * T);
    stream_.read(starts[j] + 1, T, tg + j * T);
  }
  return b;
}

Batch BatchLoader::make_batch(int64_t step) const { return assemble(window_starts(step)); }
Batch BatchLoader::val_batch(int64_t i) const { return assemble(val_window_starts(i)); }

double BatchLoader::epochs_at(int64_t step) const {
  return static_cast<double>(step) * global_batch_ / static_cast<double>(windows_);
}

Batch BatchLoader::get(int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  Batch batch;
  bool have = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (queued_.count(step) || in_progress_ == step || ready_.count(step)) {
      cv_.wait(lock, [&] { return ready_.count(step) > 0 || failed_.count(step) > 0; });
      if (ready_.count(step)) {
        batch = std::move(ready_[step]);
        ready_.erase(step);
        have = true;
      }
      failed_.erase(step);  // rebuilt below, on this thread, where its exception reaches the caller
    }
    // Older steps will not be asked for in a run that goes forward.
    ready_.erase(ready_.begin(), ready_.lower_bound(step));
    for (auto it = queued_.begin(); it != queued_.end() && *it < step;) it = queued_.erase(it);
  }
  if (!have) batch = make_batch(step);
  last_wait_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  total_wait_ms_ += last_wait_ms_;
  if (prefetch_ > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t s = step + 1; s <= step + prefetch_; ++s)
      if (!ready_.count(s) && in_progress_ != s) queued_.insert(s);
    cv_.notify_all();
  }
  return batch;
}

void BatchLoader::prefetch_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queued_.empty(); });
    if (stop_) return;
    int64_t step = *queued_.begin();
    queued_.erase(queued_.begin());
    in_progress_ = step;
    lock.unlock();
    Batch b;
    bool ok = true;
    try {
      b = make_batch(step);  // reads the mapped shards; page faults happen here, not in the training loop
    } catch (...) {
      ok = false;
    }
    lock.lock();
    in_progress_ = -1;
    if (ok) ready_[step] = std::move(b);
    else failed_.insert(step);
    cv_.notify_all();
  }
}

}  // namespace keel
