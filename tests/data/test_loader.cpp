// The batch loader: batches are a pure function of (data, seed, step, rank,
// world size); ranks split the global batch; epochs cover every window;
// validation batches are fixed; prefetching hides the loading.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <set>
#include <thread>

#include "data/loader.h"
#include "data/permutation.h"
#include "data/token_stream.h"
#include "test_data_util.h"
#include "util/error.h"

using namespace keel;
using namespace keel_test;

namespace {

constexpr int64_t T = 16;

// One prepared directory for the whole program (about 30k tokens in 1024-token shards).
const std::string& data_dir() {
  static std::string dir = [] {
    std::string root = make_temp_dir("loader");
    write_text(root + "/a.txt", join_documents(make_documents(600, 7)));
    Config c = tiny_config(root + "/data", {root + "/a.txt"});
    prepare_quietly(c);
    return c.data.dir;
  }();
  return dir;
}

std::vector<int64_t> stream_tokens(const std::string& split) {
  DataManifest m = read_data_manifest(data_dir());
  TokenStream s(data_dir(), m, split, false);
  std::vector<int64_t> v(s.size());
  s.read(0, s.size(), v.data());
  return v;
}

bool same(const Batch& a, const Batch& b) { return a.inputs.equal(b.inputs) && a.targets.equal(b.targets); }

// A fingerprint of a batch, to compare across processes.
uint64_t batch_hash(const Batch& b) {
  uint64_t h = 1469598103934665603ULL;
  for (const auto& t : {b.inputs, b.targets}) {
    const int64_t* p = t.data_ptr<int64_t>();
    for (int64_t i = 0; i < t.numel(); ++i) h = (h ^ static_cast<uint64_t>(p[i])) * 1099511628211ULL;
  }
  return h;
}

}  // namespace

TEST(Permutation, IsABijectionForManySizes) {
  for (uint64_t n : {1ull, 2ull, 3ull, 5ull, 16ull, 17ull, 1000ull, 4097ull, 65536ull}) {
    Permutation p(n, 42 + n);
    std::vector<char> seen(n, 0);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t v = p(i);
      ASSERT_LT(v, n);
      ASSERT_FALSE(seen[v]) << "n=" << n << " repeats " << v;
      seen[v] = 1;
    }
  }
  Permutation a(1000, 1), b(1000, 2);
  int same_place = 0;
  for (uint64_t i = 0; i < 1000; ++i) same_place += a(i) == b(i);
  EXPECT_LT(same_place, 20);  // different keys, (nearly) unrelated orders
}

TEST(Loader, TargetsAreInputsShiftedByOne) {
  BatchLoader L(data_dir(), "train", T, 8, 0, 1, 1234, 0);
  auto stream = stream_tokens("train");
  EXPECT_EQ(L.tokens(), static_cast<int64_t>(stream.size()));
  Batch b = L.make_batch(3);
  ASSERT_EQ(b.inputs.sizes(), (std::vector<int64_t>{8, T}));
  ASSERT_EQ(b.targets.sizes(), (std::vector<int64_t>{8, T}));
  EXPECT_EQ(b.inputs.dtype(), torch::kInt64);
  auto starts = L.window_starts(3);
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t t = 0; t < T; ++t) {
      ASSERT_EQ(b.inputs[r][t].item<int64_t>(), stream[starts[r] + t]);
      ASSERT_EQ(b.targets[r][t].item<int64_t>(), stream[starts[r] + t + 1]);
    }
  EXPECT_LT(b.inputs.max().item<int64_t>(), L.vocab_size());
}

TEST(Loader, SameArgumentsSameBatches) {
  BatchLoader a(data_dir(), "train", T, 8, 0, 1, 99, 2), b(data_dir(), "train", T, 8, 0, 1, 99, 0);
  for (int64_t s = 0; s < 6; ++s) EXPECT_TRUE(same(a.get(s), b.get(s))) << "step " << s;
  // Out of order and repeated requests: still a pure function of the step.
  EXPECT_TRUE(same(a.get(2), b.make_batch(2)));
  EXPECT_TRUE(same(a.get(40), b.make_batch(40)));
  BatchLoader c(data_dir(), "train", T, 8, 0, 1, 100, 0);
  EXPECT_FALSE(same(c.get(0), b.get(0)));
}

TEST(Loader, SameBatchInAnotherProcess) {
  const char* dump = std::getenv("KEEL_LOADER_CHILD");
  if (dump) GTEST_SKIP() << "child mode";
  std::string out = make_temp_dir("loader_child") + "/hash";
  std::string cmd = "KEEL_LOADER_CHILD=" + out + " KEEL_LOADER_DIR=" + data_dir() +
                    " /proc/" + std::to_string(::getpid()) + "/exe --gtest_filter=LoaderChild.WriteHash > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  BatchLoader L(data_dir(), "train", T, 8, 1, 2, 77, 0);
  EXPECT_EQ(read_bytes(out), std::to_string(batch_hash(L.make_batch(5))));
}

TEST(LoaderChild, WriteHash) {  // runs only when re-executed by SameBatchInAnotherProcess
  const char* out = std::getenv("KEEL_LOADER_CHILD");
  if (!out) GTEST_SKIP() << "only in the child process";
  BatchLoader L(std::getenv("KEEL_LOADER_DIR"), "train", T, 8, 1, 2, 77, 1);
  write_text(out, std::to_string(batch_hash(L.get(5))));
}

TEST(Loader, RanksAreDisjointAndTogetherFormTheGlobalBatch) {
  const int64_t B = 12;
  BatchLoader single(data_dir(), "train", T, B, 0, 1, 5, 0);
  for (int64_t W : {2, 3, 4}) {
    for (int64_t step : {0, 7, 123}) {
      std::vector<torch::Tensor> parts;
      std::set<int64_t> starts;
      for (int64_t r = 0; r < W; ++r) {
        BatchLoader rank(data_dir(), "train", T, B, r, W, 5, 0);
        EXPECT_EQ(rank.rows(), B / W);
        parts.push_back(rank.make_batch(step).inputs);
        for (int64_t s : rank.window_starts(step)) EXPECT_TRUE(starts.insert(s).second) << "rank overlap";
      }
      EXPECT_TRUE(torch::cat(parts).equal(single.make_batch(step).inputs)) << "W=" << W << " step=" << step;
    }
  }
  EXPECT_THROW(BatchLoader(data_dir(), "train", T, 10, 0, 4, 5, 0), std::invalid_argument);
  EXPECT_THROW(BatchLoader(data_dir(), "train", T, 8, 4, 4, 5, 0), std::invalid_argument);
}

TEST(Loader, EachEpochVisitsEveryWindowOnce) {
  const int64_t B = 7;
  BatchLoader L(data_dir(), "train", T, B, 0, 1, 3, 0);
  const int64_t n = L.windows_per_epoch();
  EXPECT_EQ(n, (L.tokens() - T) / T);
  std::vector<int64_t> all;
  for (int64_t step = 0; static_cast<int64_t>(all.size()) < 3 * n; ++step)
    for (int64_t s : L.window_starts(step)) all.push_back(s);
  for (int64_t e = 0; e < 3; ++e) {
    std::set<int64_t> epoch(all.begin() + e * n, all.begin() + (e + 1) * n);
    EXPECT_EQ(static_cast<int64_t>(epoch.size()), n) << "epoch " << e << " repeats a window";
    const int64_t offset = *epoch.begin() % T;
    if (e == 0) {
      EXPECT_EQ(offset, 0);
    }
    for (int64_t s : epoch) {
      EXPECT_EQ(s % T, offset) << "one grid per epoch";
      EXPECT_LE(s + T + 1, L.tokens());
    }
  }
  EXPECT_NEAR(L.epochs_at(n), B, 1e-9);
}

TEST(Loader, ValidationBatchesAreFixedAndSequential) {
  BatchLoader a(data_dir(), "val", T, 4, 0, 1, 1, 0), b(data_dir(), "val", T, 4, 0, 1, 999, 0);
  EXPECT_EQ(a.val_windows(), (a.tokens() - 1) / T);
  for (int64_t i = 0; i < 3; ++i) EXPECT_TRUE(same(a.val_batch(i), b.val_batch(i)));
  EXPECT_EQ(a.val_window_starts(1), (std::vector<int64_t>{4 * T, 5 * T, 6 * T, 7 * T}));
  auto val = stream_tokens("val");
  EXPECT_EQ(a.val_batch(0).inputs[0][0].item<int64_t>(), val[0]);
  // Wraps around instead of running off the end.
  int64_t past = a.val_windows() / 4 + 3;
  for (int64_t s : a.val_window_starts(past)) EXPECT_LE(s + T + 1, a.tokens());
  BatchLoader rank1(data_dir(), "val", T, 4, 1, 2, 1, 0);
  EXPECT_EQ(rank1.val_window_starts(1), (std::vector<int64_t>{6 * T, 7 * T}));
}

TEST(Loader, PrefetchHidesLoadingInSteadyState) {
  BatchLoader L(data_dir(), "train", T, 64, 0, 1, 11, 2);
  std::vector<double> waits;
  for (int64_t step = 0; step < 60; ++step) {
    Batch b = L.get(step);
    waits.push_back(L.last_wait_ms());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the "training step"
  }
  std::sort(waits.begin() + 1, waits.end());
  double median = waits[30];
  std::printf("[ figures  ] loader wait per step: first %.3f ms, median %.4f ms, max %.3f ms (B=64, T=%lld)\n",
              waits[0], median, waits.back(), static_cast<long long>(T));
  EXPECT_LT(median, 0.5);
}

TEST(Loader, BadDirectoriesAndShortSplitsAreDataErrors) {
  EXPECT_THROW(BatchLoader(data_dir() + "/nope", "train", T, 4, 0, 1, 1, 0), DataError);
  std::string msg;
  try {
    BatchLoader L(data_dir(), "val", 100000, 4, 0, 1, 1, 0);
  } catch (const DataError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("fewer than one window"), std::string::npos) << msg;
  // A corrupted shard is caught when the loader opens it (verify = true).
  std::string root = make_temp_dir("loader_bad");
  write_text(root + "/a.txt", join_documents(make_documents(100, 8)));
  Config c = tiny_config(root + "/data", {root + "/a.txt"});
  DataManifest m = prepare_quietly(c).manifest;
  {
    std::fstream f(c.data.dir + "/" + m.shards[0].file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x55');
  }
  msg.clear();
  try {
    BatchLoader L(c.data.dir, "train", T, 4, 0, 1, 1, 0, /*verify=*/true);
  } catch (const DataError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find(m.shards[0].file + ": checksum mismatch"), std::string::npos) << msg;
}

// data.align: every window starts at a document boundary (an opening EOS,
// or the token after it) or continues a document longer than a window from
// the window before; together the windows hold every token of the split up
// to the last window's end; the repeated share is what the windows overlap;
// the order stays a pure function of (data, seed, step, rank, world size).
TEST(Loader, AlignedWindowsStartAtDocumentsAndDropNoToken) {
  const auto tokens = stream_tokens("train");
  const int64_t eos = read_data_manifest(data_dir()).tokenizer.eos_id, N = static_cast<int64_t>(tokens.size());
  for (WindowAlign align : {WindowAlign::eos, WindowAlign::bos})
    for (int64_t t : {int64_t{16}, int64_t{64}}) {
      SCOPED_TRACE(name_of(align) + " T " + std::to_string(t));
      auto boundary = [&](int64_t s) {
        return s == 0 || (align == WindowAlign::eos ? tokens[s] == eos : tokens[s - 1] == eos);
      };
      const int64_t B = 4;
      BatchLoader L(data_dir(), "train", t, B, 0, 1, 3, 0, true, {}, align);
      const int64_t n = L.windows_per_epoch();
      ASSERT_GT(n, 10);
      std::set<int64_t> starts;
      for (int64_t step = 0; static_cast<int64_t>(starts.size()) < n && step < n; ++step)
        for (int64_t s : L.window_starts(step)) starts.insert(s);
      ASSERT_EQ(static_cast<int64_t>(starts.size()), n) << "an epoch repeats a window";
      int64_t at_boundary = 0, covered_to = 0, overlap = 0;
      for (int64_t s : starts) {
        ASSERT_LE(s + t + 1, N);
        if (boundary(s)) {
          ++at_boundary;
        } else {  // a document longer than a window, continued from the window before
          EXPECT_TRUE(starts.count(s - t)) << s;
          int64_t d = s, next = s + 1;
          while (!boundary(d)) --d;
          while (next < N && !boundary(next)) ++next;
          EXPECT_GT(next - d, t) << "window " << s << " continues a document [" << d << ", " << next << ") that fits";
        }
        EXPECT_LE(s, covered_to) << "tokens [" << covered_to << ", " << s << ") are in no window";
        overlap += std::max<int64_t>(0, covered_to - s);
        covered_to = std::max(covered_to, s + t);
      }
      EXPECT_GT(at_boundary, 0);
      // Every document that fits in a window lies wholly in one (seen from its start).
      std::vector<int64_t> bounds;
      for (int64_t p = 0; p < covered_to; ++p)
        if (boundary(p)) bounds.push_back(p);
      int64_t whole = 0;
      for (size_t i = 0; i + 1 < bounds.size(); ++i) {
        const int64_t d = bounds[i], next = bounds[i + 1];
        if (next - d > t) continue;
        auto it = starts.upper_bound(d);  // the last window starting at or before d
        ASSERT_NE(it, starts.begin());
        EXPECT_LE(next, *std::prev(it) + t) << "document [" << d << ", " << next << ") is cut in every window";
        ++whole;
      }
      if (t == 64) EXPECT_GT(whole, 10);
      EXPECT_GT(covered_to + t + 1, N) << "the windows stop early";
      EXPECT_NEAR(L.repeated_fraction(), static_cast<double>(overlap) / static_cast<double>(n * t), 1e-12);
      // The inputs of a window that starts at an opening EOS begin with it.
      if (align == WindowAlign::eos)
        for (int64_t s : L.window_starts(0))
          if (s > 0 && boundary(s)) {
            EXPECT_EQ(tokens[s], eos);
          }
      // Pure function of the arguments, split across ranks like the grid.
      BatchLoader again(data_dir(), "train", t, B, 0, 1, 3, 0, true, {}, align);
      EXPECT_TRUE(same(L.make_batch(5), again.make_batch(5)));
      std::vector<torch::Tensor> parts;
      for (int64_t r = 0; r < 2; ++r)
        parts.push_back(BatchLoader(data_dir(), "train", t, B, r, 2, 3, 0, true, {}, align).make_batch(9).inputs);
      EXPECT_TRUE(torch::cat(parts).equal(L.make_batch(9).inputs));
      // Another seed, another order of the same windows.
      BatchLoader other(data_dir(), "train", t, B, 0, 1, 4, 0, true, {}, align);
      EXPECT_NE(other.window_starts(0), L.window_starts(0));
    }
  EXPECT_THROW(BatchLoader(data_dir(), "val", T, 4, 0, 1, 3, 0, true, {}, WindowAlign::eos), std::invalid_argument);
}
