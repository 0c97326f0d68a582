// bf16 autocast guards. LibTorch has no RAII guard for autocast: these set
// and restore its state for one device type.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

namespace keel {

// Turns bf16 autocast on for the current scope, on CUDA or the CPU (matmuls
// in bf16; losses, softmax and norms in fp32; fp32 weights). Its destructor
// clears autocast's cache of bf16 weight copies (docs/papers.md#libtorch-notes):
// the optimizer is about to change the weights.
class AutocastScope {
 public:
  AutocastScope(bool enabled, torch::DeviceType device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_;
  torch::DeviceType device_;
};

// Autocast off for one device type while it lives (train.fp32_head's
// matmuls, the emulated bf16 GEMMs of model/fused_ops.h).
struct AutocastOff {
  explicit AutocastOff(c10::DeviceType d) : device(d), was(at::autocast::is_autocast_enabled(d)) {
    at::autocast::set_autocast_enabled(device, false);
  }
  ~AutocastOff() { at::autocast::set_autocast_enabled(device, was); }
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;
  c10::DeviceType device;
  bool was;
};

}  // namespace keel
