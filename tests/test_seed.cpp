// Linked into every test program that uses LibTorch (an object library, so
// the registration below is never dropped by the linker). LibTorch seeds its
// default CPU generator from a non-deterministic source, so a test drawing
// from it unseeded saw different numbers on every run (and a statistical
// bound failed once in CI). Every test now starts from the same state,
// whatever ran before it in the process.
//
// It also turns off c10d's flight recorder (a process-wide trace of
// collectives) before any process group exists: tests that run two ranks as
// two threads of one process have two Gloo groups record into it at once,
// and its bookkeeping is not safe for that (a crash in
// FlightRecorder::recordWithResetEnabled, about one run in four of
// test_grad_sync). A real rank is one process with one group.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>

namespace keel_test {
namespace {

class SeedEachTest : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override { torch::manual_seed(20261130); }
};

const bool g_seed_each_test_registered = [] {
  setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/1);
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedEachTest);
  return true;
}();

}  // namespace
}  // namespace keel_test
