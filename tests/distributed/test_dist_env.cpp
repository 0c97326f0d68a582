// The torchrun / SLURM environment, read into a DistEnv: values, defaults,
// and the errors for inconsistent variables.
#include <gtest/gtest.h>

#include "distributed/dist_env.h"

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
