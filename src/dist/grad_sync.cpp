#include "dist/grad_sync.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <chrono>

namespace keel {

GradSync::GradSync(const std::vector<torch::Tensor>& params, Dist& dist, double bucket_mb, bool overlap)
    : params_(params), dist_(dist), overlap_(overlap), bucket_of_(params.size()) {
  const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1024 * 1024));
  // Reverse registration order: the head and the last blocks finish first.
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const auto& p = params_[k];
    const bool new_bucket = buckets_.empty() || bytes >= cap ||
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
    int64_t n = 0;
    for (size_t k : b.params) n += params_[k].numel();
    b.flat = torch::zeros({n}, b.flat.options());
    int64_t offset = 0;
    for (size_t k : b.params) {
      b.views.push_back(b.flat.narrow(0, offset, params_[k].numel()).view(params_[k].sizes()));
      offset += params_[k].numel();
    }
  }
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
  armed_ = false;
  launched_from_hooks_ = 0;
}

void GradSync::arm() { armed_ = true; }

void GradSync::on_grad_ready(size_t k) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!armed_) return;  // an earlier micro-batch: the gradient is not final yet
  Bucket& b = buckets_[bucket_of_[k]];
  if (--b.pending == 0) launch_ready_buckets(/*from_hook=*/true);
}

void GradSync::launch(Bucket& b) {
  // Sum of (g / world) over ranks = the mean gradient; dividing first keeps
  // the sum in range for low-precision gradients, as DDP does.
  b.flat.div_(static_cast<double>(dist_.world()));
  b.work = dist_.all_reduce_sum_async(b.flat);
  b.launched = true;
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
  for (auto& b : buckets_) dist_.wait(b.work, "the gradient all-reduce");
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace keel
