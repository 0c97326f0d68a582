// keel's run configuration: one YAML file with sections model, data, train,
// monitor, checkpoint, dist and run. Each field's initial value here is its
// default; its description and bounds live beside its declaration in the
// section's *_config.cpp file.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/choice.h"
#include "config/data_config.h"
#include "config/schema.h"

namespace keel {

// The choice keys' types. Each enum lists its YAML names once (KEEL_CHOICE);
// a key may allow only some of an enum's values (model.norm: rms | layernorm).
enum class NormKind { none, rms, layernorm, l2 };
KEEL_CHOICE(NormKind, "none", "rms", "layernorm", "l2");
enum class NormPlacement { pre, post, reordered, sandwich };
KEEL_CHOICE(NormPlacement, "pre", "post", "reordered", "sandwich");
enum class MlpKind { swiglu, geglu_tanh, gelu };
KEEL_CHOICE(MlpKind, "swiglu", "geglu_tanh", "gelu");
enum class QKNormScope { head, group, projection };
KEEL_CHOICE(QKNormScope, "head", "group", "projection");
enum class QKNormPosition { before_rope, after_rope };
KEEL_CHOICE(QKNormPosition, "before_rope", "after_rope");
enum class EmbedNorm { none, scale_sqrt_d, layernorm, rmsnorm };
KEEL_CHOICE(EmbedNorm, "none", "scale_sqrt_d", "layernorm", "rmsnorm");
enum class DeviceChoice { automatic, cpu, cuda };
KEEL_CHOICE(DeviceChoice, "auto", "cpu", "cuda");
enum class ScheduleKind { cosine, linear, constant, wsd };
KEEL_CHOICE(ScheduleKind, "cosine", "linear", "constant", "wsd");
enum class CooldownShape { linear, cosine, one_minus_sqrt };
KEEL_CHOICE(CooldownShape, "linear", "cosine", "1-sqrt");
enum class OptimizerImpl { automatic, fused, reference };
KEEL_CHOICE(OptimizerImpl, "auto", "fused", "reference");
enum class OptimizerKind { adamw, muon };
KEEL_CHOICE(OptimizerKind, "adamw", "muon");
enum class MuonAdjustLr { match_rms_adamw, spectral };
KEEL_CHOICE(MuonAdjustLr, "match_rms_adamw", "spectral");
enum class MuonNsDtype { automatic, bf16, fp32 };
KEEL_CHOICE(MuonNsDtype, "auto", "bf16", "fp32");
enum class Precision { automatic, fp32, bf16, fp64 };
KEEL_CHOICE(Precision, "auto", "fp32", "bf16", "fp64");
enum class AttentionBackend { automatic, cudnn, flash, efficient, math };
KEEL_CHOICE(AttentionBackend, "auto", "cudnn", "flash", "efficient", "math");
enum class SpikeAction { none, skip_step, rewind };
KEEL_CHOICE(SpikeAction, "none", "skip_step", "rewind");
enum class NonfinitePolicy { halt, skip };
KEEL_CHOICE(NonfinitePolicy, "halt", "skip");
enum class ActivationCheckpointing { none, full, every_n, selective };
KEEL_CHOICE(ActivationCheckpointing, "none", "full", "every_n", "selective");
// Whether block i is recomputed in backward under `mode` (every_n: blocks 0, K, 2K, ...).
inline bool recomputes_block(ActivationCheckpointing mode, int64_t every_n, int64_t i) {
  return mode == ActivationCheckpointing::full || mode == ActivationCheckpointing::selective ||
         (mode == ActivationCheckpointing::every_n && i % every_n == 0);
}
enum class DistBackend { automatic, nccl, gloo };
KEEL_CHOICE(DistBackend, "auto", "nccl", "gloo");
enum class Parametrization { standard, mup, completep };
KEEL_CHOICE(Parametrization, "standard", "mup", "completep");

// Muon for the 2-D weights of the attention and MLP linears (optim/muon.h).
struct MuonConfig {
  double momentum = 0.95;                  // μ of the (Nesterov) momentum buffer
  bool nesterov = true;
  int64_t ns_steps = 5;                    // quintic Newton–Schulz iterations
  MuonAdjustLr adjust_lr = MuonAdjustLr::match_rms_adamw;  // 0.2·√max(m,n) (Moonlight) | √max(1,m/n) (Jordan)
  MuonNsDtype ns_dtype = MuonNsDtype::automatic;  // auto: bf16 on CUDA, fp32 on CPU
  bool split_qkv_heads = false;            // orthogonalise wq/wk/wv per head (Kimi K2's MuonClip)
  double adamw_lr = 0;                     // peak LR of the AdamW part; 0 = train.lr
};

struct QKNormConfig {
  NormKind type = NormKind::none;       // none | rms | layernorm | l2
  QKNormScope scope = QKNormScope::head;  // head | group | projection
  int64_t groups = 0;                   // group scope: number of head groups normalised together
  QKNormPosition position = QKNormPosition::before_rope;
  bool gain = true;                     // learnable per-dimension gain
  bool gain_per_head = false;           // head scope: one gain per head instead of shared
  bool bias = false;                    // layernorm: learnable bias (Chameleon)
  double eps = 1e-6;
  // l2 only: a learned temperature replaces 1/sqrt(head_dim) (Henry et al. 2020).
  bool temperature_learnable = true;
  bool temperature_per_head = false;
  std::optional<double> temperature_init;  // null: log2(L^2 - L) with L = henry_seq_len
  int64_t henry_seq_len = 0;               // 0: model.max_seq_len
};

struct InitConfig {
  double std = 0.02;
  bool depth_scaled = true;                // output projections: std / sqrt(2 * n_layers)
  std::optional<double> truncate;          // truncate at +-k std; null: no truncation
};

// µP (Yang et al. 2022) and CompleteP (Dey et al. 2025): the base model the
// hyperparameters were tuned on (model/parametrization.h). With the base equal
// to the model every rule is the identity.
struct MupConfig {
  int64_t base_width = 0;                  // d_model of the base model; 0 = model.d_model
  int64_t base_head_dim = 0;               // head_dim of the base; 0 = base_width / n_heads (same head count)
  int64_t base_depth = 0;                  // completep: n_layers of the base; 0 = model.n_layers
  double depth_alpha = 1.0;                // completep: residual branches x (base_depth/n_layers)^alpha
};

struct ModelConfig {
  int64_t vocab_size = 4096;
  int64_t pad_vocab_multiple = 64;
  int64_t max_seq_len = 256;
  int64_t d_model = 128;
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 2;
  int64_t d_ff = 0;                        // 0: 4*d_model (gelu) or 8/3*d_model rounded to 64 (gated)
  MlpKind mlp = MlpKind::swiglu;           // swiglu | geglu_tanh | gelu
  NormKind norm = NormKind::rms;           // rms | layernorm
  bool norm_unit_offset = false;           // every norm gain applied as (1 + w), w initialised to 0 (Gemma)
  double norm_eps = 1e-5;
  NormPlacement norm_placement = NormPlacement::pre;
  bool bias = false;
  bool tie_embeddings = false;
  bool rope = true;
  double rope_theta = 10000.0;
  QKNormConfig qk_norm;
  std::optional<double> attn_softcap;      // null: off
  std::optional<double> final_softcap;     // null: off
  EmbedNorm embed_norm = EmbedNorm::none; // none | scale_sqrt_d | layernorm | rmsnorm
  std::optional<double> query_pre_attn_scalar;  // null: scale = 1/sqrt(head_dim)
  // Other attention-logit stabilisers (see docs/configuration.md for sources).
  NormKind qkv_norm = NormKind::none;      // none | rms | layernorm: norm of the fused QKV output (Rybakov et al.)
  std::optional<double> attn_logit_clamp;  // scores clipped to [-c, c] before softmax; null = off
  bool sigma_reparam = false;              // sigmaReparam on attention and MLP linears (Zhai et al. 2023)
  std::optional<double> attn_temperature;  // soft temperature: softmax(beta * scores), beta this; null = off
  bool attn_temperature_learnable = false; // beta a learned scalar per head, from attn_temperature
  bool clipped_softmax = false;            // clip((zeta - gamma) softmax + gamma, 0, 1) (Bondarenko et al. 2023)
  double clipped_softmax_zeta = 1.03;
  double clipped_softmax_gamma = -0.03;
  std::optional<double> layer_scale;       // LayerScale (Touvron et al. 2021): per-channel branch gains from this; null = off
  InitConfig init;
  Parametrization parametrization = Parametrization::standard;  // standard | mup | completep
  MupConfig mup;

  int64_t head_dim() const { return n_heads > 0 ? d_model / n_heads : 0; }
  int64_t padded_vocab() const {
    int64_t m = pad_vocab_multiple > 0 ? pad_vocab_multiple : 1;
    return (vocab_size + m - 1) / m * m;
  }
  int64_t ffn_dim() const;
};

struct TrainConfig {
  DeviceChoice device = DeviceChoice::automatic;  // auto | cpu | cuda
  std::optional<double> qk_clip_tau;       // QK-clip threshold (MuonClip); null = off
  int64_t max_steps = 600;
  int64_t batch_size = 16;                 // global batch, in sequences
  int64_t batch_tokens = 0;                // global batch in tokens (overrides batch_size when > 0)
  int64_t micro_batch_size = 0;            // per rank per micro-step; 0: whole per-rank batch
  int64_t seq_len = 0;                     // 0: model.max_seq_len
  double lr = 3e-3;
  double min_lr = 3e-4;                    // schedule floor
  int64_t warmup_steps = 50;
  ScheduleKind schedule = ScheduleKind::cosine;  // cosine | linear | constant | wsd
  double decay_fraction = 0.2;             // wsd: fraction of steps in the final decay
  // A cooldown branch (Hägele et al. 2024): after step cooldown_at the LR
  // decays from the schedule's value there to 0 over cooldown_steps, and the
  // run ends; from cooldown_from's checkpoint of that step when it is given.
  int64_t cooldown_steps = 0;              // 0: off
  int64_t cooldown_at = 0;                 // the step the cooldown starts after
  CooldownShape cooldown_shape = CooldownShape::linear;
  std::string cooldown_from = "";          // the trunk: a run directory with a checkpoint of step cooldown_at
  // The run's last step: cooldown_at + cooldown_steps with a cooldown, else max_steps.
  int64_t end_step() const { return cooldown_steps > 0 ? cooldown_at + cooldown_steps : max_steps; }
  double weight_decay = 0.1;
  bool independent_weight_decay = false;   // Wortsman et al.: decay not multiplied by lr/peak_lr
  bool decay_embeddings = false;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  OptimizerKind optimizer = OptimizerKind::adamw;  // adamw | muon (Muon on the linears, AdamW on the rest)
  MuonConfig muon;
  OptimizerImpl optimizer_impl = OptimizerImpl::automatic;  // auto | fused | reference
  double grad_clip = 1.0;                  // 0: off
  std::optional<double> update_clip;       // the optimizer's update clipped to this norm (levanter); null = off
  bool update_clip_per_param = false;      // one norm per parameter instead of one over all of them
  std::optional<double> ema_decay;         // weight EMA: theta_bar <- b theta_bar + (1 - b) theta each step; null = off
  double z_loss = 0.0;
  bool fp32_head = false;                  // under bf16 autocast the output head's matmul in fp32 (fp32 logits)
  int64_t loss_chunk_tokens = 8192;        // output head + loss over chunks of tokens (chunked_loss.h); 0: whole logits
  Precision precision = Precision::automatic;  // auto | fp32 | bf16 | fp64 (CPU)
  bool tf32 = true;
  AttentionBackend attention_backend = AttentionBackend::automatic;  // SDPA kernel tried first (device.h)
  bool cuda_graph = false;                 // capture the whole step as one CUDA graph (step_runner.h)
  int64_t threads = 0;                     // CPU threads; 0: all cores of this rank
  int64_t log_every = 10;
  int64_t eval_every = 100;
  int64_t eval_batches = 8;
  NonfinitePolicy nonfinite = NonfinitePolicy::halt;  // halt | skip
  // Recompute blocks' activations in backward instead of keeping them (model/activation_checkpoint.h).
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::none;  // none | full | every_n | selective
  int64_t checkpoint_every_n = 2;          // every_n: blocks 0, K, 2K, ... are recomputed
  std::string init_from = "";              // checkpoint or run dir whose weights start a fresh run
};

struct MonitorConfig {
  int64_t every = 50;                      // attention/logit statistics every N steps (0: off)
  int64_t sequences = 2;                   // sequences of the batch used for statistics
  bool layer_grad_norms = false;
  bool param_stats = true;                 // per-matrix optimizer and activation statistics at monitor steps
  int64_t spike_window = 128;
  double spike_threshold = 6.0;
  int64_t spike_warmup = 64;
  int64_t spike_score_window = 1000;
  double spike_score_sigma = 7.0;
  bool skip_on_spike = false;              // legacy form of on_spike: skip_step
  SpikeAction on_spike = SpikeAction::none;  // none | skip_step | rewind (docs/stability.md)
  int64_t rewind_skip_batches = 0;         // rewind: batches skipped from the checkpoint on; 0 = through the spike's
  int64_t max_rewinds = 5;                 // rewind: after this many the run stops
  SpikeAction spike_action() const { return skip_on_spike ? SpikeAction::skip_step : on_spike; }
  double diverge_loss_factor = 3.0;        // diverged when loss > factor * initial loss
  double diverge_attn_logit = 1e4;         // logit-unstable when layer-0 max attention logit exceeds this
  double diverge_output_logit = 30;        // output-logit-unstable when the largest |output logit| exceeds this
  bool stop_on_divergence = false;         // stop once the loss diverged
  bool stop_on_logit_instability = false;  // stop once the attention logits are unstable
};

struct CheckpointConfig {
  int64_t every = 200;                     // steps between checkpoints (0: only at the end)
  int64_t keep_last = 3;
  int64_t keep_every = 0;                  // also keep every N-th step for ever (0: off)
  bool at_end = true;
};

struct DistConfig {
  DistBackend backend = DistBackend::automatic;  // auto | nccl | gloo
  double timeout_s = 300.0;
  double bucket_mb = 25.0;                 // gradient all-reduce bucket size (PyTorch DDP's default)
  bool overlap = true;                     // launch bucket all-reduces from gradient hooks during backward
  int64_t zero = 0;                        // 1: ZeRO-1, each rank keeps the optimizer state of its parameters only
};

// Downstream tasks scored as lm-evaluation-harness scores them, and more
// held-out sets, during training (src/eval/, docs/evaluation.md).
struct EvalConfig {
  std::vector<std::string> tasks;          // each "[name=]kind:path" or "builtin"
  int64_t every = 0;                       // steps between task evaluations; 0 = train.eval_every
  int64_t limit = 0;                       // the first N examples of each task; 0 = all
  int64_t batch_size = 32;                 // requests (a context and one choice) per forward
  int64_t builtin_examples = 250;          // examples of the builtin task
  std::vector<std::string> sets;           // more prepared data directories, each scored like the val split
};

struct RunConfig {
  std::string name = "default";
  std::string out_dir = "runs";
  int64_t seed = 1337;
  bool overwrite = false;                  // allow replacing an existing run directory
  bool tensorboard = true;                 // TensorBoard event files beside metrics.jsonl
};

struct Config {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  MonitorConfig monitor;
  CheckpointConfig checkpoint;
  DistConfig dist;
  EvalConfig eval;
  RunConfig run;

  int64_t seq_len() const { return train.seq_len > 0 ? train.seq_len : model.max_seq_len; }
};

// Section declarations, one per *_config.cpp.
void declare_model_keys(Schema& s, ModelConfig& m);
void declare_train_keys(Schema& s, TrainConfig& t);
void declare_monitor_keys(Schema& s, MonitorConfig& m);
void declare_checkpoint_keys(Schema& s, CheckpointConfig& c);
void declare_dist_keys(Schema& s, DistConfig& d);
void declare_run_keys(Schema& s, RunConfig& r);
void declare_eval_keys(Schema& s, EvalConfig& e);

// The base model of model.parametrization mup/completep: d_model =
// mup.base_width, head_dim = mup.base_head_dim (n_heads and n_kv_heads scaled
// with it), an explicit d_ff scaled by the width ratio, n_layers =
// mup.base_depth (completep). The model itself under standard.
ModelConfig base_model_config(const ModelConfig& m);

// Cross-key checks that a single key's bounds cannot express.
void check_model(const ModelConfig& m, ConfigErrors& errors);
void check_train(const Config& c, ConfigErrors& errors);
void check_data(const Config& c, ConfigErrors& errors);
void check_eval(const Config& c, ConfigErrors& errors);

Schema make_schema(Config& config);
// Defaults, then the file (if any), then the overrides, then validation.
// Throws ConfigError listing every problem.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
Config config_from_yaml_text(const std::string& text, const std::vector<std::string>& overrides = {});
void validate(Config& config);  // throws ConfigError
std::string config_to_yaml(const Config& config);
std::string describe_config(bool markdown = false);

}  // namespace keel
