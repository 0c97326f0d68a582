// The CUDA RoPE kernel's launcher, for the C++ side (fused_cuda.cpp): plain
// pointers, so neither side includes the other's headers.
#pragma once

#include <cstdint>

#include "model/cuda/kernel_dtype.h"
#include "model/cuda/rope_element.h"

namespace keel::rope {

// y [B, seq, heads, d] contiguous = RoPE (or its transpose) of x with `layout`,
// n = B * seq * heads * d elements, on `stream` (a cudaStream_t). Returns
// null, or the CUDA error's text.
const char* launch(KernelDtype dtype, const void* x, const void* cos, const void* sin, void* y, const Layout& layout,
                   int64_t n, bool backward, void* stream);

}  // namespace keel::rope
