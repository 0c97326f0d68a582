// The data-parallel group: a c10d TCPStore rendezvous (rank 0 hosts it at
// MASTER_ADDR:MASTER_PORT) and a c10d backend, NCCL for CUDA tensors or Gloo
// for CPU tensors, as PyTorch's DistributedDataParallel uses them. A job of
// one process has neither, and every collective is the identity.
//
// Every collective either completes or throws PeerFailure within
// dist.timeout_s: a worker that died or hung ends the others' run instead of
// hanging it.
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"  // DistBackend
#include "distributed/dist_env.h"

namespace keel {

class Dist {
 public:
  // A job of one: no store, no backend.
  Dist();
  // Rendezvous and backend ("nccl" or "gloo"). Throws DistError with a
  // message that names the cause (port in use, master unreachable, ranks
  // missing, two NCCL ranks on one GPU) when it cannot connect within
  // timeout_s. `device` is where this rank's collectives run (the CUDA
  // device setup_compute chose, for NCCL); `device_key` names the physical
  // device ("host/PCI bus id"), so ranks that share one are found.
  Dist(const DistEnv& env, DistBackend backend, double timeout_s, torch::Device device = torch::kCPU,
       const std::string& device_key = "");
  ~Dist();
  Dist(const Dist&) = delete;
  Dist& operator=(const Dist&) = delete;

  int rank() const { return env_.rank; }
  int world() const { return env_.world_size; }
  bool distributed() const { return env_.distributed(); }
  const DistEnv& env() const { return env_; }
  DistBackend backend() const { return backend_; }
  double timeout_s() const { return timeout_s_; }

  // In-place all-reduces (blocking for the caller's stream). Tensors live on
  // the backend's device: CUDA for NCCL, any for Gloo.
  void all_reduce_sum(torch::Tensor& t, const char* what);
  void all_reduce_max(torch::Tensor& t, const char* what);
  void all_reduce_min(torch::Tensor& t, const char* what);
  // Starts a sum all-reduce and returns at once; wait() it later.
  using Work = c10::intrusive_ptr<c10d::Work>;
  Work all_reduce_sum_async(torch::Tensor& t);
  // Starts a sum reduce-scatter in place: `pieces` (one per rank, of any
  // sizes, the same on every rank) are summed over ranks, and this rank's
  // piece, pieces[rank()], receives its sum; the others are left as they
  // were. Gloo and NCCL both take uneven pieces (NCCL as grouped reduces).
  Work reduce_scatter_sum_async(std::vector<torch::Tensor>& pieces);
  // Waits for `work` (see host_waits_for_collectives); throws PeerFailure
  // naming `what` when it failed.
  void wait(const Work& work, const char* what);
  void broadcast(std::vector<torch::Tensor>& tensors, int root, const char* what);
  // Point to point, blocking (for the caller's stream): `t` to rank `dst`,
  // or from rank `src` into `t`; the two sides must agree on its size.
  void send(torch::Tensor& t, int dst, const char* what);
  void recv(torch::Tensor& t, int src, const char* what);
  void barrier(const char* what);

  // Small host values through the store: every rank's `value`, by rank.
  // Keys are made unique per call, so ranks must call it in the same order.
  std::vector<std::string> exchange(const std::string& key, const std::string& value);

  // Collective verdict on setup: every rank reports its error (empty = ok)
  // and exit code; if any rank failed, all throw (this rank's own error is
  // rethrown by the caller; others get RemoteRankError).
  void agree_on_setup(const std::string& error, int exit_code);

 private:
  DistEnv env_;
  DistBackend backend_ = DistBackend::automatic;  // a job of one has none
  torch::Device device_ = torch::kCPU;
  double timeout_s_ = 300;
  Work launch(const std::function<Work()>& start, const char* what);
  void all_reduce(torch::Tensor& t, c10d::ReduceOp::RedOpType op, const char* what);
  // The PeerFailure that `what` failing with `e` ends this rank with (one message, NCCL or Gloo).
  PeerFailure peer_failure(const char* what, const std::exception& e) const;
  int64_t exchange_seq_ = 0;
  std::string key_prefix_ = "keel/";  // store keys; per torchrun restart
  struct Handles;
  std::unique_ptr<Handles> h_;
};

// "nccl" or "gloo" for dist.backend ("auto" picks by device); throws
// DistError when the build lacks it or it does not fit the device.
DistBackend resolve_backend(DistBackend requested, bool cuda_device);

// NCCL's failure handling, set before its process group exists unless the
// user set the variable (name, value, why), so that a dead or hung peer ends
// this rank through PeerFailure as with Gloo (docs/data-parallel.md says what
// happens when it cannot). `existing` holds the variables already set.
struct EnvSetting {
  std::string name, value, why;
};
std::vector<EnvSetting> nccl_error_handling_env(double timeout_s, const std::map<std::string, std::string>& existing);

// The first two ranks whose `keys` (Dist's device_key, by rank) name the
// same device, or {-1, -1}. Empty keys never match.
std::pair<int, int> ranks_sharing_a_device(const std::vector<std::string>& keys);

// Whether Dist::send / recv copy a tensor on `device` through host memory:
// Gloo's point-to-point ops read and write the tensor's memory from the CPU.
bool point_to_point_stages_through_host(DistBackend backend, const torch::Device& device);

// Whether Dist::wait blocks the host until a collective is done (Gloo), or
// only orders the CUDA stream after it (NCCL: the host runs ahead, and the
// process group's watchdog enforces dist.timeout_s).
bool host_waits_for_collectives(DistBackend backend);

}  // namespace keel
