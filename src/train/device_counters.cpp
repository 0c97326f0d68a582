#include "train/device_counters.h"

namespace keel {

DeviceCounters::DeviceCounters(torch::Device device)
    : buffer_(torch::zeros({5}, torch::TensorOptions().dtype(torch::kFloat32).device(device))),
      loss_sum_(buffer_[0]),
      z_sum_(buffer_[1]),
      grad_norm_(buffer_[2]),
      nonfinite_(buffer_[3]),
      qk_clipped_(buffer_[4]) {}

void DeviceCounters::add_step(const torch::Tensor& ce, const torch::Tensor& z, const torch::Tensor& grad_norm,
                              const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  loss_sum_.add_(ce);
  z_sum_.add_(z);
  grad_norm_.copy_(grad_norm);  // a copy: a CUDA graph rewrites its outputs on the next replay
  nonfinite_.add_(found_inf);
}

void DeviceCounters::add_qk_clipped(const torch::Tensor& heads) {
  torch::NoGradGuard no_grad;
  qk_clipped_.add_(heads);
}

DeviceCounters::Values DeviceCounters::read() const {
  auto host = buffer_.to(torch::kCPU, torch::kFloat64);  // shape: [5]; sync point on CUDA
  auto v = host.accessor<double, 1>();
  Values out;
  out.loss_sum = v[0];
  out.z_sum = v[1];
  out.grad_norm = v[2];
  out.nonfinite_steps = static_cast<int64_t>(v[3]);
  out.qk_clipped_heads = v[4];
  return out;
}

void DeviceCounters::reset_interval() {
  loss_sum_.zero_();
  z_sum_.zero_();
  qk_clipped_.zero_();
}

void DeviceCounters::set_nonfinite_steps(int64_t n) { nonfinite_.fill_(static_cast<double>(n)); }

std::vector<double> DeviceCounters::snapshot() const {
  auto host = buffer_.to(torch::kCPU, torch::kFloat64).contiguous();  // shape: [5]
  return std::vector<double>(host.data_ptr<double>(), host.data_ptr<double>() + host.numel());
}

bool DeviceCounters::restore(const std::vector<double>& values) {
  if (values.size() != static_cast<size_t>(buffer_.numel())) return false;
  torch::NoGradGuard no_grad;
  buffer_.copy_(torch::tensor(values, torch::kFloat64).to(torch::kFloat32));
  return true;
}

}  // namespace keel
