#include "model/activation_checkpoint.h"

#include <ATen/autocast_mode.h>

#include <stdexcept>

namespace keel {

namespace {

thread_local LinearOutputCache* g_linear_cache = nullptr;

// Makes `cache` this thread's active one for its lifetime.
class UsingLinearCache {
 public:
  explicit UsingLinearCache(LinearOutputCache* cache) : was_(g_linear_cache) { g_linear_cache = cache; }
  ~UsingLinearCache() { g_linear_cache = was_; }

 private:
  LinearOutputCache* was_;
};

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs to run the forward again; held by the context as a capsule.
struct Recompute : torch::CustomClassHolder {
  std::function<torch::Tensor(const torch::Tensor&)> f;
  c10::DeviceType device = c10::DeviceType::CPU;
  std::shared_ptr<LinearOutputCache> linears;  // selective: the forward's linear outputs
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
    UsingLinearCache record(r->linears.get());
    return r->f(x);  // autograd runs a Function's forward without recording a graph
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto r = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor y;
    {
      torch::AutoGradMode with_graph(true);
      AutocastAs autocast(*r);
      if (r->linears) r->linears->replaying = true, r->linears->next = 0;
      UsingLinearCache replay(r->linears.get());
      y = r->f(x);
      if (r->linears && r->linears->next != r->linears->outputs.size())
        throw std::logic_error("selective checkpointing: the recompute used fewer linear outputs than the forward made");
    }
    if (r->linears) r->linears.reset();  // the kept outputs now live in the recomputed graph only
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), torch::Tensor()};
  }
};

}  // namespace

LinearOutputCache* active_linear_cache() { return g_linear_cache; }

torch::Tensor LinearOutputCache::take(c10::IntArrayRef expected_sizes) {
  if (next >= outputs.size())
    throw std::logic_error("selective checkpointing: the recompute called more linear layers than the forward");
  torch::Tensor y = outputs[next++];
  if (y.sizes() != expected_sizes)
    throw std::logic_error("selective checkpointing: a replayed linear output has another shape than the forward's");
  return y;
}

namespace {

c10::intrusive_ptr<Recompute> recompute_of(const torch::Tensor& x, std::function<torch::Tensor(const torch::Tensor&)> f) {
  auto r = c10::make_intrusive<Recompute>();
  r->f = std::move(f);
  r->device = x.device().type();
  r->autocast = at::autocast::is_autocast_enabled(r->device);
  r->autocast_dtype = at::autocast::get_autocast_dtype(r->device);
  return r;
}

}  // namespace

torch::Tensor checkpointed(const torch::Tensor& x, std::function<torch::Tensor(const torch::Tensor&)> f) {
  return CheckpointFn::apply(x, recompute_of(x, std::move(f)));
}

torch::Tensor checkpointed_keeping_linears(const torch::Tensor& x,
                                           std::function<torch::Tensor(const torch::Tensor&)> f) {
  auto r = recompute_of(x, std::move(f));
  r->linears = std::make_shared<LinearOutputCache>();
  return CheckpointFn::apply(x, r);
}

}  // namespace keel
