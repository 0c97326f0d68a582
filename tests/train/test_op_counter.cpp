// train/op_counter.h: leaf operators that do work are counted as kernels,
// views and allocations are not, a composite counts as its leaves, the
// backward (autograd's thread or not) and keel's fused kernels are seen, and
// counting stops with the counter.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <thread>

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

// A composite's own work (here a 30 ms wait around one add) is its self time,
// not its child's and not lost: what CPU flash attention's backward does in
// its own loops after zero-filling its gradients.
TEST(OpCounter, ACompositesOwnTimeIsKeptApartFromItsChildren) {
  auto s = torch::randn({4});
  keel::OpCounts c;
  {
    keel::OpCounter counter;
    {
      RECORD_FUNCTION("test::composite", std::vector<c10::IValue>());
      s + s;
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    c = counter.counts();
  }
  EXPECT_EQ(count_of(c, "aten::add"), 1);
  EXPECT_EQ(c.by_name.count("test::composite"), 0u) << "a composite is not a kernel";
  ASSERT_EQ(c.composites_by_name.count("test::composite"), 1u);
  EXPECT_EQ(c.composites_by_name.at("test::composite"), 1);
  EXPECT_GE(c.self_ms_by_name.at("test::composite"), 29.0);
  EXPECT_LT(c.ms_by_name.at("aten::add"), 29.0) << "the wait is the composite's, not its child's";
}

// The profile: a kernel's time is its own, the big matmul takes longer than
// a tiny add, and a composite's time is not counted twice (its leaves' only).
TEST(OpCounter, TimesKernelsAndGroupsThemByFamily) {
  auto a = torch::randn({384, 384}), b = torch::randn({384, 384}), s = torch::randn({4});
  keel::OpCounts c;
  {
    keel::OpCounter counter;
    for (int i = 0; i < 3; ++i) torch::matmul(a, b);  // matmul -> mm
    s + s;
    c = counter.counts();
  }
  ASSERT_EQ(c.ms_by_name.count("aten::mm"), 1u);
  ASSERT_EQ(c.ms_by_name.count("aten::add"), 1u);
  EXPECT_EQ(c.ms_by_name.count("aten::matmul"), 0u) << "a composite's time is its leaves'";
  EXPECT_GT(c.ms_by_name.at("aten::mm"), 0.0);
  EXPECT_GT(c.ms_by_name.at("aten::mm"), 10 * c.ms_by_name.at("aten::add"));  // 3 x 113 MFLOP against 4 adds
  EXPECT_EQ(c.ms_by_name.size(), c.by_name.size());

  EXPECT_EQ(keel::op_family("aten::addmm"), "matmul");
  EXPECT_EQ(keel::op_family("mkldnn::_linear_pointwise"), "matmul");
  EXPECT_EQ(keel::op_family("aten::_scaled_dot_product_flash_attention_for_cpu_backward"), "attention");
  EXPECT_EQ(keel::op_family("keel::blockwise_attention"), "attention");
  EXPECT_EQ(keel::op_family("keel::row_norm_backward"), "norm");
  EXPECT_EQ(keel::op_family("aten::native_layer_norm"), "norm");
  EXPECT_EQ(keel::op_family("aten::linalg_vector_norm"), "reduction");
  EXPECT_EQ(keel::op_family("keel::rope"), "rope");
  EXPECT_EQ(keel::op_family("aten::_log_softmax_backward_data"), "softmax+loss");
  EXPECT_EQ(keel::op_family("aten::embedding_dense_backward"), "embedding");
  EXPECT_EQ(keel::op_family("aten::_foreach_addcdiv_"), "optimizer");
  EXPECT_EQ(keel::op_family("aten::copy_"), "copy+fill");
  EXPECT_EQ(keel::op_family("aten::sum"), "reduction");
  EXPECT_EQ(keel::op_family("aten::gelu_backward"), "elementwise");
  EXPECT_EQ(keel::op_family("aten::mul"), "elementwise");
}
