// The values each training step leaves on the device and the host reads only
// now and then (logging steps; every step on the CPU, where it is free): one
// buffer, so reading them all is one device-to-host copy.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace keel {

class DeviceCounters {
 public:
  explicit DeviceCounters(torch::Device device);

  // After each step, on the device: its cross-entropy and z-loss, its
  // gradient norm (the last one is kept) and the non-finite verdict (0 or 1).
  void add_step(const torch::Tensor& ce, const torch::Tensor& z, const torch::Tensor& grad_norm,
                const torch::Tensor& found_inf);
  void add_qk_clipped(const torch::Tensor& heads);  // QK-clip's rescaled head count of a step

  struct Values {
    double loss_sum = 0, z_sum = 0;  // over the steps since reset_interval()
    double grad_norm = 0;            // of the last step
    int64_t nonfinite_steps = 0;     // over the whole run
    double qk_clipped_heads = 0;     // since reset_interval()
  };
  Values read() const;  // the one copy to the host (a sync on CUDA)
  void reset_interval();
  void set_nonfinite_steps(int64_t n);  // resume
  // The whole buffer, exactly (float32 values are exact in a double): a
  // checkpoint taken inside a logging interval carries its sums, so the next
  // record after a resume equals an uninterrupted run's.
  std::vector<double> snapshot() const;  // sync point on CUDA
  bool restore(const std::vector<double>& values);  // false (and nothing changed) on a wrong length

 private:
  torch::Tensor buffer_;  // float32 [5]; the members below are views into it
  torch::Tensor loss_sum_, z_sum_, grad_norm_, nonfinite_, qk_clipped_;
};

}  // namespace keel
