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
//
// It also times each kernel (wall time from its start to its end on the
// thread that called it), and each composite's own time (its wall time less
// that of the operators it called): on the CPU, where an operator returns
// when its work is done, that is where a step's time goes, by operator and by
// family (op_family); on CUDA it is only the launch. The callbacks add about a
// microsecond to every dispatch, so time a step of its own, not a timed one.
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
  std::map<std::string, double> ms_by_name;  // kernels' wall time by operator name, milliseconds
  // Composites (operators that called others): their calls, and their own
  // wall time, the time inside them that no operator they called accounts
  // for. Without it a composite that computes in its own loops (CPU flash
  // attention's backward) would look like framework time.
  std::map<std::string, int64_t> composites_by_name;
  std::map<std::string, double> self_ms_by_name;
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

// The family a kernel belongs to, for a profile of the step: "matmul",
// "attention", "norm", "rope", "softmax+loss", "embedding", "optimizer",
// "copy+fill", "reduction", "elementwise" (what is left).
std::string op_family(const std::string& name);

}  // namespace keel
