// One output element of rotate-half RoPE: the code each thread of the CUDA
// kernel (rope_kernel.cu) runs, and what tests/model/test_rope_element.cpp
// runs on the CPU over every element against the composite ATen path, so
// the kernel's indexing and rounding are tested on machines without a GPU.
#pragma once

#include <c10/macros/Macros.h>

#include <cstdint>

namespace keel::rope {

// An fp32 product and sum rounded on their own: the composite path
// (x * cos + roll(x) * sin, one ATen kernel per op) rounds after each, and a
// contraction into an FMA would not.
C10_HOST_DEVICE inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
C10_HOST_DEVICE inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// v rounded to T and back: ATen computes a bf16 / fp16 op in fp32 and stores
// T, so each op of the composite rounds its result to T.
template <typename T>
C10_HOST_DEVICE inline float stored(float v) {
  return static_cast<float>(static_cast<T>(v));
}

// x is [B, T, heads, d] with its last dimension contiguous; strides in elements.
struct Layout {
  int64_t seq, heads, d;
  int64_t stride_b, stride_t, stride_h;
};

// Output element (row, j), row = (b * seq + t) * heads + head, of RoPE on x
// with tables cos, sin [seq, d] in x's dtype, h = d / 2:
//   forward   y[j] = x[j] c[j] - x[j+h] s[j]    (j < h),  x[j] c[j] + x[j-h] s[j]    (j >= h)
//   backward  y[j] = x[j] c[j] + x[j+h] s[j+h]  (j < h),  x[j] c[j] - x[j-h] s[j-h]  (j >= h)
// (the backward is the forward's transpose, with x holding dy).
template <typename T>
C10_HOST_DEVICE inline T element(const T* x, const T* cos, const T* sin, const Layout& l, int64_t row, int64_t j,
                                 bool backward) {
  const int64_t b = row / (l.seq * l.heads), t = (row / l.heads) % l.seq, head = row % l.heads;
  const T* xr = x + b * l.stride_b + t * l.stride_t + head * l.stride_h;
  const int64_t h = l.d / 2;
  const bool first = j < h;
  const int64_t partner = first ? j + h : j - h;
  const float xc = stored<T>(mul_rn(static_cast<float>(xr[j]), static_cast<float>(cos[t * l.d + j])));
  const float ps =
      stored<T>(mul_rn(static_cast<float>(xr[partner]), static_cast<float>(sin[t * l.d + (backward ? partner : j)])));
  return static_cast<T>(first != backward ? add_rn(xc, -ps) : add_rn(xc, ps));
}

}  // namespace keel::rope
