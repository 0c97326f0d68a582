// Fused CUDA kernels of keel's own (src/model/cuda/), the CUDA counterparts
// of fused_ops.h's CPU kernels: rotate-half RoPE in one pass forward and
// backward, equal to the composite path bit for bit in fp32, bf16 and fp16
// (each product and the sum rounded as ATen rounds them); the chunked loss's
// softmax work in one kernel per chunk, as fused_xent.h on the CPU.
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

// One chunk of the output head's loss on CUDA logits [n, padded] (fp32, bf16
// or fp16, rows contiguous), as fused_cpu_softmax_xent (fused_xent.h): fills
// lse and target_logit [n] (fp32) and with `grad` overwrites the logits in
// place by d(mean(ce) + z_coef mean(lse^2)) / d(logits before the cap),
// rounded to their dtype. A target outside [0, vocab) gives its row a NaN
// loss. Returns false, touching nothing, where it does not apply.
bool fused_cuda_softmax_xent(torch::Tensor& logits, const torch::Tensor& targets, int64_t vocab, double cap,
                             double inv_n, double z_coef, bool grad, torch::Tensor* lse, torch::Tensor* target_logit);

}  // namespace keel
