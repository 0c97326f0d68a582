// The chunked loss's softmax work in one kernel per chunk (xent_row.h): the
// composite runs log_softmax into a new tensor, two gathers, exp, a scale, a
// scatter, a cast to the compute dtype, and under a softcap a tanh, its copy
// and its derivative; here a block reads its row twice and writes it once.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_runtime.h>

#include "model/cuda/xent_kernel.h"

namespace keel::xent {
namespace {

template <typename T>
__global__ void xent_kernel(T* logits, int64_t ld, const int64_t* targets, Params p, bool grad, float* lse_out,
                            float* target_out) {
  __shared__ float sm[kThreads], ss[kThreads];
  const int64_t row = blockIdx.x;
  const int tid = threadIdx.x;
  T* x = logits + row * ld;
  const int64_t target = targets[row];
  const bool target_ok = target >= 0 && target < p.vocab;
  // Read before any thread overwrites the row with its gradient.
  const float target_logit = target_ok ? capped(static_cast<float>(x[target]), p.cap) : NAN;
  const Lse mine = thread_lse(x, p, tid, kThreads);
  sm[tid] = mine.m;
  ss[tid] = mine.s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {  // slot i takes slot i + w, level by level
    if (tid < w) {
      const Lse r = lse_merge({sm[tid], ss[tid]}, {sm[tid + w], ss[tid + w]});
      sm[tid] = r.m;
      ss[tid] = r.s;
    }
    __syncthreads();
  }
  // A target outside the vocabulary poisons the row's loss (non-finite: the step's verdict) instead of trapping.
  const float lse = target_ok ? lse_value({sm[0], ss[0]}) : NAN;
  if (tid == 0) {
    lse_out[row] = lse;
    target_out[row] = target_logit;
  }
  if (!grad) return;
  for (int64_t j = tid; j < p.padded; j += kThreads) {
    const bool pad = j >= p.vocab;
    x[j] = static_cast<T>(xent::grad(pad ? 0.0f : static_cast<float>(x[j]), j == target, pad, lse, p));
  }
}

template <typename T>
const char* run(void* logits, int64_t rows, int64_t ld, const int64_t* targets, const Params& p, bool grad,
                float* lse, float* target_logit, cudaStream_t stream) {
  xent_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(static_cast<T*>(logits), ld, targets, p, grad,
                                                                       lse, target_logit);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

const char* launch(KernelDtype dtype, void* logits, int64_t rows, int64_t ld, const int64_t* targets,
                   const Params& p, bool grad, float* lse, float* target_logit, void* stream) {
  if (rows == 0) return nullptr;
  if (rows > 0x7fffffff) return "keel::xent::launch: more rows than a grid holds";
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case KernelDtype::f32: return run<float>(logits, rows, ld, targets, p, grad, lse, target_logit, s);
    case KernelDtype::bf16: return run<c10::BFloat16>(logits, rows, ld, targets, p, grad, lse, target_logit, s);
    case KernelDtype::f16: return run<c10::Half>(logits, rows, ld, targets, p, grad, lse, target_logit, s);
  }
  return "keel::xent::launch: unknown dtype";
}

}  // namespace keel::xent
