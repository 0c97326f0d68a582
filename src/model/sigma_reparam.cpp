#include "model/sigma_reparam.h"

namespace keel {

SigmaReparamImpl::SigmaReparamImpl(int64_t out_features, int64_t in_features) {
  u = register_buffer("u", torch::empty({out_features}));
  v = register_buffer("v", torch::empty({in_features}));
  gamma = register_parameter("gamma", torch::ones({}));
}

torch::Tensor SigmaReparamImpl::sigma(const torch::Tensor& w) const {
  // In the vectors' precision (fp32, or fp64 in the reference tests).
  return torch::dot(u, torch::mv(w.to(u.scalar_type()), v));
}

torch::Tensor SigmaReparamImpl::scale(const torch::Tensor& w) const { return gamma / sigma(w); }

void SigmaReparamImpl::power_step(const torch::Tensor& w) {
  torch::NoGradGuard no_grad;
  auto w32 = w.detach().to(u.scalar_type());
  // Normalised in place so the buffers keep their storage (and names).
  auto nv = torch::mv(w32.t(), u);
  v.copy_(nv / nv.norm().clamp_min(1e-12));
  auto nu = torch::mv(w32, v);
  u.copy_(nu / nu.norm().clamp_min(1e-12));
}

void init_sigma_reparam(SigmaReparamImpl& s, uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto u = at::normal(0.0, 1.0, {s.u.numel()}, gen, torch::TensorOptions().dtype(torch::kFloat32));
  auto v = at::normal(0.0, 1.0, {s.v.numel()}, gen, torch::TensorOptions().dtype(torch::kFloat32));
  s.u.copy_(u / u.norm());
  s.v.copy_(v / v.norm());
  s.gamma.fill_(1.0);
}

void sigma_reparam_power_step(torch::nn::Module& model) {
  // Each SigmaReparam is registered beside its weight as "<weight>_sigma".
  for (auto& item : model.named_modules("", /*include_self=*/true)) {
    for (auto& child : item.value()->named_children()) {
      auto* s = child.value()->as<SigmaReparamImpl>();
      if (!s) continue;
      const std::string& name = child.key();  // e.g. "wq_sigma"
      const std::string weight = name.substr(0, name.size() - 6);
      auto* w = item.value()->named_parameters(/*recurse=*/false).find(weight);
      TORCH_CHECK(w, "sigma_reparam_power_step: no parameter '", weight, "' beside '", name, "'");
      s->power_step(*w);
    }
  }
}

}  // namespace keel
