// Linked into every test program that uses LibTorch (an object library, so
// the registration below is never dropped by the linker). LibTorch seeds its
// default CPU generator from a non-deterministic source, so a test drawing
// from it unseeded saw different numbers on every run (and a statistical
// bound failed once in CI). Every test now starts from the same state,
// whatever ran before it in the process.
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace keel_test {
namespace {

class SeedEachTest : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override { torch::manual_seed(20261130); }
};

const bool g_seed_each_test_registered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedEachTest);
  return true;
}();

}  // namespace
}  // namespace keel_test
