#include "distributed/grad_sync.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

namespace keel {

GradSync::GradSync(const std::vector<torch::Tensor>& params, Dist& dist, double bucket_mb, bool overlap,
                   std::vector<int> owners)
    : params_(params), owners_(std::move(owners)), dist_(dist), overlap_(overlap), bucket_of_(params.size()),
      cap_bytes_(std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1024 * 1024))) {
  if (!owners_.empty() && owners_.size() != params_.size())
    throw std::logic_error("GradSync: one owner per parameter");
  for (int r : owners_)
    if (r < 0 || r >= dist_.world()) throw std::logic_error("GradSync: an owner outside the ranks");
  // First guess: reverse registration order. The first step records the
  // order backward really produces gradients in, and finish() rebuilds the
  // buckets in that order (rank 0's, so every rank agrees).
  std::vector<size_t> order(params_.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = order.size() - 1 - k;
  build_buckets(order);
  if (overlap_) {
    for (size_t k = 0; k < params_.size(); ++k) {
      auto acc = torch::autograd::impl::grad_accumulator(params_[k]);
      acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            on_grad_ready(k);
            return outputs;
          }));
      accumulators_.push_back(std::move(acc));
    }
  }
}

void GradSync::build_buckets(const std::vector<size_t>& order) {
  buckets_.clear();
  int64_t bytes = 0;
  for (size_t k : order) {
    const auto& p = params_[k];
    const bool new_bucket = buckets_.empty() || bytes >= cap_bytes_ ||
                            buckets_.back().flat.scalar_type() != p.scalar_type();
    if (new_bucket) {
      buckets_.emplace_back();
      buckets_.back().flat = torch::empty({0}, p.options());  // dtype/device marker until sized
      bytes = 0;
    }
    buckets_.back().params.push_back(k);
    bucket_of_[k] = buckets_.size() - 1;
    bytes += p.numel() * p.element_size();
  }
  for (auto& b : buckets_) {
    // Sharded: each owner's parameters side by side (in bucket order), so that its piece is one slice.
    if (sharded())
      std::stable_sort(b.params.begin(), b.params.end(), [&](size_t x, size_t y) { return owners_[x] < owners_[y]; });
    int64_t n = 0;
    for (size_t k : b.params) n += params_[k].numel();
    b.flat = torch::zeros({n}, b.flat.options());
    std::vector<int64_t> piece(static_cast<size_t>(dist_.world()), 0);
    int64_t offset = 0;
    for (size_t k : b.params) {
      b.views.push_back(b.flat.narrow(0, offset, params_[k].numel()).view(params_[k].sizes()));
      offset += params_[k].numel();
      if (sharded()) piece[static_cast<size_t>(owners_[k])] += params_[k].numel();
    }
    if (!sharded()) continue;
    offset = 0;
    for (int64_t size : piece) {
      b.pieces.push_back(b.flat.narrow(0, offset, size));
      offset += size;
    }
  }
}

GradSync::~GradSync() = default;

void GradSync::zero_grad() {
  for (auto& b : buckets_) {
    b.flat.zero_();
    b.pending = static_cast<int64_t>(b.params.size());
    b.launched = false;
    b.work = Dist::Work();
    for (size_t j = 0; j < b.params.size(); ++j) {
      auto& p = params_[b.params[j]];
      if (!p.grad().defined() || p.grad().data_ptr() != b.views[j].data_ptr()) p.mutable_grad() = b.views[j];
    }
  }
  next_launch_ = 0;
  launch_log_.clear();
  armed_ = false;
  launched_from_hooks_ = 0;
}

void GradSync::arm() { armed_ = true; }

void GradSync::on_grad_ready(size_t k) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!armed_) return;  // an earlier micro-batch: the gradient is not final yet
  if (!order_learned_) ready_order_.push_back(k);
  Bucket& b = buckets_[bucket_of_[k]];
  if (--b.pending == 0) launch_ready_buckets(/*from_hook=*/true);
}

void GradSync::launch(Bucket& b) {
  // Sum of (g / world) over ranks = the mean gradient; dividing first keeps
  // the sum in range for low-precision gradients, as DDP does.
  b.flat.div_(static_cast<double>(dist_.world()));
  b.work = sharded() ? dist_.reduce_scatter_sum_async(b.pieces) : dist_.all_reduce_sum_async(b.flat);
  b.launched = true;
  launch_log_.push_back(b.params);
}

void GradSync::launch_ready_buckets(bool from_hook) {
  while (next_launch_ < buckets_.size() && (buckets_[next_launch_].pending <= 0 || !from_hook)) {
    launch(buckets_[next_launch_]);
    ++next_launch_;
    if (from_hook) ++launched_from_hooks_;
  }
}

double GradSync::finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
    launch_ready_buckets(/*from_hook=*/false);
  }
  auto t0 = std::chrono::steady_clock::now();
  for (auto& b : buckets_) dist_.wait(b.work, sharded() ? "the gradient reduce-scatter" : "the gradient all-reduce");
  const double waited = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (overlap_ && !order_learned_) adopt_ready_order();
  return waited;
}

void GradSync::adopt_ready_order() {
  order_learned_ = true;
  // Parameters that got no gradient go last, in the first guess's order.
  std::vector<char> seen(params_.size(), 0);
  std::vector<size_t> order;
  for (size_t k : ready_order_)
    if (!seen[k]) seen[k] = 1, order.push_back(k);
  for (size_t k = params_.size(); k-- > 0;)
    if (!seen[k]) order.push_back(k);
  // Collectives must be issued in the same order on every rank: take rank 0's.
  std::string mine;
  for (size_t k : order) mine += std::to_string(k) + ",";
  const std::string agreed = dist_.distributed() ? dist_.exchange("grad_sync_order", mine).at(0) : mine;
  order.clear();
  size_t pos = 0;
  while (pos < agreed.size()) {
    const size_t comma = agreed.find(',', pos);
    order.push_back(std::stoul(agreed.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  if (order.size() != params_.size()) throw std::logic_error("rank 0's gradient order has the wrong length");
  // Rebuild, keeping this step's averaged gradients in the new views.
  std::vector<torch::Tensor> grads;
  for (auto& p : params_) grads.push_back(p.grad());
  build_buckets(order);
  for (auto& b : buckets_) {
    for (size_t j = 0; j < b.params.size(); ++j) {
      auto& p = params_[b.params[j]];
      b.views[j].copy_(grads[b.params[j]]);
      p.mutable_grad() = b.views[j];
    }
  }
}

}  // namespace keel
