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

// Rank r's state names, dtypes and shapes go first as text, so that the
// others can allocate what its tensors arrive in.
void ShardedOptimizer::gather_state() {
  gathered_.clear();
  const auto device = params_.empty() ? torch::Device(torch::kCPU) : params_.front().param.device();
  const auto mine = inner_->state();
  for (int r = 0; r < dist_.world(); ++r) {
    std::string meta;
    if (r == dist_.rank()) {
      std::ostringstream out;
      for (const auto& [name, t] : mine) {
        out << name << '\t' << static_cast<int>(t.scalar_type()) << '\t' << (t.device().is_cpu() ? 1 : 0) << '\t'
            << t.dim();
        for (int64_t d : t.sizes()) out << '\t' << d;
        out << '\n';
      }
      meta = out.str();
    }
    auto opts = torch::TensorOptions().device(device);
    std::vector<torch::Tensor> len{torch::full({1}, static_cast<int64_t>(meta.size()), opts.dtype(torch::kInt64))};
    dist_.broadcast(len, r, "the ZeRO-1 state gather");
    const int64_t n = len[0].to(torch::kCPU).item<int64_t>();
    std::vector<torch::Tensor> text{torch::zeros({n}, opts.dtype(torch::kUInt8))};
    if (r == dist_.rank() && n > 0)
      text[0].copy_(torch::from_blob(meta.data(), {n}, torch::kUInt8));
    dist_.broadcast(text, r, "the ZeRO-1 state gather");
    auto host = text[0].to(torch::kCPU).contiguous();
    const std::string got(reinterpret_cast<const char*>(host.data_ptr<uint8_t>()), static_cast<size_t>(n));
    std::vector<std::pair<std::string, torch::Tensor>> theirs;
    std::vector<bool> on_cpu;
    std::istringstream in(got);
    for (std::string line; std::getline(in, line);) {
      std::istringstream f(line);
      std::string name;
      int dtype = 0, cpu = 0;
      int64_t dims = 0;
      std::getline(f, name, '\t');
      f >> dtype >> cpu >> dims;
      std::vector<int64_t> sizes(static_cast<size_t>(dims));
      for (auto& d : sizes) f >> d;
      theirs.emplace_back(name, torch::empty(sizes, opts.dtype(static_cast<torch::ScalarType>(dtype))));
      on_cpu.push_back(cpu != 0);
    }
    if (r == dist_.rank())
      for (size_t i = 0; i < theirs.size(); ++i) theirs[i].second.copy_(mine[i].second);
    std::vector<torch::Tensor> buffers;
    for (auto& [name, t] : theirs) buffers.push_back(t);
    dist_.broadcast(buffers, r, "the ZeRO-1 state gather");
    for (size_t i = 0; i < theirs.size(); ++i)
      gathered_.emplace_back(theirs[i].first, on_cpu[i] ? theirs[i].second.to(torch::kCPU) : theirs[i].second);
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
