// The CUDA RoPE kernel's per-element code (src/model/cuda/rope_element.h),
// run on the CPU over every element, against apply_rope's composite path
// (the one CUDA runs without the kernel): forward and backward, bit for bit,
// in fp32, bf16 and fp16, on a strided view like the q of a fused qkv
// projection. tests/gpu/test_cuda.cpp checks the kernel itself on a GPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/cuda/rope_element.h"
#include "model/fused_cuda.h"
#include "model/fused_ops.h"
#include "model/rope.h"

namespace {

// What the kernel computes: y[row, j] = rope::element(...) for every element.
template <typename T>
torch::Tensor rope_by_elements(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                               bool backward) {
  const int64_t T_len = x.size(1), d = x.size(3);
  auto c = cos.narrow(0, 0, T_len).to(x.scalar_type()).contiguous();
  auto s = sin.narrow(0, 0, T_len).to(x.scalar_type()).contiguous();
  const keel::rope::Layout layout{T_len, x.size(2), d, x.stride(0), x.stride(1), x.stride(2)};
  auto y = torch::empty(x.sizes(), x.options().memory_format(c10::MemoryFormat::Contiguous));
  T* out = y.data_ptr<T>();
  for (int64_t i = 0; i < x.numel(); ++i)
    out[i] = keel::rope::element(x.data_ptr<T>(), c.data_ptr<T>(), s.data_ptr<T>(), layout, i / d, i % d, backward);
  return y;
}

torch::Tensor by_elements(const torch::Tensor& x, const keel::RopeTables& t, bool backward) {
  switch (x.scalar_type()) {
    case torch::kFloat32: return rope_by_elements<float>(x, t.cos, t.sin, backward);
    case torch::kBFloat16: return rope_by_elements<c10::BFloat16>(x, t.cos, t.sin, backward);
    default: return rope_by_elements<c10::Half>(x, t.cos, t.sin, backward);
  }
}

TEST(RopeElement, EqualsTheCompositeBitForBitForwardAndBackward) {
  const int64_t B = 2, T = 7, heads = 3, D = 16;
  auto tables = keel::make_rope_tables(12, D, 10000.0, torch::kCPU);
  torch::manual_seed(3);
  for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    const std::string what = c10::toString(dtype);
    // q of a fused [B, T, 3 * heads, D] projection: strides (T*3*heads*D, 3*heads*D, D, 1).
    auto qkv = (torch::randn({B, T, 3 * heads, D}) * 3).to(dtype);
    auto x = qkv.narrow(2, heads, heads).detach().requires_grad_(true);
    auto dy = torch::randn({B, T, heads, D}).to(dtype);
    torch::Tensor ref;
    {
      keel::CompositeOnly composite;
      ref = keel::apply_rope(x, tables);
      ref.backward(dy);
    }
    ASSERT_FALSE(x.is_contiguous());
    EXPECT_TRUE(torch::equal(by_elements(x.detach(), tables, false), ref.detach())) << what << " forward";
    EXPECT_TRUE(torch::equal(by_elements(dy, tables, true), x.grad())) << what << " backward";
  }
}

TEST(RopeElement, TheCudaKernelDeclinesOnTheCpu) {
  auto tables = keel::make_rope_tables(8, 8, 10000.0, torch::kCPU);
  keel::set_fused_cuda_kernels(true);
  EXPECT_FALSE(keel::fused_cuda_rope(torch::randn({1, 4, 2, 8}), tables.cos, tables.sin).defined());
  EXPECT_EQ(keel::fused_cuda_kernels_enabled(), keel::fused_cuda_kernels_built());
  {
    keel::CompositeOnly composite;
    EXPECT_FALSE(keel::fused_cuda_kernels_enabled());
  }
  keel::set_fused_cuda_kernels(false);
  EXPECT_FALSE(keel::fused_cuda_kernels_enabled());
  keel::reset_fused_cuda_kernels();
}

}  // namespace
