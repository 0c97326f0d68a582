#include "train/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/chunked_loss.h"
#include "model/cpu_attention.h"
#include "model/fused_ops.h"
#include "model/fused_xent.h"
#include "model/parametrization.h"
#include "optim/zero.h"
#include "util/log.h"

namespace keel {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

// Elements per token that one block keeps for backward (the activation
// model): `r` bytes for the fp32 residual stream, `b` for what the matmuls
// read and write (bf16 under autocast).
struct BlockBytes {
  double full = 0;          // a block that keeps its graph
  double checkpointed = 0;  // a recomputed block keeps its input only
  double selective = 0;     // and selective recompute also its linear layers' outputs
};

// Which of keel's CPU kernels change what a block keeps (fp32 on the CPU).
struct CpuKernels {
  bool glu = false;        // fused_cpu_glu keeps gate and up, not act(gate)
  bool attention = false;  // cpu_causal_attention writes its output laid out for the output projection
  double probs = 0;        // and keeps this many probabilities per token and query head (T <= 512, unless recomputed)
};

BlockBytes block_bytes_per_token(const ModelConfig& m, double r, double b, CpuKernels cpu) {
  const double C = static_cast<double>(m.d_model), D = static_cast<double>(m.head_dim());
  const double Q = static_cast<double>(m.n_heads) * D, KV = static_cast<double>(m.n_kv_heads) * D;
  const double F = static_cast<double>(m.ffn_dim());
  const bool gated = m.mlp != MlpKind::gelu;
  // A norm keeps its input (the residual stream) and its output feeds the
  // linears, which keep it (under autocast: their one bf16 copy of it).
  const double norm = C * (r + b);
  // q, k, v as projected and as the attention kernel reads them (after
  // QK-Norm and RoPE, heads first), the kernel's output, and its copy laid
  // out for the output projection.
  // out for the output projection (keel's CPU kernel writes it so: one copy).
  const double attn = norm + b * (2 * (Q + 2 * KV) + (cpu.attention ? 0 : Q)) +
                      (cpu.attention ? 4 * static_cast<double>(m.n_heads) * cpu.probs : 0);
  // gelu: up and gelu(up); gated: gate, act(gate), up and their product
  // (the fused CPU kernel recomputes act(gate) in backward instead).
  const double mlp = norm + b * (gated ? (cpu.glu ? 3 : 4) * F : 2 * F);
  // Gemma's post-norms keep their inputs, the branch outputs.
  const double sandwich = m.norm_placement == NormPlacement::sandwich ? 2 * C * b : 0;
  // Selective: the input, then q, k, v, the attention output projection,
  // up (and gate), and down, each as its linear wrote it.
  const double linears = b * ((Q + 2 * KV) + C + (gated ? 2 * F : F) + C);
  return {attn + mlp + sandwich, C * r, C * r + linears};
}

// Bytes of optimizer state per parameter tensor, as optim/ keeps it.
double optimizer_bytes(const ParamScaling& p, const TrainConfig& t, double w) {
  double numel = 1;
  for (int64_t d : p.shape) numel *= static_cast<double>(d);
  if (t.optimizer == OptimizerKind::muon && p.muon) return numel * w;  // momentum
  return 2 * numel * w + 4;                                            // AdamW: m, v and a float32 step
}

}  // namespace

double MemoryPlan::usable_bytes(double gib, bool cuda) {
  const double bytes = gib * kGiB;
  return cuda ? 0.9 * bytes - kGiB : bytes;
}

int64_t MemoryPlan::max_micro_batch(double gib) const {
  const double room = usable_bytes(gib, cuda);
  if (peak_bytes(1) > room) return 0;
  int64_t lo = 1, hi = 2;  // the peak grows with b: double, then bisect
  while (peak_bytes(hi) <= room && hi < (int64_t{1} << 40)) lo = hi, hi *= 2;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (peak_bytes(mid) <= room ? lo : hi) = mid;
  }
  return lo;
}

MemoryPlan plan_memory(const Config& cfg, const MemoryPlanOptions& options) {
  const ModelConfig& m = cfg.model;
  const TrainConfig& t = cfg.train;
  MemoryPlan plan;
  plan.ranks = std::max(1, options.ranks);
  plan.cuda = options.cuda;
  plan.seq_len = cfg.seq_len();
  const bool fp64 = t.precision == Precision::fp64;
  const bool bf16 = t.precision == Precision::bf16 || (t.precision == Precision::automatic && options.cuda);
  plan.precision = fp64 ? "fp64" : bf16 ? "bf16 autocast" : "fp32";
  const double w = fp64 ? 8 : 4;  // master weights, gradients, optimizer state
  const double r = w;             // the residual stream
  const double b = bf16 ? 2 : w;  // matmul inputs and outputs

  // Parameters, from the same list the optimizer is built from.
  const auto params = param_scalings(m, t);
  std::vector<int64_t> numels;
  std::vector<double> state;
  for (const auto& p : params) {
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    numels.push_back(n);
    plan.params += n;
    const bool embedding_only = p.name == "wte" && !m.tie_embeddings;  // a lookup, not a matmul
    if (p.shape.size() == 2 && !embedding_only) plan.matmul_params += n;
    state.push_back(optimizer_bytes(p, t, w));
  }
  plan.weights = static_cast<double>(plan.params) * w;
  plan.gradients = plan.weights;
  plan.ema = t.ema_decay ? plan.weights : 0;
  plan.weight_casts = bf16 ? static_cast<double>(plan.matmul_params) * 2 : 0;
  for (double s : state) plan.optimizer_replicated += s;
  plan.optimizer_per_rank = plan.optimizer_replicated;
  if (cfg.dist.zero > 0 && plan.ranks > 1) {
    const auto owners = zero_owners(numels, plan.ranks);
    std::vector<double> per_rank(static_cast<size_t>(plan.ranks), 0);
    for (size_t i = 0; i < owners.size(); ++i) per_rank[static_cast<size_t>(owners[i])] += state[i];
    plan.optimizer_per_rank = *std::max_element(per_rank.begin(), per_rank.end());
  }

  // Activations per sequence of the micro-batch.
  const double T = static_cast<double>(plan.seq_len);
  CpuKernels cpu;
  if (!options.cuda && !bf16 && !fp64) {
    cpu.glu = fused_cpu_glu_enabled();
    cpu.attention = cpu_causal_attention_applies(torch::kCPU, torch::kFloat32) &&
                    t.attention_backend == AttentionBackend::automatic && !cfg.data.document_mask &&
                    !m.attn_softcap && !m.attn_logit_clamp && !t.qk_clip_tau && !m.clipped_softmax;
    cpu.probs = static_cast<double>(cpu_causal_attention_saved_probs(plan.seq_len)) / T;
  }
  const BlockBytes block = block_bytes_per_token(m, r, b, cpu);
  double per_token = 0;
  bool any_recomputed = false;
  for (int64_t i = 0; i < m.n_layers; ++i) {
    const bool ckpt = recomputes_block(t.activation_checkpointing, t.checkpoint_every_n, i);
    any_recomputed = any_recomputed || ckpt;
    per_token += !ckpt ? block.full
                 : t.activation_checkpointing == ActivationCheckpointing::selective ? block.selective
                                                                                   : block.checkpointed;
  }
  // The final norm's input, and the gradient the chunked loss forms in the
  // forward for the hidden states (float32).
  per_token += (m.norm_placement == NormPlacement::post ? 0 : static_cast<double>(m.d_model) * r) +
               static_cast<double>(m.d_model) * 4;
  plan.saved_per_seq = per_token * T;
  // data.document_mask on SDPA's mask path (no softcap, clamp or QK-clip:
  // those take the blockwise path, which forms nothing of size T^2): the
  // bool mask [T, T] per sequence, made once per forward, and on CUDA the
  // additive bias SDPA's memory-efficient kernel makes from it in the compute
  // dtype and keeps for backward, in every layer (3.2 GB at T = 4096, 8
  // sequences, 12 layers in bf16).
  const bool document_mask_path = cfg.data.document_mask && !m.attn_softcap && !m.attn_logit_clamp && !t.qk_clip_tau;
  plan.mask_per_seq = document_mask_path ? T * T * (1 + (options.cuda ? static_cast<double>(m.n_layers) * b : 0)) : 0;
  plan.saved_per_seq += plan.mask_per_seq;
  // Backward's working set on top, in blocks' worth of activations. Without
  // recompute none: backward frees each block's activations as it makes
  // their gradients. With recompute, the rebuilt graph of one block, less
  // what its backward has freed by its peak, or of its operations between
  // the kept linear outputs (selective, 0.5). Full recompute's factor is
  // measured on the CPU (bench-cpu, fp32, live bytes, a Zen 4): 0.71 of a
  // block with the fused gated MLP, 0.84 with the composite one, whose
  // backward makes more temporaries; the plan takes 0.75 there. CUDA keeps
  // 1 until a GPU run at a large micro-batch measures it
  // (docs/data-parallel.md, "Memory").
  const bool selective = t.activation_checkpointing == ActivationCheckpointing::selective;
  const double recompute = options.cuda ? 1.0 : 0.75;
  plan.transient_per_seq = block.full * T * (selective ? 0.5 : any_recomputed ? recompute : 0.0);

  // The loss head: per logit of a chunk, the logits and their log-softmax
  // in float32 (float64 for fp64), and under autocast the bf16 product
  // they are cast from; the head's float32 gradient once. keel's fused CPU
  // loss kernel (fp32) forms the gradient in the logits' own buffer: one copy.
  const double acc = std::max(b, 4.0);
  const double V = static_cast<double>(m.padded_vocab());
  const bool fused_loss = !options.cuda && !bf16 && !fp64 && fused_cpu_loss_applies();
  plan.micro_batch = t.micro_batch_size;
  plan.logit_bytes = V * ((fused_loss ? 1 : 2) * acc + (b < acc ? b : 0));
  plan.head_gradient = V * static_cast<double>(m.d_model) * acc;
  plan.chunk_tokens = t.loss_chunk_tokens <= 0 ? 0
                      : cpu_chunk_tokens(t.loss_chunk_tokens, m.padded_vocab(),
                                         options.cuda ? torch::kCUDA : torch::kCPU);

  plan.assumptions = {
      "activations: the tensors keel's block keeps for backward, counted per token (docs/data-parallel.md, "
      "\"Memory\"); attention by a fused kernel (flash, cuDNN, memory-efficient), whose saved state grows with "
      "T, not T^2, except keel's CPU kernel asked to keep its probabilities at T <= 512 (about T^2 / 2 a head)",
      "a micro-batch's peak: the fixed state + the head's gradient + batch x kept for backward + the larger of the "
      "logits chunk and batch x backward's working set",
  };
  if (options.cuda)
    plan.assumptions.push_back("usable memory on a card: 90% of it (allocator fragmentation) less 1 GiB "
                               "(CUDA context and workspaces outside the allocator); not yet measured on a GPU");
  else
    plan.assumptions.push_back("CPU: these are live bytes; the process also holds its libraries (about 0.35 GiB), "
                               "and keel's CPU allocator keeps freed memory, so its resident peak is higher");
  if (document_mask_path)
    plan.assumptions.push_back(
        "data.document_mask: the [T, T] mask once per forward" +
        std::string(options.cuda ? " and its bias in every layer (the memory-efficient kernel's; not yet measured on "
                                   "a GPU)"
                                 : "") +
        "; a softcap or clamp (the blockwise path) or KEEL_DOCUMENT_VARLEN=1 on CUDA forms none");
  if (t.loss_chunk_tokens > 0 && !options.cuda)
    plan.assumptions.push_back("CPU: the loss chunk is capped at 2^24 logits (model/chunked_loss.h)");
  return plan;
}

MemoryPlan plan_memory_for_run(const Config& cfg, bool cuda, bool bf16_autocast, int ranks) {
  MemoryPlanOptions o;
  o.ranks = ranks;
  o.cuda = cuda;
  Config resolved = cfg;
  if (bf16_autocast) resolved.train.precision = Precision::bf16;
  return plan_memory(resolved, o);
}

std::string format_memory_plan(const MemoryPlan& p, const Config& cfg, const MemoryPlanOptions& options) {
  std::ostringstream out;
  auto mib = [](double bytes) { return strf("%10.1f MiB", bytes / kMiB); };
  auto per_param = [&](double bytes) { return strf("%5.2f B/param", bytes / static_cast<double>(p.params)); };
  out << strf("memory plan for %s on %s, %d rank(s), %s, T = %lld, activation checkpointing %s%s\n",
              cfg.run.name.c_str(), p.cuda ? "CUDA" : "the CPU", p.ranks, p.precision.c_str(),
              static_cast<long long>(p.seq_len), name_of(cfg.train.activation_checkpointing).c_str(),
              cfg.train.activation_checkpointing == ActivationCheckpointing::every_n
                  ? strf(" (K = %lld)", static_cast<long long>(cfg.train.checkpoint_every_n)).c_str()
                  : "");
  out << strf("  parameters            %lld (%lld in matmuls)\n", static_cast<long long>(p.params),
              static_cast<long long>(p.matmul_params));
  out << "  per rank, fixed:\n";
  out << "    weights            " << mib(p.weights) << "  " << per_param(p.weights) << "\n";
  if (p.weight_casts > 0)
    out << "    bf16 weight casts  " << mib(p.weight_casts) << "  " << per_param(p.weight_casts) << "\n";
  out << "    gradients          " << mib(p.gradients) << "  " << per_param(p.gradients) << "\n";
  out << "    optimizer state    " << mib(p.optimizer_per_rank) << "  " << per_param(p.optimizer_per_rank);
  if (cfg.dist.zero > 0 && p.ranks > 1)
    out << strf("  (ZeRO-1: the largest of %d shards; replicated %.1f MiB)", p.ranks, p.optimizer_replicated / kMiB);
  else if (p.ranks > 1)
    out << "  (replicated; dist.zero: 1 would shard it)";
  if (p.ema > 0) out << "\n    weight EMA         " << mib(p.ema) << "  " << per_param(p.ema) << "  (train.ema_decay)";
  out << "\n    total              " << mib(p.static_bytes()) << "  " << per_param(p.static_bytes()) << "\n";
  out << "    head gradient      " << mib(p.head_gradient) << "\n";
  if (p.chunk_tokens > 0)
    out << "    loss chunk         " << mib(p.logit_chunk(int64_t{1} << 30))
        << strf("  (%lld tokens of logits; fewer when the micro-batch has fewer)\n",
                static_cast<long long>(p.chunk_tokens));
  else
    out << "    logits, whole      " << mib(p.logit_chunk(1))
        << "  per sequence (train.loss_chunk_tokens 0)\n";
  out << "  per sequence of the micro-batch:\n";
  out << "    kept for backward  " << mib(p.saved_per_seq) << "\n";
  out << "    backward's working " << mib(p.transient_per_seq) << "\n";
  if (p.micro_batch > 0)
    out << strf("  peak at train.micro_batch_size %lld: %.1f MiB\n", static_cast<long long>(p.micro_batch),
                p.peak_bytes(p.micro_batch) / kMiB);
  out << "  largest micro-batch that fits:\n";
  for (double gib : options.memory_gib)
    out << strf("    %6.1f GiB: %lld sequence(s) of %lld tokens\n", gib,
                static_cast<long long>(p.max_micro_batch(gib)), static_cast<long long>(p.seq_len));
  for (const auto& a : p.assumptions) out << "  # " << a << "\n";
  return out.str();
}

std::string memory_plan_json(const MemoryPlan& p, const MemoryPlanOptions& options) {
  nlohmann::json j = {{"ranks", p.ranks},
                      {"device", p.cuda ? "cuda" : "cpu"},
                      {"precision", p.precision},
                      {"params", p.params},
                      {"matmul_params", p.matmul_params},
                      {"seq_len", p.seq_len},
                      {"weights_bytes", p.weights},
                      {"weight_casts_bytes", p.weight_casts},
                      {"gradients_bytes", p.gradients},
                      {"optimizer_replicated_bytes", p.optimizer_replicated},
                      {"optimizer_per_rank_bytes", p.optimizer_per_rank},
                      {"ema_bytes", p.ema},
                      {"static_bytes", p.static_bytes()},
                      {"bytes_per_param", p.bytes_per_param()},
                      {"loss_chunk_tokens", p.chunk_tokens},
                      {"logit_bytes_per_token", p.logit_bytes},
                      {"head_gradient_bytes", p.head_gradient},
                      {"saved_per_seq_bytes", p.saved_per_seq},
                      {"transient_per_seq_bytes", p.transient_per_seq},
                      {"assumptions", p.assumptions}};
  if (p.micro_batch > 0) j["peak_bytes_at_micro_batch"] = p.peak_bytes(p.micro_batch);
  for (double gib : options.memory_gib) j["max_micro_batch"][strf("%g", gib)] = p.max_micro_batch(gib);
  return j.dump(1);
}

}  // namespace keel
