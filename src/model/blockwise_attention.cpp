#include "model/blockwise_attention.h"

#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <limits>

namespace keel {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr double kInf = std::numeric_limits<double>::infinity();

// The geometry shared by forward and backward. Query heads are grouped by the
// key/value head they read: a block of queries is [B, Hkv, G * rows, D], row
// g * rows + r being query head kv * G + g at position start + r, so one
// matmul against that kv head's keys serves the whole group.
struct Geometry {
  int64_t B, H, Hkv, G, T, D;
  explicit Geometry(const torch::Tensor& q, const torch::Tensor& k)
      : B(q.size(0)), H(q.size(1)), Hkv(k.size(1)), G(q.size(1) / k.size(1)), T(q.size(2)), D(q.size(3)) {}

  // [B, H, rows, D] slice of a per-query-head tensor, grouped: [B, Hkv, G * rows, D].
  torch::Tensor group(const torch::Tensor& t, int64_t start, int64_t rows) const {
    return t.narrow(2, start, rows).reshape({B, Hkv, G * rows, t.size(3)});
  }
  // The inverse, for writing a block back: [B, Hkv, G * rows, X] -> [B, H, rows, X].
  torch::Tensor ungroup(const torch::Tensor& t, int64_t rows) const {
    return t.reshape({B, Hkv, G, rows, t.size(-1)}).reshape({B, H, rows, t.size(-1)});
  }
  // True where key start_k + c lies after query start_q + r: [G * rows, cols].
  torch::Tensor future(int64_t start_q, int64_t rows, int64_t start_k, int64_t cols, const torch::Device& dev) const {
    auto opts = torch::TensorOptions().dtype(torch::kInt64).device(dev);
    auto qpos = torch::arange(start_q, start_q + rows, opts).view({rows, 1});
    auto kpos = torch::arange(start_k, start_k + cols, opts).view({1, cols});
    return kpos.gt(qpos).repeat({G, 1});
  }
};

// One block's logits, in fp32, computed in place to keep the passes over a
// block few (at CPU block sizes each pass is a trip to memory). q arrives
// pre-scaled by scale / cap (scale alone without a softcap), so z = q.k is
// raw / cap and the softcap is cap * tanh(z).
struct BlockLogits {
  torch::Tensor z;       // q.k with the pre-scaled q; becomes the capped, clamped, masked logit
  torch::Tensor tanh;    // tanh(z) before it is overwritten (softcap; backward only)
  torch::Tensor inside;  // within the clamp (clamp; backward only)
  torch::Tensor future;  // undefined when the block has no future position
};

BlockLogits block_logits(const torch::Tensor& qb, const torch::Tensor& kb, const Geometry& g, int64_t q0,
                         int64_t rows, int64_t k0, int64_t cols, double softcap, double clamp, bool backward,
                         torch::Tensor* raw_abs_max) {
  BlockLogits b;
  b.z = torch::matmul(qb, kb.transpose(-2, -1));  // [B, Hkv, G*rows, cols]
  if (b.z.scalar_type() != torch::kFloat32) b.z = b.z.to(torch::kFloat32);
  if (k0 + cols - 1 > q0) b.future = g.future(q0, rows, k0, cols, qb.device());  // some key after some query
  if (raw_abs_max) {  // max |raw| = cap * max |z| over causal positions, per query row group
    auto a = b.z.abs();
    if (b.future.defined()) a.masked_fill_(b.future, 0);
    *raw_abs_max = a.view({g.B, g.Hkv, g.G, rows, cols}).amax({0, 3, 4}) * (softcap > 0 ? softcap : 1.0);
  }
  if (softcap > 0) {
    b.z.tanh_();
    if (backward) b.tanh = b.z.clone();
    b.z.mul_(softcap);
  }
  if (clamp > 0) {
    if (backward) b.inside = b.z.ge(-clamp).logical_and_(b.z.le(clamp));  // clamp's gradient passes at the bounds
    b.z.clamp_(-clamp, clamp);
  }
  if (b.future.defined()) b.z.masked_fill_(b.future, -kInf);
  return b;
}

struct BlockwiseFn : public torch::autograd::Function<BlockwiseFn> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale, double softcap, double clamp, int64_t block_q,
                               int64_t block_k, bool want_head_max, bool want_stats) {
    RECORD_FUNCTION("keel::blockwise_attention", std::vector<c10::IValue>());
    // Dtypes are chosen here, not by autocast: scores in the inputs' dtype, softmax in fp32.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const Geometry g(q, k);
    const auto f32 = q.options().dtype(torch::kFloat32);
    const auto qs = q * (softcap > 0 ? scale / softcap : scale);
    auto out = torch::empty({g.B, g.H, g.T, g.D}, q.options());
    auto lse = torch::empty({g.B, g.H, g.T, 1}, f32);
    auto head_max = torch::zeros({g.Hkv, g.G}, f32);
    auto max_capped = torch::zeros({}, f32), entropy_sum = torch::zeros({}, f32);
    for (int64_t q0 = 0; q0 < g.T; q0 += block_q) {
      const int64_t rows = std::min(block_q, g.T - q0);
      auto qb = g.group(qs, q0, rows);
      auto m = torch::full({g.B, g.Hkv, g.G * rows, 1}, -kInf, f32);
      auto l = torch::zeros_like(m), expected = torch::zeros_like(m);  // sum of p, sum of p * logit
      auto acc = torch::zeros({g.B, g.Hkv, g.G * rows, g.D}, f32);
      for (int64_t k0 = 0; k0 < q0 + rows; k0 += block_k) {  // key blocks that start before the queries end
        const int64_t cols = std::min(block_k, g.T - k0);
        auto kb = k.narrow(2, k0, cols), vb = v.narrow(2, k0, cols);
        torch::Tensor block_max;
        BlockLogits b = block_logits(qb, kb, g, q0, rows, k0, cols, softcap, clamp, /*backward=*/false,
                                     want_head_max ? &block_max : nullptr);
        if (want_head_max) head_max = torch::maximum(head_max, block_max);
        auto m_new = torch::maximum(m, b.z.amax(-1, true));
        auto alpha = torch::exp(m - m_new);
        torch::Tensor finite;  // the logits, future positions at 0 (statistics only)
        if (want_stats) {
          finite = b.future.defined() ? b.z.masked_fill(b.future, 0) : b.z.clone();
          max_capped = torch::maximum(max_capped, finite.abs().amax());
        }
        auto& p = b.z;  // in place: exp(logit - m_new), 0 at future positions
        p.sub_(m_new).exp_();
        l.mul_(alpha).add_(p.sum(-1, true));
        acc.mul_(alpha).add_(torch::matmul(p.to(v.scalar_type()), vb).to(torch::kFloat32));
        if (want_stats) expected.mul_(alpha).add_((p * finite).sum(-1, true));
        m = m_new;
      }
      out.narrow(2, q0, rows).copy_(g.ungroup(acc.div_(l), rows));
      auto block_lse = m + torch::log(l);
      lse.narrow(2, q0, rows).copy_(g.ungroup(block_lse, rows));
      // Entropy of a row: -sum p log p = lse - E_p[logit].
      if (want_stats) entropy_sum = entropy_sum + (block_lse - expected / l).sum();
    }
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["clamp"] = clamp;
    ctx->saved_data["block_q"] = block_q;
    ctx->saved_data["block_k"] = block_k;
    auto entropy = entropy_sum / static_cast<double>(g.B * g.H * g.T);
    auto heads = head_max.reshape({g.H});
    ctx->mark_non_differentiable({heads, entropy, max_capped});
    return {out, heads, entropy, max_capped};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("keel::blockwise_attention_backward", std::vector<c10::IValue>());
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const double scale = ctx->saved_data["scale"].toDouble(), softcap = ctx->saved_data["softcap"].toDouble(),
                 clamp = ctx->saved_data["clamp"].toDouble();
    const int64_t block_q = ctx->saved_data["block_q"].toInt(), block_k = ctx->saved_data["block_k"].toInt();
    const Geometry g(q, k);
    const auto qs = q * (softcap > 0 ? scale / softcap : scale);
    auto dout = grads[0].defined() ? grads[0] : torch::zeros_like(out);
    // D_i = rowsum(dO * O): the softmax backward's per-row term.
    auto rowdot = (dout.to(torch::kFloat32) * out.to(torch::kFloat32)).sum(-1, true);  // [B, H, T, 1]
    auto dq = torch::empty({g.B, g.H, g.T, g.D}, q.options().dtype(torch::kFloat32));
    auto dk = torch::zeros({g.B, g.Hkv, g.T, g.D}, q.options().dtype(torch::kFloat32));
    auto dv = torch::zeros_like(dk);
    for (int64_t q0 = 0; q0 < g.T; q0 += block_q) {
      const int64_t rows = std::min(block_q, g.T - q0);
      auto qsb = g.group(qs, q0, rows), qb = g.group(q, q0, rows), dob = g.group(dout, q0, rows);
      auto lse_b = g.group(lse, q0, rows), rowdot_b = g.group(rowdot, q0, rows);
      auto dqb = torch::zeros({g.B, g.Hkv, g.G * rows, g.D}, q.options().dtype(torch::kFloat32));
      for (int64_t k0 = 0; k0 < q0 + rows; k0 += block_k) {
        const int64_t cols = std::min(block_k, g.T - k0);
        auto kb = k.narrow(2, k0, cols), vb = v.narrow(2, k0, cols);
        BlockLogits b = block_logits(qsb, kb, g, q0, rows, k0, cols, softcap, clamp, /*backward=*/true, nullptr);
        auto& p = b.z;  // in place: exp(logit - lse), 0 at future positions
        p.sub_(lse_b).exp_();
        dv.narrow(2, k0, cols).add_(torch::matmul(p.to(dout.scalar_type()).transpose(-2, -1), dob).to(torch::kFloat32));
        auto ds = torch::matmul(dob, vb.transpose(-2, -1)).to(torch::kFloat32);  // dp, then in place:
        ds.sub_(rowdot_b).mul_(p);                                   // d loss / d capped logit
        if (b.inside.defined()) ds.mul_(b.inside);                   // clamped: no gradient
        if (b.tanh.defined()) ds.addcmul_(ds, b.tanh.mul_(b.tanh), -1.0);  // * (1 - tanh^2): d raw
        auto ds_in = ds.to(q.scalar_type());
        dqb.add_(torch::matmul(ds_in, kb).to(torch::kFloat32), scale);  // d raw / d q = scale * k
        dk.narrow(2, k0, cols).add_(torch::matmul(ds_in.transpose(-2, -1), qb).to(torch::kFloat32), scale);
      }
      dq.narrow(2, q0, rows).copy_(g.ungroup(dqb, rows));
    }
    return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type()),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::ScalarType attention_dtype(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const auto device = q.device().type();
  if (at::autocast::is_autocast_enabled(device)) return at::autocast::get_autocast_dtype(device);
  return c10::promoteTypes(c10::promoteTypes(q.scalar_type(), k.scalar_type()), v.scalar_type());
}

int64_t blockwise_block_size(torch::DeviceType device, int64_t seq_len) {
  if (device != torch::kCUDA) return 128;
  int64_t block = 256;
  while (block < 1024 && block * 8 < seq_len) block *= 2;
  return block;
}

BlockwiseResult blockwise_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const BlockwiseOptions& o) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "blockwise_attention: q, k, v must be [B, H, T, D]");
  TORCH_CHECK(k.sizes() == v.sizes() && q.size(0) == k.size(0) && q.size(2) == k.size(2) && q.size(3) == k.size(3),
              "blockwise_attention: q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes(), " do not fit");
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "blockwise_attention: query heads ", q.size(1),
              " are not a multiple of key/value heads ", k.size(1));
  TORCH_CHECK(o.block_q > 0 && o.block_k > 0, "blockwise_attention: block sizes must be positive");
  // One dtype for q, k and v, chosen as autocast chooses it for SDPA (its
  // lower-precision list): an fp32 QK-Norm output (L2, LayerNorm) meets a
  // bf16 v under autocast, and the custom function, which runs with
  // autocast excluded, would otherwise multiply mismatched dtypes. The casts
  // are autograd ops, so each input's gradient returns in its own dtype.
  const auto dtype = attention_dtype(q, k, v);
  auto cast = [dtype](const torch::Tensor& t) { return t.scalar_type() == dtype ? t : t.to(dtype); };
  auto outs = BlockwiseFn::apply(cast(q), cast(k), cast(v), o.scale, o.softcap.value_or(0.0), o.clamp.value_or(0.0), o.block_q,
                                 o.block_k, o.head_max, o.stats);
  BlockwiseResult r;
  r.out = outs[0];
  if (o.head_max) r.head_max = outs[1];
  if (o.stats) {
    r.entropy = outs[2];
    r.max_capped = outs[3];
  }
  return r;
}

}  // namespace keel
