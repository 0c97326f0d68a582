// Gradient averaging for data parallelism, as PyTorch's DDP Reducer does it:
// parameters are grouped into buckets of about dist.bucket_mb in the order
// backward produces their gradients (reverse registration order until the
// first step has shown the real order, then rank 0's observed order, as
// DDP's bucket rebuild: an untied output head, registered early but ready
// first, then goes in the first bucket and its all-reduce overlaps the rest
// of backward); each
// parameter's .grad is a view into its bucket's flat buffer, so autograd
// accumulates straight into it; a post-hook on each parameter's gradient
// accumulator counts the gradients that are final, and a full bucket is
// all-reduced at once while backward goes on with the layers below it.
// Buckets are launched strictly in index order so every rank issues the same
// collectives in the same order (NCCL requires it).
//
// ZeRO-1 (optim/zero.h) passes each parameter's owning rank: a bucket's
// buffer then holds its parameters grouped by owner, one piece per rank, and
// is reduce-scattered instead of all-reduced, so each rank receives the mean
// gradient of the parameters it updates only (Rajbhandari et al. 2020). The
// other parameters' .grad keep this rank's own, unreduced gradients; readers
// of every gradient (the norm, clipping, statistics) go through
// optim/grad_norms.h, which takes each norm from its owner.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <mutex>
#include <vector>

#include "distributed/process_group.h"

namespace torch::autograd {
struct Node;
}

namespace keel {

class GradSync {
 public:
  // overlap=false: no hooks; finish() all-reduces every bucket after backward
  // (the simple scheme, kept to measure what overlap buys).
  // `owners` (empty, or one rank per parameter): reduce-scatter to the owners.
  GradSync(const std::vector<torch::Tensor>& params, Dist& dist, double bucket_mb, bool overlap,
           std::vector<int> owners = {});
  ~GradSync();

  // Zeroes the buffers and points each parameter's .grad at its slice.
  void zero_grad();
  // The next backward produces final gradients (the step's last micro-batch):
  // let the hooks launch buckets as they fill.
  void arm();
  // After that backward: launches any bucket not yet launched (parameters
  // that got no gradient), waits for all, and leaves .grad = the mean over
  // ranks. Returns the milliseconds the host spent waiting.
  double finish();

  size_t bucket_count() const { return buckets_.size(); }
  bool sharded() const { return !owners_.empty(); }
  int64_t launched_from_hooks() const { return launched_from_hooks_; }  // in the last step
  // The parameter indices of each bucket, in the order the last step launched them.
  const std::vector<std::vector<size_t>>& launch_log() const { return launch_log_; }

 private:
  struct Bucket {
    torch::Tensor flat;
    std::vector<size_t> params;
    std::vector<torch::Tensor> views;
    std::vector<torch::Tensor> pieces;  // sharded: flat's slice of each rank's parameters, by rank
    int64_t pending = 0;
    bool launched = false;
    Dist::Work work;
  };
  void on_grad_ready(size_t param_index);
  void launch_ready_buckets(bool from_hook);
  void launch(Bucket& b);
  void build_buckets(const std::vector<size_t>& order);
  void adopt_ready_order();

  std::vector<torch::Tensor> params_;
  std::vector<int> owners_;  // per parameter, or empty (all-reduce)
  Dist& dist_;
  bool overlap_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // param index -> bucket index
  int64_t cap_bytes_;
  bool order_learned_ = false;
  std::vector<size_t> ready_order_;  // param indices as the first step's backward finished them
  std::vector<std::vector<size_t>> launch_log_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive: hooks live on them
  std::mutex mu_;
  bool armed_ = false;
  size_t next_launch_ = 0;
  int64_t launched_from_hooks_ = 0;
};

}  // namespace keel
