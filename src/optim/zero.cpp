#include "optim/zero.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <numeric>
#include <sstream>

#include "util/log.h"

namespace keel {

std::vector<int> zero_owners(const std::vector<int64_t>& numels, int world) {
  std::vector<size_t> order(numels.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  std::vector<int64_t> load(static_cast<size_t>(std::max(world, 1)), 0);
  std::vector<int> owner(numels.size(), 0);
  for (size_t i : order) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = r;
    load[static_cast<size_t>(r)] += numels[i];
  }
  return owner;
}

std::vector<int64_t> zero_state_bytes_by_rank(const Optimizer& optimizer, int world) {
  std::vector<int64_t> numels;
  std::map<std::string, size_t> index;
  for (const auto& p : optimizer.params()) {
    index.emplace(p.name, numels.size());
    numels.push_back(p.param.numel());
  }
  const auto owner = zero_owners(numels, world);
  std::vector<int64_t> bytes(static_cast<size_t>(std::max(world, 1)), 0);
  // State entries are named "<kind>.<parameter>" (exp_avg.blocks.0.attn.wq).
  for (const auto& [name, t] : optimizer.state()) {
    const auto dot = name.find('.');
    const auto it = dot == std::string::npos ? index.end() : index.find(name.substr(dot + 1));
    if (it == index.end()) throw std::logic_error("optimizer state '" + name + "' names no parameter");
    bytes[static_cast<size_t>(owner[it->second])] += t.numel() * static_cast<int64_t>(t.element_size());
  }
  return bytes;
}

namespace {

int64_t bytes_of(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  int64_t n = 0;
  for (const auto& [name, t] : state) n += t.numel() * static_cast<int64_t>(t.element_size());
  return n;
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(std::vector<NamedParam> params, Dist& dist, const Factory& make) : dist_(dist) {
  params_ = std::move(params);
  std::vector<int64_t> numels;
  for (const auto& p : params_) numels.push_back(p.param.numel());
  owner_ = zero_owners(numels, dist.world());
  std::vector<NamedParam> mine;
  for (size_t i = 0; i < params_.size(); ++i) {
    shard_.owned.push_back(owner_[i] == dist.rank());
    if (owner_[i] == dist.rank()) mine.push_back(params_[i]);
  }
  shard_.sum = [this](torch::Tensor& t) { dist_.all_reduce_sum(t, "the ZeRO-1 per-parameter figures"); };
  owned_ = static_cast<int64_t>(mine.size());
  inner_ = make(std::move(mine));
  local_bytes_ = bytes_of(inner_->state());
  const auto device = params_.empty() ? torch::Device(torch::kCPU) : params_.front().param.device();
  auto total = torch::full({1}, static_cast<double>(local_bytes_), torch::TensorOptions().dtype(torch::kFloat64)
                                                                        .device(device));
  dist_.all_reduce_sum(total, "the ZeRO-1 state size");
  total_bytes_ = static_cast<int64_t>(total.item<double>());
}

void ShardedOptimizer::step(double lr, const torch::Tensor& found_inf) {
  inner_->record_step_stats(record_step_stats_);
  inner_->step(lr, found_inf);
  step_stats_ = inner_->step_stats();
  share_updated_parameters();
}

void ShardedOptimizer::step(const torch::Tensor& lr, const torch::Tensor& found_inf) {
  inner_->record_step_stats(record_step_stats_);
  inner_->step(lr, found_inf);
  step_stats_ = inner_->step_stats();
  share_updated_parameters();
}

// Each rank's updated parameters, from it to every other rank: afterwards
// every replica holds the same weights, as after a replicated step.
void ShardedOptimizer::share_updated_parameters() {
  gathered_.clear();
  torch::NoGradGuard no_grad;
  for (int r = 0; r < dist_.world(); ++r) {
    std::vector<torch::Tensor> theirs;
    for (size_t i = 0; i < params_.size(); ++i)
      if (owner_[i] == r) theirs.push_back(params_[i].param.detach());
    dist_.broadcast(theirs, r, "the ZeRO-1 parameter broadcast");
  }
}

std::vector<std::pair<std::string, torch::Tensor>> ShardedOptimizer::state() const {
  return gathered_.empty() ? inner_->state() : gathered_;
}

// To rank 0 only, one rank at a time: rank r sends its state's names,
// dtypes and shapes as text, then one flat buffer per dtype; rank 0 keeps
// what arrives on the CPU. No rank's device ever holds more than its own
// shard and one other rank's buffer, so saving does not undo what ZeRO-1
// saves in device memory.
void ShardedOptimizer::gather_state() {
  gathered_.clear();
  const auto device = params_.empty() ? torch::Device(torch::kCPU) : params_.front().param.device();
  const auto opts = torch::TensorOptions().device(device);
  const auto mine = inner_->state();
  if (dist_.rank() == 0) gathered_ = mine;
  for (int r = 1; r < dist_.world(); ++r) {
    if (dist_.rank() != r && dist_.rank() != 0) continue;
    const bool sender = dist_.rank() == r;
    std::string meta;
    if (sender) {
      std::ostringstream out;
      for (const auto& [name, t] : mine) {
        out << name << '\t' << static_cast<int>(t.scalar_type()) << '\t' << t.dim();
        for (int64_t d : t.sizes()) out << '\t' << d;
        out << '\n';
      }
      meta = out.str();
    }
    auto len = torch::full({1}, static_cast<int64_t>(meta.size()), opts.dtype(torch::kInt64));
    sender ? dist_.send(len, 0, "the ZeRO-1 state gather") : dist_.recv(len, r, "the ZeRO-1 state gather");
    const int64_t n = len.to(torch::kCPU).item<int64_t>();
    if (n < 0 || n > (int64_t{1} << 30)) throw std::logic_error("ZeRO-1 state gather: a corrupt length");
    auto text = torch::zeros({n}, opts.dtype(torch::kUInt8));
    if (sender && n > 0) text.copy_(torch::from_blob(meta.data(), {n}, torch::kUInt8));
    sender ? dist_.send(text, 0, "the ZeRO-1 state gather") : dist_.recv(text, r, "the ZeRO-1 state gather");
    if (!sender) {
      auto host = text.to(torch::kCPU).contiguous();
      meta.assign(reinterpret_cast<const char*>(host.data_ptr<uint8_t>()), static_cast<size_t>(n));
    }
    // The entries, grouped by dtype into flat buffers (in order of first appearance).
    std::vector<std::pair<std::string, torch::Tensor>> theirs;  // rank 0: CPU tensors to fill
    std::istringstream in(meta);
    for (std::string line; std::getline(in, line);) {
      std::istringstream f(line);
      std::string name;
      int dtype = 0;
      int64_t dims = 0;
      std::getline(f, name, '\t');
      f >> dtype >> dims;
      std::vector<int64_t> sizes(static_cast<size_t>(dims));
      for (auto& d : sizes) f >> d;
      theirs.emplace_back(name, torch::empty(sizes, torch::TensorOptions().dtype(static_cast<torch::ScalarType>(dtype))));
    }
    std::vector<torch::ScalarType> dtypes;
    for (const auto& [name, t] : theirs)
      if (std::find(dtypes.begin(), dtypes.end(), t.scalar_type()) == dtypes.end()) dtypes.push_back(t.scalar_type());
    for (const auto dtype : dtypes) {
      std::vector<size_t> idx;
      int64_t total = 0;
      for (size_t i = 0; i < theirs.size(); ++i)
        if (theirs[i].second.scalar_type() == dtype) idx.push_back(i), total += theirs[i].second.numel();
      torch::Tensor flat;
      if (sender) {
        std::vector<torch::Tensor> parts;
        for (size_t i : idx) parts.push_back(mine[i].second.detach().reshape({-1}).to(device));
        flat = torch::cat(parts);
        dist_.send(flat, 0, "the ZeRO-1 state gather");
      } else {
        flat = torch::empty({total}, opts.dtype(dtype));
        dist_.recv(flat, r, "the ZeRO-1 state gather");
        auto host = flat.to(torch::kCPU);
        int64_t offset = 0;
        for (size_t i : idx) {
          auto& t = theirs[i].second;
          t.copy_(host.narrow(0, offset, t.numel()).view(t.sizes()));
          offset += t.numel();
        }
      }
    }
    if (!sender) gathered_.insert(gathered_.end(), theirs.begin(), theirs.end());
  }
}

void ShardedOptimizer::load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  gathered_.clear();
  inner_->load_state(state);  // it takes the entries of its own parameters
}

std::vector<std::string> ShardedOptimizer::describe() const {
  std::vector<std::string> out = inner_->describe();
  out.push_back(strf("ZeRO-1: %lld of %zu parameters on this rank; optimizer state %.1f MiB here, %.1f MiB on all %d",
                     static_cast<long long>(owned_), params_.size(), static_cast<double>(local_bytes_) / (1 << 20),
                     static_cast<double>(total_bytes_) / (1 << 20), dist_.world()));
  return out;
}

}  // namespace keel
