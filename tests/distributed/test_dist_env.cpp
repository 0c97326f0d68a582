// The torchrun / SLURM environment, read into a DistEnv: values, defaults,
// and the errors for inconsistent variables.
#include <gtest/gtest.h>

#include <algorithm>

#include "distributed/dist_env.h"
#include "distributed/process_group.h"
#include "train/device.h"

using keel::DistEnv;
using keel::DistError;
using keel::parse_dist_env;

TEST(DistEnv, NoVariablesIsAJobOfOne) {
  DistEnv d = parse_dist_env({});
  EXPECT_EQ(d.rank, 0);
  EXPECT_EQ(d.world_size, 1);
  EXPECT_FALSE(d.distributed());
  EXPECT_EQ(d.source, "single");
}

TEST(DistEnv, TorchrunVariables) {
  DistEnv d = parse_dist_env({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                              {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "1234"}});
  EXPECT_EQ(d.source, "torchrun");
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(d.world_size, 8);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 2);
  EXPECT_EQ(d.master_addr, "node0");
  EXPECT_EQ(d.master_port, 1234);
  EXPECT_TRUE(d.distributed());
}

TEST(DistEnv, DefaultsPortAndLocalValues) {
  DistEnv d = parse_dist_env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}});
  EXPECT_EQ(d.master_port, 29500);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 2);
}

TEST(DistEnv, TorchrunWorldOfOneIsAProcessGroupOfOne) {
  DistEnv d = parse_dist_env({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_TRUE(d.distributed());  // torchrun --nproc-per-node 1: the NCCL/Gloo path with one rank
  EXPECT_EQ(d.master_addr, "127.0.0.1");
}

void expect_error(const keel::EnvMap& env, const std::string& fragment) {
  try {
    parse_dist_env(env);
    FAIL() << "no error; expected one mentioning " << fragment;
  } catch (const DistError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(DistEnv, Errors) {
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "MASTER_ADDR");
  expect_error({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "x"}}, "not below the world size");
  expect_error({{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "x"}}, "RANK='x' is not an integer");
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "x"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT");
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE=0 must be at least 1");
  expect_error({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "x"}}, "RANK is not set");
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "x"}, {"LOCAL_RANK", "2"},
                {"LOCAL_WORLD_SIZE", "2"}},
               "local rank 2");
}

TEST(DistEnv, Slurm) {
  DistEnv d = parse_dist_env({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                              {"SLURM_NTASKS_PER_NODE", "4(x2)"}, {"SLURM_JOB_NODELIST", "gpu[03-04]"}});
  EXPECT_EQ(d.source, "slurm");
  EXPECT_EQ(d.rank, 5);
  EXPECT_EQ(d.world_size, 8);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 4);
  EXPECT_EQ(d.master_addr, "gpu03");
  // torchrun's variables win over SLURM's (torchrun inside an allocation).
  DistEnv t = parse_dist_env({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"RANK", "0"}, {"WORLD_SIZE", "2"},
                              {"MASTER_ADDR", "a"}});
  EXPECT_EQ(t.source, "torchrun");
  EXPECT_EQ(t.world_size, 2);
  // A one-task SLURM job is a job of one.
  EXPECT_FALSE(parse_dist_env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}).distributed());
}

TEST(DistEnv, NodeLists) {
  EXPECT_EQ(keel::first_host_of_nodelist("node7"), "node7");
  EXPECT_EQ(keel::first_host_of_nodelist("gpu[03-05,09],cpu1"), "gpu03");
  EXPECT_EQ(keel::first_host_of_nodelist("a1,a2"), "a1");
  EXPECT_EQ(keel::first_host_of_nodelist("n[12,15]"), "n12");
}

using namespace keel;

// ------------------------------------------------ which GPU a rank uses
// One function decides (cuda_device_for_rank); setup_compute and the NCCL
// barrier both use its answer (issue 30, defect 2: the barrier took
// cuda:LOCAL_RANK and failed with "invalid device ordinal" when each rank
// saw one GPU).

TEST(RankDevice, OneVisibleGpuPerRankIsDeviceZeroOnEveryRank) {
  for (int local_rank = 0; local_rank < 8; ++local_rank)
    EXPECT_EQ(cuda_device_for_rank(local_rank, 8, 1), 0) << local_rank;
}

TEST(RankDevice, NGpusPerNodeGiveEachLocalRankItsOwn) {
  for (int local_rank = 0; local_rank < 8; ++local_rank)
    EXPECT_EQ(cuda_device_for_rank(local_rank, 8, 8), local_rank);
  EXPECT_EQ(cuda_device_for_rank(1, 2, 8), 1) << "fewer ranks than GPUs: the first ones";
}

TEST(RankDevice, MoreRanksThanGpusIsAnErrorNamingTheKeys) {
  try {
    cuda_device_for_rank(3, 4, 2);
    FAIL() << "4 ranks on 2 GPUs were accepted";
  } catch (const DistError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("LOCAL_WORLD_SIZE=4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--nproc"), std::string::npos) << msg;
    EXPECT_EQ(e.exit_code(), exit_code::bad_input);
  }
  EXPECT_THROW(cuda_device_for_rank(0, 1, 0), DistError);
}

TEST(RankDevice, RanksSharingAPhysicalGpuAreFound) {
  EXPECT_EQ(ranks_sharing_a_device({"n1/0000:01:00.0", "n1/0000:02:00.0", "n2/0000:01:00.0"}),
            std::make_pair(-1, -1));
  EXPECT_EQ(ranks_sharing_a_device({"n1/0000:01:00.0", "n1/0000:02:00.0", "n1/0000:01:00.0"}),
            std::make_pair(0, 2));
  EXPECT_EQ(ranks_sharing_a_device({"", ""}), std::make_pair(-1, -1)) << "CPU ranks have no key";
}

TEST(PointToPoint, GlooStagesDeviceTensorsThroughTheHost) {
  // Gloo's send of a CUDA tensor wrote device memory to a socket ("Bad
  // address" on the H200); NCCL sends device memory itself.
  EXPECT_TRUE(point_to_point_stages_through_host(DistBackend::gloo, torch::Device(torch::kCUDA, 0)));
  EXPECT_FALSE(point_to_point_stages_through_host(DistBackend::gloo, torch::Device(torch::kCPU)));
  EXPECT_FALSE(point_to_point_stages_through_host(DistBackend::nccl, torch::Device(torch::kCUDA, 0)));
}

TEST(AttentionOrder, KeelsOrderIsPutBackAfterSomethingChangesIt) {
  // PyTorch 2.11 moves cuDNN first on its first CUDA attention call; on the
  // H200 train.attention_backend: flash then ran cuDNN. The order applied for
  // a CUDA device (its warm-up call fails harmlessly without a GPU) is held.
  auto& ctx = at::globalContext();
  const auto before = ctx.sDPPriorityOrder();
  std::vector<int64_t> saved;
  for (auto b : before) saved.push_back(static_cast<int64_t>(b));
  apply_attention_backend(AttentionBackend::flash, torch::Device(torch::kCUDA, 0), 9);
  ASSERT_EQ(ctx.sDPPriorityOrder()[0], at::SDPBackend::flash_attention);
  EXPECT_FALSE(hold_attention_order()) << "nothing changed it yet";
  std::vector<int64_t> cudnn_first = saved;
  const auto cudnn = static_cast<int64_t>(at::SDPBackend::cudnn_attention);
  cudnn_first.erase(std::find(cudnn_first.begin(), cudnn_first.end(), cudnn));
  cudnn_first.insert(cudnn_first.begin(), cudnn);
  ctx.setSDPPriorityOrder(cudnn_first);  // what PyTorch does on its first call
  EXPECT_TRUE(hold_attention_order());
  EXPECT_EQ(ctx.sDPPriorityOrder()[0], at::SDPBackend::flash_attention);
  EXPECT_FALSE(hold_attention_order());
  apply_attention_backend(AttentionBackend::automatic, torch::Device(torch::kCPU));
  ctx.setSDPPriorityOrder(saved);
  EXPECT_FALSE(hold_attention_order()) << "a CPU run holds no order";
}

TEST(SharedGpu, TheRefusalHasAKindScriptsCanMatch) {
  // scripts/gpu/gpu_check.sh tells NCCL's expected refusal of two ranks on one
  // GPU from a failure by "keel: shared GPU:", the kind main() prints.
  const SharedGpuError e("ranks 0 and 1 would share the GPU n/0");
  EXPECT_EQ(e.kind(), "shared GPU");
  EXPECT_EQ(e.exit_code(), exit_code::bad_input);
  EXPECT_NE(dynamic_cast<const DistError*>(&e), nullptr) << "still a distributed-setup error for callers";
}

// ------------------------------------------------ NCCL's failure contract
// The variables keel sets before ProcessGroupNCCL reads them (issue 30,
// defect 3), unless the user set them.

TEST(NcclErrorHandling, KeelSetsCleanUpOnlySoAFailedCollectiveThrows) {
  const auto env = nccl_error_handling_env(300, {});
  std::map<std::string, std::string> got;
  for (const auto& e : env) {
    got[e.name] = e.value;
    EXPECT_FALSE(e.why.empty()) << e.name;
  }
  EXPECT_EQ(got.at("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "2");
  EXPECT_EQ(got.at("TORCH_NCCL_DUMP_ON_TIMEOUT"), "0");
  EXPECT_EQ(got.at("TORCH_NCCL_ENABLE_MONITORING"), "1");
  EXPECT_EQ(got.at("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"), "600") << "at least 600 s";
  EXPECT_EQ(nccl_error_handling_env(1800, {}).back().value, "1920") << "dist.timeout_s + 120 s";
}

TEST(NcclErrorHandling, AVariableTheUserSetIsKept) {
  const auto env = nccl_error_handling_env(300, {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}});
  for (const auto& e : env)
    if (e.name == "TORCH_NCCL_ASYNC_ERROR_HANDLING") {
      EXPECT_EQ(e.value, "3");
      EXPECT_EQ(e.why, "set by the user");
    }
}
