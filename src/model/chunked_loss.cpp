#include "model/chunked_loss.h"

#include "model/fused_cuda.h"
#include "model/fused_ops.h"
#include "model/fused_xent.h"

#include <ATen/autocast_mode.h>

#include <limits>

namespace keel {

namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The softcap and the padded-column mask on one chunk's logits s (in the
// accumulation dtype, fp32 or fp64), in place: the composite path, which CUDA
// runs. `tanh_out` (softcap only) receives tanh(x / cap) for the derivative.
void cap_and_mask(Tensor& s, int64_t vocab, double cap, Tensor* tanh_out) {
  if (cap > 0) {
    s.div_(cap).tanh_();
    if (tanh_out) *tanh_out = s.clone();
    s.mul_(cap);
  }
  const int64_t padded = s.size(1);
  if (padded > vocab) s.narrow(1, vocab, padded - vocab).fill_(-std::numeric_limits<double>::infinity());
}

// The loss and, when an input needs a gradient, the gradient of
// total = mean(ce) + coef * mean(lse^2) with respect to hidden and head,
// formed chunk by chunk in the forward (as Liger's fused linear
// cross-entropy): three matmuls per chunk, as the whole-logits path has, and
// no logits to keep or recompute. backward() only scales by the incoming
// gradient; ce and z are outputs for logging, not differentiable.
struct ChunkedHeadLossFn : public torch::autograd::Function<ChunkedHeadLossFn> {
  // cap <= 0: no softcap; compute < 0: the hidden states' dtype.
  static variable_list forward(AutogradContext* ctx, const Tensor& hidden, const Tensor& head, const Tensor& targets,
                               int64_t chunk, int64_t vocab, double cap, double z_coef, int64_t compute,
                               bool want_grad) {
    torch::NoGradGuard no_grad;
    const auto cdt = compute < 0 ? hidden.scalar_type() : static_cast<torch::ScalarType>(compute);
    const auto acc = at::promote_types(hidden.scalar_type(), torch::kFloat32);
    const int64_t N = hidden.size(0);
    const double inv_n = 1.0 / static_cast<double>(N);
    auto w = head.to(cdt);
    auto ce_sum = torch::zeros({}, hidden.options().dtype(acc)), z_sum = torch::zeros({}, hidden.options().dtype(acc));
    Tensor d_hidden, d_head;
    if (want_grad) {
      d_hidden = torch::empty_like(hidden);
      d_head = torch::zeros(head.sizes(), head.options().dtype(acc));
    }
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
      const int64_t n = std::min(chunk, N - r0);
      auto h = hidden.narrow(0, r0, n).to(cdt);
      auto t_idx = targets.narrow(0, r0, n).unsqueeze(1);  // shape: [n, 1]
      auto s = keel::linear(h, w);  // h W^T, shape: [n, padded_vocab]; oneDNN on the CPU, as the head's forward
      Tensor ds;
      Tensor lse_rows, target_rows;  // shape: [n] each
      // The kernels: cap, log-sum-exp and (in place) the gradient in one pass
      // over each row. CUDA's (where switched on) reads the logits in the
      // compute dtype and rounds the gradient to it; the CPU's and the
      // composite take them in the accumulation dtype.
      const auto rows = targets.narrow(0, r0, n);
      if (fused_cuda_softmax_xent(s, rows, vocab, cap, inv_n, z_coef, want_grad, &lse_rows, &target_rows) ||
          fused_cpu_softmax_xent(s = s.to(acc), rows, vocab, cap, inv_n, z_coef, want_grad, &lse_rows,
                                 &target_rows)) {
        ce_sum += (lse_rows - target_rows).sum();
        z_sum += lse_rows.pow(2).sum();
        if (!want_grad) continue;
        ds = s;
      } else {
        Tensor tanh_s;
        cap_and_mask(s, vocab, cap, want_grad ? &tanh_s : nullptr);
        // One fused pass for the log-softmax; lse = s - log p at any column
        // (the target's), so no separate log-sum-exp pass.
        auto logp = at::log_softmax(s, 1);                        // shape: [n, padded_vocab]
        auto logp_target = logp.gather(1, t_idx);                 // shape: [n, 1]
        auto lse = s.gather(1, t_idx) - logp_target;              // shape: [n, 1]
        s = Tensor();
        ce_sum -= logp_target.sum();
        z_sum += lse.pow(2).sum();
        if (!want_grad) continue;
        // d total / d s = p (1 + 2 coef lse) / N - onehot / N, p = softmax(s);
        // padded columns: exp(-inf) = 0. In place: logp becomes the gradient.
        ds = logp.exp_().mul_((1.0 + 2.0 * z_coef * lse) * inv_n);
        ds.scatter_add_(1, t_idx, torch::full({n, 1}, -inv_n, ds.options()));
        if (cap > 0) ds.mul_(1.0 - tanh_s.pow_(2));  // through cap * tanh(x / cap)
      }
      auto dx = ds.to(cdt);
      // Plain GEMMs in their natural layouts (BLAS transposes for free; a
      // transposed oneDNN weight would be reordered each chunk).
      d_hidden.narrow(0, r0, n).copy_(matmul_bf16(dx, w));  // dS W (bf16 on a CPU without bf16 GEMMs: emulated)
      if (cdt == acc) d_head.addmm_(dx.t(), h);              // += dS^T h
      else d_head += matmul_bf16(dx.t(), h).to(acc);
    }
    auto ce = ce_sum * inv_n, z = z_sum * inv_n;
    if (want_grad) ctx->save_for_backward({d_hidden, d_head.to(head.scalar_type())});
    ctx->mark_non_differentiable({ce, z});
    return {ce + z_coef * z, ce, z};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const Tensor& g = grads[0];  // d(whatever) / d total, a scalar
    return {saved[0] * g.to(saved[0].scalar_type()), saved[1] * g.to(saved[1].scalar_type()),
            Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

int64_t cpu_chunk_tokens(int64_t chunk_tokens, int64_t padded_vocab, const torch::Device& device) {
  if (chunk_tokens <= 0 || !device.is_cpu() || padded_vocab <= 0) return chunk_tokens;
  return std::min(chunk_tokens, std::max<int64_t>(kMinCpuChunkTokens, kMaxCpuChunkLogits / padded_vocab));
}

LossParts model_loss(TransformerImpl& model, const torch::Tensor& idx, const torch::Tensor& targets,
                     double z_loss_coef, int64_t chunk_tokens) {
  if (chunk_tokens <= 0) return language_model_loss(model.forward(idx), targets, z_loss_coef);
  const auto& cfg = model.config();
  auto hidden = model.forward_hidden(idx);  // shape: [B, T, C]
  HeadLossOptions o;
  o.chunk_tokens = cpu_chunk_tokens(chunk_tokens, model.lm_head.size(0), idx.device());
  o.vocab_size = cfg.vocab_size;
  o.final_softcap = cfg.final_softcap;
  o.z_loss_coef = z_loss_coef;
  const auto device = idx.device().type();
  // Under autocast the head runs in its dtype, unless train.fp32_head keeps
  // it (and the gradients formed with it) in fp32.
  if (at::autocast::is_autocast_enabled(device) && model.fp32_head()) {
    AutocastOff off(device);
    return chunked_head_loss(hidden.reshape({-1, hidden.size(-1)}).to(torch::kFloat32), model.lm_head,
                             targets.reshape({-1}), o);
  }
  if (at::autocast::is_autocast_enabled(device)) o.compute_dtype = at::autocast::get_autocast_dtype(device);
  return chunked_head_loss(hidden.reshape({-1, hidden.size(-1)}), model.lm_head, targets.reshape({-1}), o);
}

LossParts chunked_head_loss(const torch::Tensor& hidden, const torch::Tensor& head, const torch::Tensor& targets,
                            const HeadLossOptions& o) {
  TORCH_CHECK(hidden.dim() == 2 && head.dim() == 2 && targets.dim() == 1 && hidden.size(0) == targets.size(0) &&
                  hidden.size(1) == head.size(1),
              "chunked_head_loss: hidden [N, C], head [V, C], targets [N]");
  const int64_t compute = o.compute_dtype ? static_cast<int64_t>(*o.compute_dtype) : -1;
  auto out = ChunkedHeadLossFn::apply(hidden, head, targets, std::max<int64_t>(1, o.chunk_tokens), o.vocab_size,
                                      o.final_softcap.value_or(0.0), o.z_loss_coef, compute,
                                      // evaluation (no grad mode) skips the gradient
                                      torch::GradMode::is_enabled() && (hidden.requires_grad() || head.requires_grad()));
  LossParts loss;
  loss.total = out[0];
  loss.ce = out[1];
  if (o.z_loss_coef > 0) loss.z = out[2];
  return loss;
}

}  // namespace keel
