// Counts the operators a stretch of code dispatches, as a stand-in for kernel
// launches (issue: "count kernels per step"), on the CPU as on CUDA and
// without a profiler build: a global RecordFunction callback sees every
// dispatcher call, on every thread (autograd's included).
//
// An operator counts as a kernel when it is a leaf (no operator other than
// a metadata one ran inside it: at::linear is not, the addmm inside it is)
// and it is not itself one of
// the metadata-only operators (views, reshapes, empty allocations, no-op
// casts), which launch nothing. keel's own fused CPU kernels record
// themselves as "keel::<name>" (fused_ops.cpp) and count as one kernel each.
// On CUDA one operator is usually one kernel; a cuBLAS GEMM or a flash
// attention backward may launch two or three, so the CUDA figure is a lower
// bound on launches, comparable between builds of keel.
#pragma once

#include <ATen/record_function.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace keel {

struct OpCounts {
  int64_t kernels = 0;                    // leaf operators that do work
  int64_t dispatches = 0;                 // every operator call, nested ones included
  std::map<std::string, int64_t> by_name; // kernels by operator name
  // With record_shapes: each kernel's name and its first tensor input's sizes, in order.
  std::vector<std::pair<std::string, std::vector<int64_t>>> events;
};

// Counts while alive. One at a time per process (a second throws).
class OpCounter {
 public:
  explicit OpCounter(bool record_shapes = false);
  ~OpCounter();
  OpCounter(const OpCounter&) = delete;
  OpCounter& operator=(const OpCounter&) = delete;
  OpCounts counts() const;  // so far

 private:
  at::CallbackHandle handle_ = 0;
};

// Whether an operator of this name launches no kernel (views, metadata, allocations).
bool is_metadata_op(const std::string& name);

}  // namespace keel
