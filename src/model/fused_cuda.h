// Fused CUDA kernels of keel's own (src/model/cuda/), the CUDA counterparts
// of fused_ops.h's CPU kernels. So far: rotate-half RoPE in one pass forward
// and backward, equal to the composite path bit for bit in fp32, bf16 and
// fp16 (each product and the sum rounded as ATen rounds them).
//
// Off by default until the GPU check has run them on a GPU:
// KEEL_CUDA_FUSED=1 turns them on. Each function returns an undefined tensor
// where it does not apply (kernels not built, switched off, not a CUDA
// tensor, a dtype or shape it does not handle), and the caller takes the
// composite path.
#pragma once

#include <torch/torch.h>

namespace keel {

// Whether this build has the CUDA kernels (LibTorch with CUDA and nvcc).
bool fused_cuda_kernels_built();
// Whether they run: built, KEEL_CUDA_FUSED=1 (or set_fused_cuda_kernels), and
// no CompositeOnly guard alive on this thread.
bool fused_cuda_kernels_enabled();
// For tests: force on or off; reset() goes back to KEEL_CUDA_FUSED.
void set_fused_cuda_kernels(bool on);
void reset_fused_cuda_kernels();

// Rotate-half RoPE on a CUDA x [B, T, heads, D] (fp32, bf16 or fp16; last
// dimension contiguous) with tables cos, sin [>= T, D] (converted to x's
// dtype): x * cos + rotate_half(x) * sin, with its own backward.
torch::Tensor fused_cuda_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace keel
