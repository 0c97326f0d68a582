#include "model/fused_cuda.h"

#include <cstdlib>
#include <cstring>

#include "model/fused_ops.h"

#ifdef KEEL_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "model/cuda/rope_kernel.h"
#endif

namespace keel {
namespace {

int fused_cuda_override = -1;  // -1: KEEL_CUDA_FUSED; 0 off; 1 on

bool fused_cuda_requested() {
  static const bool on = [] {
    const char* env = std::getenv("KEEL_CUDA_FUSED");
    return env && std::strcmp(env, "1") == 0;
  }();
  return fused_cuda_override >= 0 ? fused_cuda_override == 1 : on;
}

}  // namespace

bool fused_cuda_kernels_built() {
#ifdef KEEL_WITH_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

bool fused_cuda_kernels_enabled() {
  return fused_cuda_kernels_built() && fused_cuda_requested() && !composite_only_active();
}
void set_fused_cuda_kernels(bool on) { fused_cuda_override = on ? 1 : 0; }
void reset_fused_cuda_kernels() { fused_cuda_override = -1; }

#ifdef KEEL_WITH_CUDA_KERNELS
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// y = RoPE of x (or its transpose), a fresh contiguous tensor.
torch::Tensor run_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, bool backward) {
  auto y = torch::empty(x.sizes(), x.options().memory_format(c10::MemoryFormat::Contiguous));
  const rope::Layout layout{x.size(1), x.size(2), x.size(3), x.stride(0), x.stride(1), x.stride(2)};
  const auto dtype = x.scalar_type() == torch::kFloat32    ? rope::Dtype::f32
                     : x.scalar_type() == torch::kBFloat16 ? rope::Dtype::bf16
                                                           : rope::Dtype::f16;
  RECORD_FUNCTION(backward ? "keel::rope_backward" : "keel::rope", std::vector<c10::IValue>());
  const char* err = rope::launch(dtype, x.data_ptr(), cos.data_ptr(), sin.data_ptr(), y.data_ptr(), layout, x.numel(),
                                 backward, c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
  TORCH_CHECK(err == nullptr, "keel RoPE kernel: ", err ? err : "");
  return y;
}

struct CudaRopeFn : public torch::autograd::Function<CudaRopeFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return run_rope(x, cos, sin, false);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    return {run_rope(grads[0].contiguous(), saved[0], saved[1], true), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace
#endif

torch::Tensor fused_cuda_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
#ifdef KEEL_WITH_CUDA_KERNELS
  if (!fused_cuda_kernels_enabled() || !x.is_cuda() || x.dim() != 4 || x.size(-1) % 2 != 0 || x.numel() == 0 ||
      x.stride(3) != 1)
    return {};
  const auto dt = x.scalar_type();
  if (dt != torch::kFloat32 && dt != torch::kBFloat16 && dt != torch::kFloat16) return {};
  const int64_t T = x.size(1), d = x.size(3);
  if (!cos.defined() || !sin.defined() || cos.dim() != 2 || cos.size(0) < T || cos.size(1) != d ||
      sin.sizes() != cos.sizes())
    return {};
  // The composite multiplies by the tables rounded to x's dtype: so does the kernel.
  auto c = cos.narrow(0, 0, T).to(x.device(), dt).contiguous();
  auto s = sin.narrow(0, 0, T).to(x.device(), dt).contiguous();
  return CudaRopeFn::apply(x, c, s);
#else
  return {};
#endif
}

}  // namespace keel
