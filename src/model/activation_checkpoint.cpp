#include "model/activation_checkpoint.h"

#include <ATen/autocast_mode.h>

namespace keel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs to run the forward again; held by the context as a capsule.
struct Recompute : torch::CustomClassHolder {
  std::function<torch::Tensor(const torch::Tensor&)> f;
  c10::DeviceType device = c10::DeviceType::CPU;
  bool autocast = false;
  at::ScalarType autocast_dtype = at::kBFloat16;
};

// The forward's autocast state, for the recompute: backward runs outside the
// step's AutocastScope, and a bf16 forward must be recomputed in bf16.
class AutocastAs {
 public:
  explicit AutocastAs(const Recompute& r) : device_(r.device), was_(at::autocast::is_autocast_enabled(r.device)),
                                            was_dtype_(at::autocast::get_autocast_dtype(r.device)) {
    at::autocast::set_autocast_enabled(device_, r.autocast);
    at::autocast::set_autocast_dtype(device_, r.autocast_dtype);
    if (r.autocast) at::autocast::increment_nesting();
    nested_ = r.autocast;
  }
  ~AutocastAs() {
    if (nested_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, was_);
    at::autocast::set_autocast_dtype(device_, was_dtype_);
  }

 private:
  c10::DeviceType device_;
  bool was_, nested_ = false;
  at::ScalarType was_dtype_;
};

class CheckpointFn : public torch::autograd::Function<CheckpointFn> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, c10::intrusive_ptr<Recompute> r) {
    ctx->save_for_backward({x});
    ctx->saved_data["recompute"] = c10::IValue::make_capsule(r);
    return r->f(x);  // autograd runs a Function's forward without recording a graph
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto r = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor y;
    {
      torch::AutoGradMode with_graph(true);
      AutocastAs autocast(*r);
      y = r->f(x);
    }
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpointed(const torch::Tensor& x, std::function<torch::Tensor(const torch::Tensor&)> f) {
  auto r = c10::make_intrusive<Recompute>();
  r->f = std::move(f);
  r->device = x.device().type();
  r->autocast = at::autocast::is_autocast_enabled(r->device);
  r->autocast_dtype = at::autocast::get_autocast_dtype(r->device);
  return CheckpointFn::apply(x, r);
}

}  // namespace keel
