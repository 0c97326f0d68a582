// Rotate-half RoPE in one pass, forward and backward: the composite path runs
// a roll (a copy), two multiplies and an add, and the backward as many again.
// Each thread writes one element with rope::element (rope_element.h).
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_runtime.h>

#include "model/cuda/rope_kernel.h"

namespace keel::rope {
namespace {

template <typename T>
__global__ void rope_kernel(const T* x, const T* cos, const T* sin, T* y, Layout layout, int64_t n, bool backward) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    y[i] = element(x, cos, sin, layout, i / layout.d, i % layout.d, backward);
}

template <typename T>
const char* run(const void* x, const void* cos, const void* sin, void* y, const Layout& layout, int64_t n,
                bool backward, cudaStream_t stream) {
  constexpr int threads = 256;
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, int64_t{1} << 16);
  rope_kernel<T><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(cos), static_cast<const T*>(sin), static_cast<T*>(y), layout,
      n, backward);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

const char* launch(KernelDtype dtype, const void* x, const void* cos, const void* sin, void* y, const Layout& layout,
                   int64_t n, bool backward, void* stream) {
  if (n == 0) return nullptr;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case KernelDtype::f32: return run<float>(x, cos, sin, y, layout, n, backward, s);
    case KernelDtype::bf16: return run<c10::BFloat16>(x, cos, sin, y, layout, n, backward, s);
    case KernelDtype::f16: return run<c10::Half>(x, cos, sin, y, layout, n, backward, s);
  }
  return "keel::rope::launch: unknown dtype";
}

}  // namespace keel::rope
