// keel::parallel_for (src/model/cpu_parallel.h): every item once, on more
// than one thread where LibTorch runs OpenMP (the reason it exists: keel's
// own at::parallel_for calls compile to a one-thread loop), nested calls
// inline, and a chunk's exception rethrown to the caller.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "model/cpu_parallel.h"

namespace {

struct Threads {
  explicit Threads(int n) : saved(at::get_num_threads()) { at::set_num_threads(n); }
  ~Threads() { at::set_num_threads(saved); }
  int saved;
};

TEST(CpuParallel, CoversEveryItemOnceOnSeveralThreads) {
  Threads threads(3);
  std::vector<std::atomic<int>> seen(1000);
  std::mutex m;
  std::set<std::thread::id> ids;
  keel::parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) {
    {
      std::lock_guard<std::mutex> lock(m);
      ids.insert(std::this_thread::get_id());
    }
    for (int64_t i = b; i < e; ++i) seen[i]++;
  });
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(seen[i].load(), 1) << "item " << i;
  if (keel::parallel_for_uses_openmp())
    EXPECT_EQ(ids.size(), 3u) << "3 threads asked for, the chunks ran on " << ids.size();
  else
    EXPECT_GE(ids.size(), 1u);
}

TEST(CpuParallel, ChunksAreContiguousAndRespectTheGrain) {
  Threads threads(4);
  std::mutex m;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  keel::parallel_for(10, 17, 4, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(m);
    chunks.emplace_back(b, e);
  });
  std::sort(chunks.begin(), chunks.end());
  int64_t next = 10;
  for (auto [b, e] : chunks) {
    EXPECT_EQ(b, next);
    EXPECT_GT(e, b);
    next = e;
  }
  EXPECT_EQ(next, 17);
  EXPECT_LE(chunks.size(), 2u) << "7 items with a grain of 4 make at most 2 chunks";
  keel::parallel_for(5, 5, 1, [&](int64_t, int64_t) { ADD_FAILURE() << "an empty range ran"; });
}

TEST(CpuParallel, NestedCallsRunInlineAndExceptionsReachTheCaller) {
  Threads threads(2);
  std::atomic<int> inner_calls{0};
  keel::parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    keel::parallel_for(0, 100, 1, [&](int64_t b, int64_t e) {
      EXPECT_EQ(b, 0);
      EXPECT_EQ(e, 100);
      inner_calls++;
    });
  });
  if (keel::parallel_for_uses_openmp()) EXPECT_EQ(inner_calls.load(), 2) << "one inline inner call per outer chunk";
  EXPECT_THROW(keel::parallel_for(0, 100, 1,
                                  [&](int64_t b, int64_t) {
                                    if (b == 0) throw std::runtime_error("chunk 0 failed");
                                  }),
               std::runtime_error);
}

}  // namespace
