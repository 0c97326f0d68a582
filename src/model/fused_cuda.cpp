#include "model/fused_cuda.h"

#include <cstdlib>
#include <cstring>

#include "model/fused_ops.h"

#ifdef KEEL_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "model/cuda/rope_kernel.h"
#include "model/cuda/xent_kernel.h"
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

KernelDtype kernel_dtype(torch::ScalarType t) {
  return t == torch::kFloat32 ? KernelDtype::f32 : t == torch::kBFloat16 ? KernelDtype::bf16 : KernelDtype::f16;
}
bool kernel_dtype_ok(torch::ScalarType t) {
  return t == torch::kFloat32 || t == torch::kBFloat16 || t == torch::kFloat16;
}
void* current_stream(const torch::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

// y = RoPE of x (or its transpose), a fresh contiguous tensor.
torch::Tensor run_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, bool backward) {
  auto y = torch::empty(x.sizes(), x.options().memory_format(c10::MemoryFormat::Contiguous));
  const rope::Layout layout{x.size(1), x.size(2), x.size(3), x.stride(0), x.stride(1), x.stride(2)};
  const c10::cuda::CUDAGuard on_device(x.device());  // the launch goes to x's device, whichever is current
  RECORD_FUNCTION(backward ? "keel::rope_backward" : "keel::rope", std::vector<c10::IValue>());
  const char* err = rope::launch(kernel_dtype(x.scalar_type()), x.data_ptr(), cos.data_ptr(), sin.data_ptr(), y.data_ptr(), layout, x.numel(),
                                 backward, current_stream(x));
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
  if (!kernel_dtype_ok(dt)) return {};
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

bool fused_cuda_softmax_xent(torch::Tensor& logits, const torch::Tensor& targets, int64_t vocab, double cap,
                             double inv_n, double z_coef, bool grad, torch::Tensor* lse, torch::Tensor* target_logit) {
#ifdef KEEL_WITH_CUDA_KERNELS
  if (!fused_cuda_kernels_enabled() || !logits.defined() || !logits.is_cuda() || logits.dim() != 2 ||
      !kernel_dtype_ok(logits.scalar_type()) || logits.stride(1) != 1 || logits.size(0) == 0 || vocab <= 0 ||
      vocab > logits.size(1) || !targets.defined() || !targets.is_cuda() ||
      targets.scalar_type() != torch::kInt64 || targets.numel() != logits.size(0) ||
      targets.device() != logits.device())
    return false;
  const int64_t n = logits.size(0);
  auto t = targets.reshape({n}).contiguous();
  *lse = torch::empty({n}, logits.options().dtype(torch::kFloat32));
  *target_logit = torch::empty({n}, logits.options().dtype(torch::kFloat32));
  const xent::Params p{vocab, logits.size(1), static_cast<float>(cap > 0 ? cap : 0.0), static_cast<float>(inv_n),
                       static_cast<float>(z_coef)};
  const c10::cuda::CUDAGuard on_device(logits.device());
  RECORD_FUNCTION("keel::softmax_xent", std::vector<c10::IValue>());
  const char* err = xent::launch(kernel_dtype(logits.scalar_type()), logits.data_ptr(), n, logits.stride(0),
                                 t.data_ptr<int64_t>(), p, grad, lse->data_ptr<float>(),
                                 target_logit->data_ptr<float>(), current_stream(logits));
  TORCH_CHECK(err == nullptr, "keel softmax/cross-entropy kernel: ", err ? err : "");
  return true;
#else
  return false;
#endif
}

}  // namespace keel
