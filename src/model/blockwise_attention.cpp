#include "model/blockwise_attention.h"

#include "model/fused_ops.h"

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

// Which pairs of a (query block, key block) take part, under a document mask.
enum class BlockPlan { skip, causal, masked };

// From the host copy of the segments (int64 [B, T], non-decreasing per row):
// skip when in every row all keys lie in earlier documents than all queries;
// causal when every row's queries and keys are one document; masked otherwise.
BlockPlan plan_block(const torch::Tensor& seg_host, int64_t q0, int64_t rows, int64_t k0, int64_t cols) {
  if (!seg_host.defined()) return BlockPlan::causal;
  const int64_t B = seg_host.size(0), T = seg_host.size(1);
  const int64_t* s = seg_host.data_ptr<int64_t>();
  bool skip = true, one_document = true;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* row = s + b * T;
    const int64_t q_first = row[q0], q_last = row[q0 + rows - 1], k_first = row[k0], k_last = row[k0 + cols - 1];
    if (k_last >= q_first) skip = false;
    if (std::min(q_first, k_first) != std::max(q_last, k_last)) one_document = false;
  }
  return skip ? BlockPlan::skip : one_document ? BlockPlan::causal : BlockPlan::masked;
}

// True where a key of another document than the query's: [B, 1, G * rows, cols].
torch::Tensor other_document(const torch::Tensor& seg, const Geometry& g, int64_t q0, int64_t rows, int64_t k0,
                             int64_t cols) {
  auto sq = seg.narrow(1, q0, rows).view({g.B, 1, 1, rows, 1}).expand({g.B, 1, g.G, rows, 1});
  auto sk = seg.narrow(1, k0, cols).view({g.B, 1, 1, 1, cols});
  return sq.ne(sk).reshape({g.B, 1, g.G * rows, cols});
}

// One block's logits, in fp32, computed in place to keep the passes over a
// block few (at CPU block sizes each pass is a trip to memory). q arrives
// pre-scaled by scale / cap (scale alone without a softcap), so z = q.k is
// raw / cap and the softcap is cap * tanh(z).
struct BlockLogits {
  torch::Tensor z;       // q.k with the pre-scaled q; becomes the capped, clamped, masked logit
  torch::Tensor tanh;    // tanh(z) before it is overwritten (softcap; backward only)
  torch::Tensor inside;  // within the clamp (clamp; backward only)
  torch::Tensor future;  // masked positions (future or another document); undefined when none
};

BlockLogits block_logits(const torch::Tensor& qb, const torch::Tensor& kb, const Geometry& g, int64_t q0,
                         int64_t rows, int64_t k0, int64_t cols, double softcap, double clamp, bool backward,
                         torch::Tensor* raw_abs_max, const torch::Tensor& segments = {}) {
  BlockLogits b;
  b.z = matmul_bf16(qb, kb.transpose(-2, -1));  // [B, Hkv, G*rows, cols]
  if (b.z.scalar_type() != torch::kFloat32) b.z = b.z.to(torch::kFloat32);
  if (k0 + cols - 1 > q0) b.future = g.future(q0, rows, k0, cols, qb.device());  // some key after some query
  if (segments.defined()) {  // shape: [B, 1, G*rows, cols], broadcast over kv heads
    auto other = other_document(segments, g, q0, rows, k0, cols);
    b.future = b.future.defined() ? other.logical_or_(b.future) : other;
  }
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

// The document segments, passed to the autograd function as one value
// rather than as two tensor arguments, which it would take for inputs (and
// which cannot be undefined there).
struct Segments {
  torch::Tensor device, host;
};

struct BlockwiseFn : public torch::autograd::Function<BlockwiseFn> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, double scale, double softcap, double clamp, int64_t block_q,
                               int64_t block_k, bool want_head_max, bool want_stats, const Segments& docs) {
    const torch::Tensor &segments = docs.device, &segments_host = docs.host;
    RECORD_FUNCTION("keel::blockwise_attention", std::vector<c10::IValue>());
    // Dtypes are chosen here, not by autocast: scores in the inputs' dtype, softmax in fp32.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const Geometry g(q, k);
    const auto f32 = q.options().dtype(torch::kFloat32);
    const auto qs = q * (softcap > 0 ? scale / softcap : scale);
    auto out = torch::empty({g.B, g.H, g.T, g.D}, q.options());
    auto lse = torch::empty({g.B, g.H, g.T, 1}, f32);
    auto head_max = torch::zeros({g.Hkv, g.G}, f32);
    auto max_capped = torch::zeros({}, f32), entropy_sum = torch::zeros({}, f32), first_sum = torch::zeros({}, f32);
    for (int64_t q0 = 0; q0 < g.T; q0 += block_q) {
      const int64_t rows = std::min(block_q, g.T - q0);
      auto qb = g.group(qs, q0, rows);
      auto m = torch::full({g.B, g.Hkv, g.G * rows, 1}, -kInf, f32);
      // Sum of p, sum of p * logit, p of key 0 (each rescaled as the running max moves).
      auto l = torch::zeros_like(m), expected = torch::zeros_like(m), first = torch::zeros_like(m);
      auto acc = torch::zeros({g.B, g.Hkv, g.G * rows, g.D}, f32);
      for (int64_t k0 = 0; k0 < q0 + rows; k0 += block_k) {  // key blocks that start before the queries end
        const int64_t cols = std::min(block_k, g.T - k0);
        const BlockPlan plan = plan_block(segments_host, q0, rows, k0, cols);
        if (plan == BlockPlan::skip) continue;
        auto kb = k.narrow(2, k0, cols), vb = v.narrow(2, k0, cols);
        torch::Tensor block_max;
        BlockLogits b = block_logits(qb, kb, g, q0, rows, k0, cols, softcap, clamp, /*backward=*/false,
                                     want_head_max ? &block_max : nullptr,
                                     plan == BlockPlan::masked ? segments : torch::Tensor());
        if (want_head_max) head_max = torch::maximum(head_max, block_max);
        auto m_new = torch::maximum(m, b.z.amax(-1, true));
        // Under a document mask a row can meet a block with no key of its
        // document: its max stays -inf, and exp(-inf - -inf) would be NaN.
        // The lowest finite float instead makes that block's p and alpha 0.
        if (plan == BlockPlan::masked) m_new.clamp_min_(std::numeric_limits<float>::lowest());
        auto alpha = torch::exp(m - m_new);
        torch::Tensor finite;  // the logits, future positions at 0 (statistics only)
        if (want_stats) {
          finite = b.future.defined() ? b.z.masked_fill(b.future, 0) : b.z.clone();
          max_capped = torch::maximum(max_capped, finite.abs().amax());
        }
        auto& p = b.z;  // in place: exp(logit - m_new), 0 at future positions
        p.sub_(m_new).exp_();
        l.mul_(alpha).add_(p.sum(-1, true));
        acc.mul_(alpha).add_(matmul_bf16(p.to(v.scalar_type()), vb).to(torch::kFloat32));
        if (want_stats) {
          expected.mul_(alpha).add_((p * finite).sum(-1, true));
          first.mul_(alpha);
          if (k0 == 0) first.add_(p.narrow(-1, 0, 1));
        }
        m = m_new;
      }
      out.narrow(2, q0, rows).copy_(g.ungroup(acc.div_(l), rows));
      auto block_lse = m + torch::log(l);
      lse.narrow(2, q0, rows).copy_(g.ungroup(block_lse, rows));
      // Entropy of a row: -sum p log p = lse - E_p[logit].
      if (want_stats) {
        entropy_sum = entropy_sum + (block_lse - expected / l).sum();
        first_sum = first_sum + (first / l).sum();
      }
    }
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["clamp"] = clamp;
    ctx->saved_data["block_q"] = block_q;
    ctx->saved_data["block_k"] = block_k;
    ctx->saved_data["segments"] = segments;
    ctx->saved_data["segments_host"] = segments_host;
    auto entropy = entropy_sum / static_cast<double>(g.B * g.H * g.T);
    auto first_mass = first_sum / static_cast<double>(g.B * g.H * g.T);
    auto heads = head_max.reshape({g.H});
    ctx->mark_non_differentiable({heads, entropy, max_capped, first_mass});
    return {out, heads, entropy, max_capped, first_mass};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("keel::blockwise_attention_backward", std::vector<c10::IValue>());
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const double scale = ctx->saved_data["scale"].toDouble(), softcap = ctx->saved_data["softcap"].toDouble(),
                 clamp = ctx->saved_data["clamp"].toDouble();
    const int64_t block_q = ctx->saved_data["block_q"].toInt(), block_k = ctx->saved_data["block_k"].toInt();
    const auto segments = ctx->saved_data["segments"].toOptional<torch::Tensor>().value_or(torch::Tensor());
    const auto segments_host = ctx->saved_data["segments_host"].toOptional<torch::Tensor>().value_or(torch::Tensor());
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
        const BlockPlan plan = plan_block(segments_host, q0, rows, k0, cols);
        if (plan == BlockPlan::skip) continue;
        auto kb = k.narrow(2, k0, cols), vb = v.narrow(2, k0, cols);
        BlockLogits b = block_logits(qsb, kb, g, q0, rows, k0, cols, softcap, clamp, /*backward=*/true, nullptr,
                                     plan == BlockPlan::masked ? segments : torch::Tensor());
        auto& p = b.z;  // in place: exp(logit - lse), 0 at future positions
        p.sub_(lse_b).exp_();
        dv.narrow(2, k0, cols).add_(matmul_bf16(p.to(dout.scalar_type()).transpose(-2, -1), dob).to(torch::kFloat32));
        auto ds = matmul_bf16(dob, vb.transpose(-2, -1)).to(torch::kFloat32);  // dp, then in place:
        ds.sub_(rowdot_b).mul_(p);                                   // d loss / d capped logit
        if (b.inside.defined()) ds.mul_(b.inside);                   // clamped: no gradient
        if (b.tanh.defined()) ds.addcmul_(ds, b.tanh.mul_(b.tanh), -1.0);  // * (1 - tanh^2): d raw
        auto ds_in = ds.to(q.scalar_type());
        dqb.add_(matmul_bf16(ds_in, kb).to(torch::kFloat32), scale);  // d raw / d q = scale * k
        dk.narrow(2, k0, cols).add_(matmul_bf16(ds_in.transpose(-2, -1), qb).to(torch::kFloat32), scale);
      }
      dq.narrow(2, q0, rows).copy_(g.ungroup(dqb, rows));
    }
    return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type()),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
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

int64_t blockwise_visited_blocks(int64_t T, int64_t block_q, int64_t block_k, const torch::Tensor& segments_host) {
  int64_t visited = 0;
  for (int64_t q0 = 0; q0 < T; q0 += block_q) {
    const int64_t rows = std::min(block_q, T - q0);
    for (int64_t k0 = 0; k0 < q0 + rows; k0 += block_k)
      if (plan_block(segments_host, q0, rows, k0, std::min(block_k, T - k0)) != BlockPlan::skip) ++visited;
  }
  return visited;
}

BlockwiseResult blockwise_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const BlockwiseOptions& o) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "blockwise_attention: q, k, v must be [B, H, T, D]");
  TORCH_CHECK(k.sizes() == v.sizes() && q.size(0) == k.size(0) && q.size(2) == k.size(2) && q.size(3) == k.size(3),
              "blockwise_attention: q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes(), " do not fit");
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "blockwise_attention: query heads ", q.size(1),
              " are not a multiple of key/value heads ", k.size(1));
  TORCH_CHECK(o.block_q > 0 && o.block_k > 0, "blockwise_attention: block sizes must be positive");
  if (o.segments.defined()) {
    TORCH_CHECK(o.segments_host.defined() && o.segments_host.device().is_cpu() &&
                    o.segments_host.scalar_type() == torch::kInt64 && o.segments_host.is_contiguous() &&
                    o.segments.sizes() == o.segments_host.sizes() && o.segments.dim() == 2 &&
                    o.segments.size(0) == q.size(0) && o.segments.size(1) == q.size(2),
                "blockwise_attention: segments must be int64 [B, T] with a contiguous CPU copy");
  }
  // One dtype for q, k and v, chosen as autocast chooses it for SDPA (its
  // lower-precision list): an fp32 QK-Norm output (L2, LayerNorm) meets a
  // bf16 v under autocast, and the custom function, which runs with
  // autocast excluded, would otherwise multiply mismatched dtypes. The casts
  // are autograd ops, so each input's gradient returns in its own dtype.
  const auto dtype = attention_dtype(q, k, v);
  auto cast = [dtype](const torch::Tensor& t) { return t.scalar_type() == dtype ? t : t.to(dtype); };
  auto outs = BlockwiseFn::apply(cast(q), cast(k), cast(v), o.scale, o.softcap.value_or(0.0), o.clamp.value_or(0.0), o.block_q,
                                 o.block_k, o.head_max, o.stats, Segments{o.segments, o.segments_host});
  BlockwiseResult r;
  r.out = outs[0];
  if (o.head_max) r.head_max = outs[1];
  if (o.stats) {
    r.entropy = outs[2];
    r.max_capped = outs[3];
    r.first_token_mass = outs[4];
  }
  return r;
}

}  // namespace keel
