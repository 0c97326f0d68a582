// The CUDA softmax / cross-entropy kernel's launcher, for fused_cuda.cpp.
#pragma once

#include <cstdint>

#include "model/cuda/kernel_dtype.h"
#include "model/cuda/xent_row.h"

namespace keel::xent {

constexpr int kThreads = 256;  // per row (block); the tree merge assumes a power of two

// Rows [rows, ld] of logits (dtype) in; lse and target_logit [rows] fp32 out;
// with `grad` the logits are overwritten in place by the gradient (rows
// read, reduced, then written by the same block). Returns null or the CUDA
// error's text.
const char* launch(KernelDtype dtype, void* logits, int64_t rows, int64_t ld, const int64_t* targets,
                   const Params& p, bool grad, float* lse, float* target_logit, void* stream);

}  // namespace keel::xent
