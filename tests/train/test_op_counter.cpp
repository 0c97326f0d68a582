// train/op_counter.h: leaf operators that do work are counted as kernels,
// views and allocations are not, a composite counts as its leaves, the
// backward (autograd's thread or not) and keel's fused kernels are seen, and
// counting stops with the counter.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/fused_ops.h"
#include "model/rope.h"
#include "train/op_counter.h"

namespace {

int64_t count_of(const keel::OpCounts& c, const std::string& name) {
  auto it = c.by_name.find(name);
  return it == c.by_name.end() ? 0 : it->second;
}

TEST(OpCounter, CountsWorkNotViews) {
  auto a = torch::randn({4, 5}), b = torch::randn({4, 5});
  keel::OpCounts c;
  {
    keel::OpCounter counter;
    auto s = a + b;
    auto v = s.view({-1});
    auto t = s.t();
    auto e = torch::empty({3});
    c = counter.counts();
  }
  EXPECT_EQ(c.kernels, 1);
  EXPECT_EQ(count_of(c, "aten::add"), 1);
  EXPECT_GE(c.dispatches, 4);
  EXPECT_TRUE(keel::is_metadata_op("aten::view"));
  EXPECT_FALSE(keel::is_metadata_op("aten::add"));
}

TEST(OpCounter, ACompositeCountsAsItsLeaves) {
  auto x = torch::randn({6, 8}), w = torch::randn({3, 8});
  keel::OpCounts c;
  {
    keel::OpCounter counter;
    torch::nn::functional::linear(x, w);  // linear -> t (view) + mm
    c = counter.counts();
  }
  std::string seen;
  for (const auto& [name, n] : c.by_name) seen += name + " " + std::to_string(n) + "; ";
  EXPECT_EQ(c.kernels, 1) << seen;
  EXPECT_EQ(count_of(c, "aten::linear"), 0);
  EXPECT_EQ(count_of(c, "aten::mm") + count_of(c, "aten::addmm"), 1);
}

TEST(OpCounter, SeesTheBackwardAndKeelsFusedKernels) {
  auto tables = keel::make_rope_tables(4, 8, 10000.0, torch::kCPU);
  auto x = torch::randn({1, 4, 2, 8}).requires_grad_(true);
  keel::OpCounts c;
  {
    keel::OpCounter counter;
    auto y = keel::fused_cpu_rope(x, tables.cos, tables.sin);
    ASSERT_TRUE(y.defined());  // the kernel applies to a CPU fp32 tensor
    (y * 2).sum().backward();
    c = counter.counts();
  }
  EXPECT_EQ(count_of(c, "keel::rope"), 1);
  EXPECT_EQ(count_of(c, "keel::rope_backward"), 1);
  EXPECT_GE(count_of(c, "aten::mul"), 2);  // forward, and its backward
}

TEST(OpCounter, OneAtATimeAndNothingCountedAfterwards) {
  auto a = torch::randn({3});
  {
    keel::OpCounter counter;
    EXPECT_THROW(keel::OpCounter second, std::logic_error);
    a.exp();
    EXPECT_EQ(counter.counts().kernels, 1);
  }
  a.exp();  // no counter alive: nothing to count into, nothing crashes
  keel::OpCounter fresh(/*record_shapes=*/true);
  EXPECT_EQ(fresh.counts().kernels, 0);
  a.exp();
  auto c = fresh.counts();
  EXPECT_EQ(c.kernels, 1);
  ASSERT_EQ(c.events.size(), 1u);
  EXPECT_EQ(c.events[0].first, "aten::exp");
  EXPECT_EQ(c.events[0].second, std::vector<int64_t>{3});
}

}  // namespace
