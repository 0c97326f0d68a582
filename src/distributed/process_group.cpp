#include "distributed/process_group.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef KEEL_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef KEEL_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "util/stop_signal.h"

namespace keel {

struct Dist::Handles {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;
};

namespace {

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string text(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

bool contains(const std::string& haystack, const char* needle) { return haystack.find(needle) != std::string::npos; }

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

std::string where(const DistEnv& env) { return env.master_addr + ":" + std::to_string(env.master_port); }

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

}  // namespace

DistBackend resolve_backend(DistBackend requested, bool cuda_device) {
  const DistBackend b =
      requested == DistBackend::automatic ? (cuda_device ? DistBackend::nccl : DistBackend::gloo) : requested;
  if (b == DistBackend::nccl) {
    if (!cuda_device) throw DistError("dist.backend is nccl but training runs on the CPU; use gloo (or auto)");
#ifndef KEEL_WITH_NCCL
    throw DistError("dist.backend nccl: this keel was built without NCCL (LibTorch without CUDA, or nccl.h not "
                    "found at configure time)");
#endif
  } else if (b == DistBackend::gloo) {
#ifndef KEEL_WITH_GLOO
    throw DistError("dist.backend gloo: this keel was built without the Gloo headers (Debian: libgloo-dev); "
                    "install them and rebuild (scripts/setup.sh does)");
#endif
  }
  return b;
}

Dist::Dist() : h_(std::make_unique<Handles>()) {}
Dist::~Dist() = default;

std::vector<EnvSetting> nccl_error_handling_env(double timeout_s, const std::map<std::string, std::string>& existing) {
  const int heartbeat = static_cast<int>(std::max(600.0, timeout_s + 120.0));
  const std::vector<EnvSetting> wanted = {
      // 2 = CleanUpOnly: on a failed or timed-out collective the watchdog
      // aborts the communicators and marks the work failed, and the next
      // wait or collective throws in keel, which ends the rank through
      // PeerFailure. PyTorch's default (3) tears the process down from the
      // watchdog thread instead (SIGABRT, exit 134).
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", "a failed collective throws in keel instead of aborting the process"},
      // No flight-recorder dump on a timeout: it delays the exit and writes
      // files outside the run directory.
      {"TORCH_NCCL_DUMP_ON_TIMEOUT", "0", "no debug dump on a timeout"},
      // Ranks learn of another rank's NCCL error through the store, not only
      // at their own timeout.
      {"TORCH_NCCL_PROPAGATE_ERROR", "1", "an error on one rank reaches the others through the store"},
      // The last resort: if the watchdog itself hangs (an abort that does not
      // return), the monitor ends the process (SIGABRT) after this long.
      {"TORCH_NCCL_ENABLE_MONITORING", "1", "a hung watchdog still ends the process"},
      {"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", std::to_string(heartbeat), "dist.timeout_s + 120 s, at least 600 s"},
  };
  std::vector<EnvSetting> out;
  for (const auto& w : wanted) {
    auto it = existing.find(w.name);
    if (it != existing.end()) out.push_back({w.name, it->second, "set by the user"});
    else out.push_back(w);
  }
  return out;
}

std::pair<int, int> ranks_sharing_a_device(const std::vector<std::string>& keys) {
  for (size_t a = 0; a < keys.size(); ++a)
    for (size_t b = a + 1; b < keys.size(); ++b)
      if (!keys[a].empty() && keys[a] == keys[b]) return {static_cast<int>(a), static_cast<int>(b)};
  return {-1, -1};
}

Dist::Dist(const DistEnv& env, DistBackend backend, double timeout_s, torch::Device device,
           const std::string& device_key)
    : env_(env), backend_(backend), device_(device), timeout_s_(timeout_s), h_(std::make_unique<Handles>()) {
  if (!env.distributed()) return;
  // Under torchrun the store may be its agent's, which outlives the workers
  // when it restarts them: keys are per restart so old ones never match.
  if (const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT")) key_prefix_ += std::string(restart) + "/";
  // Until the group is made, c10d blocks in connect and recv without looking
  // at keel's stop flag; nothing has been written, so a signal leaves at once.
  LeaveAtOnceOnStop leave("the rendezvous");
  // 1. Rendezvous: rank 0 listens, the others connect (retrying until the timeout).
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(env.master_port);
  opts.isServer = env.rank == 0;
  opts.numWorkers = env.world_size;
  opts.waitWorkers = false;  // joining is checked below, with a message that names the missing ranks
  opts.timeout = to_ms(timeout_s);
  try {
    h_->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    if (env.rank == 0 && (contains(msg, "EADDRINUSE") || contains(msg, "address already in use")))
      throw DistError("rank 0 cannot listen on MASTER_PORT " + std::to_string(env.master_port) +
                      ": the port is already in use (another job?). Choose a free one: MASTER_PORT=... "
                      "(keel launch picks a free port unless --master-port is given)");
    if (env.rank == 0)
      throw DistError("rank 0 cannot host the rendezvous at " + where(env) + ": " + msg);
    throw DistError("rank " + std::to_string(env.rank) + " could not reach rank 0's rendezvous at " + where(env) +
                    " within dist.timeout_s = " + seconds(timeout_s) +
                    ": is rank 0 running, and are MASTER_ADDR/MASTER_PORT right? (" + msg.substr(0, 300) + ")");
  }
  // 2. Every rank says hello with its world size; ranks that disagree, or
  // two processes with the same rank, or ranks that never come, are named.
  // A rank reads rank 0's hello before posting its own, so rank 0 (which
  // leaves as soon as it sees a bad hello) is never gone before the other
  // rank has seen the disagreement too.
  const std::string me = std::to_string(env.rank);
  const std::string mine = std::to_string(env.world_size);
  auto mismatch = [&](int r, const std::string& theirs) {
    return DistError("rank " + std::to_string(r) + " was started with WORLD_SIZE=" + theirs + ", rank " + me +
                     " with WORLD_SIZE=" + mine + ": every rank must agree");
  };
  std::vector<std::string> missing;
  try {
    if (h_->store->add(key_prefix_ + "rank_claims/" + me, 1) > 1)
      throw DistError("two processes claim rank " + me + " (RANK/SLURM_PROCID)");
    if (env.rank != 0) {
      h_->store->wait({key_prefix_ + "hello/0"}, to_ms(timeout_s));
      const std::string theirs = text(h_->store->get(key_prefix_ + "hello/0"));
      h_->store->set(key_prefix_ + "hello/" + me, bytes(mine));
      if (theirs != mine) throw mismatch(0, theirs);
    } else {
      h_->store->set(key_prefix_ + "hello/0", bytes(mine));
      for (int r = 1; r < env.world_size; ++r) {
        const std::string key = key_prefix_ + "hello/" + std::to_string(r);
        try {
          h_->store->wait({key}, to_ms(timeout_s));
        } catch (const std::exception&) {
          missing.push_back(std::to_string(r));
          continue;
        }
        const std::string theirs = text(h_->store->get(key));
        if (theirs != mine) throw mismatch(r, theirs);
      }
    }
  } catch (const DistError&) {
    throw;
  } catch (const std::exception& e) {
    throw DistError("rank " + me + " lost the rendezvous at " + where(env) + " (" +
                    std::string(e.what()).substr(0, 200) + "): rank 0 stopped; its output says why");
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    throw DistError("rank(s) " + list + " did not join the rendezvous at " + where(env) + " within dist.timeout_s = " +
                    seconds(timeout_s) + " (WORLD_SIZE=" + mine + " here: were that many workers started?)");
  }
  // 3. NCCL refuses two ranks on one GPU ("Duplicate GPU detected") deep in
  // its first collective: say so here, with the keys that decide it.
  if (backend == DistBackend::nccl) {
    const auto [a, b] = ranks_sharing_a_device(exchange("device", device_key));
    if (a >= 0)
      throw SharedGpuError("ranks " + std::to_string(a) + " and " + std::to_string(b) + " would share the GPU " +
                      device_key + ", which NCCL refuses: give each rank its own GPU (CUDA_VISIBLE_DEVICES, "
                      "--nproc at most the GPU count), or use dist.backend: gloo to share one");
    // overwrite = 0: a variable the user set keeps its value.
    for (const auto& w : nccl_error_handling_env(timeout_s, {})) setenv(w.name.c_str(), w.value.c_str(), 0);
  }
  // 4. The backend, over the same store.
  try {
    if (backend == DistBackend::nccl) {
#ifdef KEEL_WITH_NCCL
      auto o = c10d::ProcessGroupNCCL::Options::create();
      o->timeout = to_ms(timeout_s);
      h_->backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(h_->store, env.rank, env.world_size, o);
#endif
    } else {
#ifdef KEEL_WITH_GLOO
      auto o = c10d::ProcessGroupGloo::Options::create();
      o->timeout = to_ms(timeout_s);
      if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"))
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      else if (is_loopback(env.master_addr))
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      else
        o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      h_->backend = c10::make_intrusive<c10d::ProcessGroupGloo>(h_->store, env.rank, env.world_size, o);
#endif
    }
  } catch (const std::exception& e) {
    throw DistError("rank " + me + ": could not start the " + name_of(backend) + " backend: " + std::string(e.what()).substr(0, 500));
  }
  if (!h_->backend) throw DistError("dist backend '" + name_of(backend) + "' is not available in this build");
}

bool host_waits_for_collectives(DistBackend backend) { return backend != DistBackend::nccl; }

void Dist::wait(const Work& work, const char* what) {
  if (!work) return;
  try {
    // NCCL: wait() without a timeout only makes the current CUDA stream wait
    // for the collective, so the host runs ahead; a timeout would make it
    // busy-wait for completion (on every bucket). A hung peer is still caught
    // by the process group's own timeout (Options::timeout = dist.timeout_s,
    // enforced by its watchdog). Gloo's wait blocks the host either way and
    // has no watchdog, so it keeps the explicit timeout.
    if (host_waits_for_collectives(backend_)) work->wait(to_ms(timeout_s_));
    else work->wait();
  } catch (const std::exception& e) {
    throw peer_failure(what, e);
  }
}

PeerFailure Dist::peer_failure(const char* what, const std::exception& e) const {
  return PeerFailure("rank " + std::to_string(rank()) + ": " + what + " with the other ranks failed: " +
                     std::string(e.what()).substr(0, 400) +
                     "\nAnother worker probably died or hung (its own log says why); this rank gives up "
                     "rather than wait (dist.timeout_s = " + seconds(timeout_s_) + ").");
}

namespace {
c10d::AllreduceOptions reduce_op(c10d::ReduceOp::RedOpType op) {
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp(op);
  return o;
}
}  // namespace

// Every collective is launched here: a launch that throws (an aborted NCCL
// communicator, TORCH_NCCL_ASYNC_ERROR_HANDLING=2) ends the rank as a
// failed wait does.
Dist::Work Dist::launch(const std::function<Work()>& start, const char* what) {
  try {
    return start();
  } catch (const std::exception& e) {
    throw peer_failure(what, e);
  }
}

void Dist::all_reduce(torch::Tensor& t, c10d::ReduceOp::RedOpType op, const char* what) {
  if (!distributed()) return;
  std::vector<torch::Tensor> v{t};
  wait(launch([&] { return h_->backend->allreduce(v, reduce_op(op)); }, what), what);
}

void Dist::all_reduce_sum(torch::Tensor& t, const char* what) { all_reduce(t, c10d::ReduceOp::SUM, what); }
void Dist::all_reduce_max(torch::Tensor& t, const char* what) { all_reduce(t, c10d::ReduceOp::MAX, what); }
void Dist::all_reduce_min(torch::Tensor& t, const char* what) { all_reduce(t, c10d::ReduceOp::MIN, what); }

Dist::Work Dist::all_reduce_sum_async(torch::Tensor& t) {
  if (!distributed()) return Work();
  std::vector<torch::Tensor> v{t};
  return launch([&] { return h_->backend->allreduce(v, reduce_op(c10d::ReduceOp::SUM)); }, "the gradient all-reduce");
}

Dist::Work Dist::reduce_scatter_sum_async(std::vector<torch::Tensor>& pieces) {
  if (!distributed()) return Work();
  if (static_cast<int>(pieces.size()) != world())
    throw std::logic_error("reduce_scatter_sum_async: one piece per rank");
  std::vector<torch::Tensor> out{pieces[static_cast<size_t>(rank())]};
  std::vector<std::vector<torch::Tensor>> in{pieces};
  c10d::ReduceScatterOptions o;
  o.reduceOp = c10d::ReduceOp(c10d::ReduceOp::SUM);
  return launch([&] { return h_->backend->reduce_scatter(out, in, o); }, "the gradient reduce-scatter");
}

void Dist::broadcast(std::vector<torch::Tensor>& tensors, int root, const char* what) {
  if (!distributed() || tensors.empty()) return;
  // One flat buffer per dtype keeps it to a few collectives.
  std::map<c10::ScalarType, std::vector<size_t>> by_dtype;
  for (size_t i = 0; i < tensors.size(); ++i) by_dtype[tensors[i].scalar_type()].push_back(i);
  for (auto& [dtype, idx] : by_dtype) {
    std::vector<torch::Tensor> parts;
    for (size_t i : idx) parts.push_back(tensors[i].detach().reshape({-1}));
    std::vector<torch::Tensor> flat{torch::cat(parts)};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    wait(launch([&] { return h_->backend->broadcast(flat, o); }, what), what);
    torch::NoGradGuard no_grad;
    int64_t offset = 0;
    for (size_t i : idx) {
      auto& t = tensors[i];
      t.detach().copy_(flat[0].narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

bool point_to_point_stages_through_host(DistBackend backend, const torch::Device& device) {
  return backend == DistBackend::gloo && !device.is_cpu();
}

// Gloo's send and recv hand the tensor's pointer to the socket as it is: a
// CUDA tensor there fails in writev with "Bad address" (seen on the H200,
// ZeRO-1's checkpoint gather under dist.backend: gloo). Its collectives
// stage device tensors themselves; point to point goes through a host copy.
void Dist::send(torch::Tensor& t, int dst, const char* what) {
  if (!distributed()) return;
  std::vector<torch::Tensor> v{point_to_point_stages_through_host(backend_, t.device()) ? t.to(torch::kCPU).contiguous()
                                                                                       : t};
  wait(launch([&] { return h_->backend->send(v, dst, /*tag=*/0); }, what), what);
}

void Dist::recv(torch::Tensor& t, int src, const char* what) {
  if (!distributed()) return;
  const bool staged = point_to_point_stages_through_host(backend_, t.device());
  std::vector<torch::Tensor> v{staged ? torch::empty(t.sizes(), t.options().device(torch::kCPU)) : t};
  wait(launch([&] { return h_->backend->recv(v, src, /*tag=*/0); }, what), what);
  if (staged) t.copy_(v.front());
}

void Dist::barrier(const char* what) {
  if (!distributed()) return;
  // An all-reduce of one element rather than Backend::barrier: NCCL's
  // barrier guesses a device, and this one honours the timeout the same way.
  // On the device setup_compute chose for this rank (cuda_device_for_rank),
  // not one guessed from LOCAL_RANK: with one GPU visible per rank that is
  // device 0 on every rank.
  auto opts = torch::TensorOptions().device(backend_ == DistBackend::nccl ? device_ : torch::Device(torch::kCPU));
  auto t = torch::zeros({1}, opts);
  all_reduce_sum(t, what);
}

std::vector<std::string> Dist::exchange(const std::string& key, const std::string& value) {
  if (!distributed()) return {value};
  const std::string prefix = key_prefix_ + "x/" + std::to_string(exchange_seq_++) + "/" + key + "/";
  h_->store->set(prefix + std::to_string(rank()), bytes(value));
  std::vector<std::string> out;
  for (int r = 0; r < world(); ++r) {
    const std::string k = prefix + std::to_string(r);
    try {
      h_->store->wait({k}, to_ms(timeout_s_));
    } catch (const std::exception& e) {
      throw PeerFailure("rank " + std::to_string(rank()) + ": rank " + std::to_string(r) + " did not report '" + key +
                        "' within dist.timeout_s = " + seconds(timeout_s_) + " (did it die or hang?)");
    }
    out.push_back(text(h_->store->get(k)));
  }
  return out;
}

void Dist::agree_on_setup(const std::string& error, int exit_code) {
  if (!distributed()) return;
  auto all = exchange("setup", error.empty() ? "" : std::to_string(exit_code) + "\n" + error);
  if (!error.empty()) return;  // the caller rethrows its own error
  for (int r = 0; r < world(); ++r) {
    if (all[r].empty()) continue;
    const size_t nl = all[r].find('\n');
    throw RemoteRankError("rank " + std::to_string(r) + " failed during setup: " + all[r].substr(nl + 1),
                          std::stoi(all[r].substr(0, nl)));
  }
}

}  // namespace keel
