// ZeRO stage 1 (Rajbhandari et al. 2020) by whole parameters, as PyTorch's
// ZeroRedundancyOptimizer partitions: each parameter is dealt to one rank
// (largest first, to the least loaded rank), and that rank alone keeps its
// optimizer state and updates it. After each step every rank broadcasts the
// parameters it updated (an all-gather of uneven pieces, as one broadcast
// per rank). Muon's matrices stay whole on their rank, as its Newton–Schulz
// iteration needs. GradSync reduce-scatters the gradients to their owners
// (owners()), so each owner updates from the mean gradient a replicated run
// sees, and the gradient norm, clipping and statistics take each parameter's
// figures from its owner (grad_shard(), optim/grad_norms.h): the same
// numbers, with 1/N of the optimizer state per rank
// (docs/papers.md#memory-zero-1-and-recomputation).
#pragma once

#include <functional>
#include <memory>

#include "distributed/process_group.h"
#include "optim/grad_norms.h"
#include "optim/optimizer.h"

namespace keel {

// Which rank keeps each parameter: sizes dealt largest first (ties in
// order) to the rank with the fewest elements so far (ties: the lowest).
std::vector<int> zero_owners(const std::vector<int64_t>& numels, int world);

// Bytes of `optimizer`'s state each of `world` ranks would keep under
// dist.zero: 1, its tensors dealt by zero_owners (keel bench prints it from
// one process; a sharded run's settings table prints its own rank's).
std::vector<int64_t> zero_state_bytes_by_rank(const Optimizer& optimizer, int world);

class ShardedOptimizer : public Optimizer {
 public:
  using Factory = std::function<std::unique_ptr<Optimizer>(std::vector<NamedParam>)>;
  // Collective: every rank constructs it at once. `make` builds train.optimizer over a subset.
  ShardedOptimizer(std::vector<NamedParam> params, Dist& dist, const Factory& make);

  void step(double lr, const torch::Tensor& found_inf = {}) override;
  void step(const torch::Tensor& lr, const torch::Tensor& found_inf = {}) override;
  // This rank's state; on rank 0 after gather_state(), every rank's (the checkpoint's one logical state).
  std::vector<std::pair<std::string, torch::Tensor>> state() const override;
  // Collective: every rank's state to rank 0 (before a checkpoint), on its CPU, kept until the next step.
  void gather_state();
  // A full state (from a checkpoint of any world size, sharded or not): this rank takes its own parameters'.
  void load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) override;
  std::vector<std::string> describe() const override;
  std::string graph_capture_obstacle() const override {
    return "dist.zero: 1 broadcasts the updated parameters between ranks after the step";
  }
  const GradShard* grad_shard() const override { return &shard_; }
  // The rank that updates each of params().
  const std::vector<int>& owners() const { return owner_; }
  // Bytes of optimizer state on this rank, and on all ranks together.
  int64_t local_state_bytes() const { return local_bytes_; }
  int64_t total_state_bytes() const { return total_bytes_; }

 private:
  void share_updated_parameters();
  Dist& dist_;
  std::vector<int> owner_;                    // per parameter of params_
  GradShard shard_;
  std::unique_ptr<Optimizer> inner_;          // over this rank's parameters
  std::vector<std::pair<std::string, torch::Tensor>> gathered_;
  int64_t local_bytes_ = 0, total_bytes_ = 0, owned_ = 0;
};

}  // namespace keel
