// train.* keys (optimizer, schedule, batch) and the small sections monitor,
// checkpoint, dist and run.
#include "config/config.h"

#include "util/text.h"
#include "util/utf8.h"

namespace keel {

void declare_train_keys(Schema& s, TrainConfig& t) {
  s.choice("train.device", &t.device, {}, "auto = cuda when available");
  s.optional_real("train.qk_clip_tau", &t.qk_clip_tau,
                  "QK-clip (MuonClip, Kimi K2): after each step, heads whose max attention logit "
                  "exceeded tau get W_q, W_k rescaled to bring it to tau; null = off")
      .positive();
  s.integer("train.max_steps", &t.max_steps, "optimizer steps to train").min = 1;
  s.integer("train.batch_size", &t.batch_size, "global batch in sequences (all ranks, all micro-steps)")
      .min = 1;
  s.integer("train.batch_tokens", &t.batch_tokens,
            "global batch in tokens; when > 0 it sets batch_size = batch_tokens / seq_len")
      .min = 0;
  s.integer("train.micro_batch_size", &t.micro_batch_size,
            "sequences per rank per forward/backward; 0 = the whole per-rank batch (no accumulation)")
      .min = 0;
  s.integer("train.seq_len", &t.seq_len, "tokens per training sequence; 0 = model.max_seq_len").min = 0;
  s.real("train.lr", &t.lr, "peak learning rate").positive();
  s.real("train.min_lr", &t.min_lr, "learning-rate floor at the end of the decay").min = 0;
  s.integer("train.warmup_steps", &t.warmup_steps, "linear warm-up steps from 0 to train.lr").min = 0;
  s.choice("train.schedule", &t.schedule, {},
           "decay after warm-up (wsd = warmup-stable-decay)");
  auto& df = s.real("train.decay_fraction", &t.decay_fraction, "wsd: fraction of steps spent decaying");
  df.min = 0;
  df.max = 1;
  s.integer("train.cooldown_steps", &t.cooldown_steps,
            "a cooldown branch (Hägele et al. 2024): after train.cooldown_at the LR decays from the schedule's "
            "value there to 0 over this many steps, and the run ends (train.max_steps still shapes the schedule "
            "before it); 0 = off")
      .min = 0;
  s.integer("train.cooldown_at", &t.cooldown_at, "the step the cooldown starts after").min = 0;
  s.choice("train.cooldown_shape", &t.cooldown_shape, {},
           "the decay: linear (1 - x), cosine ((1 + cos(pi x)) / 2) or 1-sqrt (1 - sqrt(x)), x the cooldown's "
           "fraction done");
  s.text("train.cooldown_from", &t.cooldown_from,
         "the trunk to branch from: a run directory with a checkpoint of step train.cooldown_at (weights, "
         "optimizer state, data position); empty: this run cools down its own training");
  s.real("train.weight_decay", &t.weight_decay, "AdamW decoupled weight decay").min = 0;
  s.boolean("train.independent_weight_decay", &t.independent_weight_decay,
            "decay scaled by lr/peak_lr instead of lr (Wortsman et al. 2023)");
  s.choice("train.activation_checkpointing", &t.activation_checkpointing, {},
           "recompute each checkpointed block's activations in backward instead of keeping them: less memory, "
           "about one more forward per step; full = every block, every_n = blocks 0, K, 2K, ... "
           "(K = train.checkpoint_every_n), selective = every block keeps its linear layers' outputs and "
           "recomputes only norms, RoPE, activations and the attention kernel; gradients are bit-identical to "
           "none on the CPU");
  auto& ck = s.integer("train.checkpoint_every_n", &t.checkpoint_every_n,
                       "activation_checkpointing every_n: recompute every K-th block");
  ck.min = 1;
  ck.max = 1 << 20;
  s.boolean("train.decay_embeddings", &t.decay_embeddings, "apply weight decay to embeddings");
  auto& b1 = s.real("train.beta1", &t.beta1, "AdamW beta1");
  b1.min = 0;
  b1.max = 1;
  auto& b2 = s.real("train.beta2", &t.beta2, "AdamW beta2");
  b2.min = 0;
  b2.max = 1;
  s.real("train.eps", &t.eps, "AdamW epsilon").positive();
  s.choice("train.optimizer", &t.optimizer, {},
           "adamw, or muon: Muon (orthogonalised momentum) for the 2-D weights of the attention and MLP linears, "
           "AdamW for everything else (docs/optimizers.md)");
  auto& mm = s.real("train.muon.momentum", &t.muon.momentum, "muon: momentum of the update buffer");
  mm.min = 0;
  mm.max = 0.999;
  s.boolean("train.muon.nesterov", &t.muon.nesterov, "muon: Nesterov momentum");
  auto& ns = s.integer("train.muon.ns_steps", &t.muon.ns_steps, "muon: Newton-Schulz iterations");
  ns.min = 1;
  ns.max = 20;
  s.choice("train.muon.adjust_lr", &t.muon.adjust_lr, {},
           "muon: LR scale per matrix [m, n]: match_rms_adamw 0.2*sqrt(max(m, n)) (Moonlight; AdamW's LR works) or "
           "spectral sqrt(max(1, m/n)) (Keller Jordan's; LRs far above AdamW's)");
  s.choice("train.muon.ns_dtype", &t.muon.ns_dtype, {}, "muon: Newton-Schulz precision; auto = bf16 on CUDA, fp32 on CPU");
  s.boolean("train.muon.split_qkv_heads", &t.muon.split_qkv_heads,
            "muon: orthogonalise wq, wk and wv one head at a time (Kimi K2) instead of per projection");
  s.real("train.muon.adamw_lr", &t.muon.adamw_lr,
         "muon: peak LR of the AdamW part (embedding, head, norms, biases, scales); 0 = train.lr; the schedule "
         "scales it like train.lr").min = 0;
  s.choice("train.optimizer_impl", &t.optimizer_impl, {},
           "AdamW kernel: fused (at::_fused_adamw_, CPU and CUDA) or the readable reference loop");
  s.real("train.grad_clip", &t.grad_clip, "global gradient-norm clip; 0 = off").min = 0;
  s.optional_real("train.update_clip", &t.update_clip,
                  "clip the update the optimizer made to this L2 norm (levanter's clip_update_norm), "
                  "globally or per parameter; an alternative to train.grad_clip; null = off")
      .positive();
  s.boolean("train.update_clip_per_param", &t.update_clip_per_param,
            "train.update_clip: one norm per parameter tensor instead of one over all of them");
  auto& ema = s.optional_real("train.ema_decay", &t.ema_decay,
                              "an exponential moving average of the weights, b in theta_bar <- b theta_bar + (1 - b) "
                              "theta after every step (levanter, modded-nanogpt; 0.999 averages about the last 1000 "
                              "steps): evaluated beside the live weights, checkpointed, exportable; null = off");
  ema.positive();
  ema.max = 0.999999999;
  s.real("train.z_loss", &t.z_loss, "coefficient of the z-loss (log Z)^2; 0 = off (PaLM: 1e-4)").min = 0;
  s.boolean("train.fp32_head", &t.fp32_head,
            "under bf16 autocast, the output head's matmul and so the logits in fp32 (Megatron's fp32 output "
            "layer): output-logit growth then meets fp32 rounding, not bf16's");
  s.integer("train.loss_chunk_tokens", &t.loss_chunk_tokens,
            "tokens per chunk of the fused output head + cross-entropy: logits and their gradient exist for "
            "this many tokens at a time, never [tokens, vocab] whole (on the CPU also at most 16M logits, "
            "64 MiB, per chunk); 0 = whole logits").min = 0;
  s.choice("train.precision", &t.precision, {},
           "auto = bf16 autocast on CUDA, fp32 on CPU; bf16 = bf16 autocast on either (fp32 weights, loss and "
           "norms; on the CPU fast only with AVX-512 BF16 or AMX); fp64 = weights, optimizer state and every "
           "computation in float64, CPU only (a reference: keel replay's higher-precision branch of an fp32 run)");
  s.boolean("train.tf32", &t.tf32, "allow TF32 matmuls on CUDA");
  s.choice("train.attention_backend", &t.attention_backend, {},
           "SDPA kernel tried first where it supports the shapes (the next ones remain as fallbacks; keel bench "
           "records which ran): auto = cuDNN on Hopper and newer GPUs (faster there), PyTorch's order (flash, "
           "memory-efficient, math) elsewhere; CPU: auto = keel's causal kernel for fp32 without a document mask, else SDPA's "
           "flash; flash or math = SDPA's");
  s.boolean("train.cuda_graph", &t.cuda_graph,
            "capture forward, backward, clip and AdamW as one CUDA graph after 3 eager steps and replay it "
            "(small models, where launch overhead dominates); CUDA, one process; not with "
            "monitor.skip_on_spike, monitor.layer_grad_norms, train.qk_clip_tau, model.sigma_reparam");
  s.integer("train.threads", &t.threads, "CPU threads per rank; 0 = cores / local ranks").min = 0;
  s.integer("train.log_every", &t.log_every, "steps between progress lines and metrics").min = 1;
  s.integer("train.eval_every", &t.eval_every, "steps between validation evals; 0 = only at the end").min = 0;
  s.integer("train.eval_batches", &t.eval_batches, "validation batches per eval, each of micro_batch_size sequences (batch_size when unset), split "
            "over the ranks: the same windows for any number of ranks").min = 1;
  s.choice("train.nonfinite", &t.nonfinite, {},
           "on a non-finite loss or gradient: halt (exit 3) or skip the update");
  s.text("train.init_from", &t.init_from,
         "checkpoint or run directory (its newest checkpoint) whose weights start a fresh run, e.g. one "
         "written by keel import-hf; optimizer and step start anew; model.* must match it except "
         "max_seq_len and init.*; empty = random init");
}

void declare_monitor_keys(Schema& s, MonitorConfig& m) {
  s.integer("monitor.every", &m.every, "steps between attention/logit statistics; 0 = off").min = 0;
  s.integer("monitor.sequences", &m.sequences, "sequences of the batch used for statistics").min = 1;
  s.boolean("monitor.layer_grad_norms", &m.layer_grad_norms, "log per-layer gradient norms");
  s.boolean("monitor.param_stats", &m.param_stats,
            "at monitor steps, per matrix: gradient, weight and update RMS, update/weight, Adam's first-moment RMS "
            "and the share of sqrt(v_hat) under eps and 10 eps (Muon: momentum RMS); per block: RMS and max |x| "
            "of the residual stream and of each sublayer output (metrics.jsonl \"params\", \"activations\")");
  s.integer("monitor.spike_window", &m.spike_window, "rolling window of the spike z-score").min = 2;
  s.real("monitor.spike_threshold", &m.spike_threshold, "z-score that flags a spike").positive();
  s.integer("monitor.spike_warmup", &m.spike_warmup, "values needed before spikes are flagged").min = 2;
  s.integer("monitor.spike_score_window", &m.spike_score_window,
            "rolling window of the OLMo 2 spike score")
      .min = 2;
  s.real("monitor.spike_score_sigma", &m.spike_score_sigma, "OLMo 2 spike score: sigmas").positive();
  s.boolean("monitor.skip_on_spike", &m.skip_on_spike, "legacy form of monitor.on_spike: skip_step");
  s.choice("monitor.on_spike", &m.on_spike, {},
           "on a flagged loss or gradient-norm spike: none (record it); skip_step (skip that update; one host "
           "sync per step on CUDA, the verdict comes before the update); rewind (PaLM: back to the newest "
           "checkpoint before the spike, skipping monitor.rewind_skip_batches batches of data from there; needs "
           "checkpoint.every > 0, spikes are judged before every checkpoint, and a step-0 checkpoint is saved)");
  s.integer("monitor.rewind_skip_batches", &m.rewind_skip_batches,
            "rewind: training batches skipped from the checkpoint on (PaLM skipped 200-500); 0 = exactly those "
            "from the checkpoint through the spike's own")
      .min = 0;
  s.integer("monitor.max_rewinds", &m.max_rewinds, "rewind: the run stops (stopped_by max_rewinds) at a spike "
            "after this many rewinds")
      .min = 0;
  auto& lf = s.real("monitor.diverge_loss_factor", &m.diverge_loss_factor,
                    "loss divergence: the loss exceeds this times the initial loss (or is non-finite)");
  lf.min = 1;
  s.real("monitor.diverge_attn_logit", &m.diverge_attn_logit,
         "attention-logit instability: the layer-0 max attention logit exceeds this (Wortsman et al.); "
         "flagged, not divergence: many such runs train on")
      .positive();
  s.real("monitor.diverge_output_logit", &m.diverge_output_logit,
         "output-logit instability: the largest |output logit| at a monitor step exceeds this (30: where "
         "Gemma 2 caps them); flagged, like the attention logits, and ordered against them in the "
         "summary's first_failure")
      .positive();
  s.boolean("monitor.stop_on_divergence", &m.stop_on_divergence, "stop the run once the loss diverged");
  s.boolean("monitor.stop_on_logit_instability", &m.stop_on_logit_instability,
            "stop the run once the attention logits are unstable (monitor.diverge_attn_logit)");
}

void declare_checkpoint_keys(Schema& s, CheckpointConfig& c) {
  s.integer("checkpoint.every", &c.every, "steps between checkpoints; 0 = only at the end").min = 0;
  s.integer("checkpoint.keep_last", &c.keep_last, "checkpoints kept (newest first)").min = 1;
  s.integer("checkpoint.keep_every", &c.keep_every, "also keep every N-th step for ever; 0 = off").min = 0;
  s.boolean("checkpoint.at_end", &c.at_end, "save when training ends");
}

void declare_dist_keys(Schema& s, DistConfig& d) {
  s.choice("dist.backend", &d.backend, {}, "auto = nccl on CUDA, gloo on CPU");
  s.real("dist.timeout_s", &d.timeout_s,
         "rendezvous and collective timeout in seconds; a dead or hung worker ends the others' run "
         "after at most this long")
      .positive();
  s.real("dist.bucket_mb", &d.bucket_mb, "gradient all-reduce bucket size in MiB (as PyTorch DDP)").positive();
  s.boolean("dist.overlap", &d.overlap,
            "all-reduce each gradient bucket from backward hooks as soon as it is full (overlaps communication "
            "with backward); false = one pass after backward");
  auto& z = s.integer("dist.zero", &d.zero,
                      "1 = ZeRO-1: the parameters are dealt to the ranks whole (largest first, to the least loaded), "
                      "each rank keeps the optimizer state of its own and updates them, then sends them to the "
                      "others; gradients are still all-reduced (docs/data-parallel.md#zero-1); 0 = replicated");
  z.min = 0;
  z.max = 1;
}

void declare_run_keys(Schema& s, RunConfig& r) {
  s.text("run.name", &r.name, "run directory name under run.out_dir");
  s.text("run.out_dir", &r.out_dir, "where run directories are created");
  s.integer("run.seed", &r.seed, "seed of init, data order and sampling").min = 0;
  s.boolean("run.overwrite", &r.overwrite,
            "replace an existing keel run of the same name (never a directory that is not one, nor through a "
            "symbolic link)");
  s.boolean("run.tensorboard", &r.tensorboard,
            "also write every metric as a TensorBoard scalar (events.out.tfevents.* in the run directory)");
}

void check_train(const Config& c, ConfigErrors& e) {
  const auto& t = c.train;
  if (t.cooldown_steps == 0 && (t.cooldown_at != 0 || !t.cooldown_from.empty()))
    e.add(t.cooldown_at != 0 ? "train.cooldown_at" : "train.cooldown_from", "only used with train.cooldown_steps > 0");
  if (t.cooldown_steps > 0 && t.cooldown_at < 1)
    e.add("train.cooldown_at", "must be a step >= 1 after which the cooldown starts (got " +
                                   std::to_string(t.cooldown_at) + ")");
  if (!t.cooldown_from.empty() && !t.init_from.empty())
    e.add("train.cooldown_from", "conflicts with train.init_from: a branch starts from its trunk's checkpoint");
  if (t.update_clip_per_param && !t.update_clip)
    e.add("train.update_clip_per_param", "needs train.update_clip, the norm to clip to");
  if (t.qk_clip_tau && c.model.qk_norm.type != NormKind::none)
    e.add("train.qk_clip_tau", "QK-clip rescales W_q and W_k, which model.qk_norm (" + name_of(c.model.qk_norm.type) +
                                   ") normalises away; use one or the other");
  if (t.cuda_graph) {  // these need the host between the phases of a step (step_runner.h)
    const std::string why = " needs the host in the middle of a step, which a CUDA graph replays in one piece";
    if (c.monitor.spike_action() == SpikeAction::skip_step)
      e.add("train.cuda_graph", "monitor.on_spike: skip_step" + why);
    if (c.monitor.spike_action() == SpikeAction::rewind)
      e.add("train.cuda_graph", "monitor.on_spike: rewind restores weights and optimizer state under a captured "
                                "graph, which is not supported");
    if (c.monitor.layer_grad_norms) e.add("train.cuda_graph", "monitor.layer_grad_norms" + why);
    if (t.update_clip) e.add("train.cuda_graph", "train.update_clip keeps the weights before the update outside "
                                                 "the optimizer, which the captured step does not");
    if (t.qk_clip_tau) e.add("train.cuda_graph", "train.qk_clip_tau" + why);
    if (c.model.sigma_reparam) e.add("train.cuda_graph", "model.sigma_reparam" + why);
    if (c.dist.zero > 0)
      e.add("train.cuda_graph", "dist.zero: 1 sends the updated parameters between ranks after the optimizer step, "
                                "which keel has not captured in a CUDA graph");
    if (t.activation_checkpointing != ActivationCheckpointing::none)
      e.add("train.cuda_graph", "train.activation_checkpointing runs a backward inside the backward, which keel "
                                "has not captured in a CUDA graph");
    if (t.optimizer_impl == OptimizerImpl::reference)  // its per-step lr.item() cannot run inside a capture
      e.add("train.cuda_graph", "train.optimizer_impl: reference" + why + " (it reads the learning rate on the host)");
  }
  if (c.monitor.skip_on_spike && c.monitor.on_spike == SpikeAction::rewind)
    e.add("monitor.skip_on_spike", "is the legacy form of monitor.on_spike: skip_step and cannot be combined with "
                                   "monitor.on_spike: rewind");
  if (c.monitor.spike_action() == SpikeAction::rewind && c.checkpoint.every <= 0)
    e.add("monitor.on_spike", "rewind goes back to the newest checkpoint before a spike and needs "
                              "checkpoint.every > 0");
  if (t.warmup_steps > t.max_steps)
    e.add("train.warmup_steps", std::to_string(t.warmup_steps) + " is longer than train.max_steps = " +
                                    std::to_string(t.max_steps));
  if (t.min_lr > t.lr)
    e.add("train.min_lr", "floor exceeds the peak train.lr");
  if (c.seq_len() > c.model.max_seq_len)
    e.add("train.seq_len", std::to_string(c.seq_len()) + " exceeds model.max_seq_len = " +
                               std::to_string(c.model.max_seq_len));
  if (t.batch_tokens > 0 && t.batch_tokens % c.seq_len() != 0)
    e.add("train.batch_tokens", std::to_string(t.batch_tokens) + " is not a multiple of the sequence length " +
                                    std::to_string(c.seq_len()));
  int64_t batch = t.batch_tokens > 0 ? t.batch_tokens / c.seq_len() : t.batch_size;
  if (t.micro_batch_size > 0 && batch % t.micro_batch_size != 0)
    e.add("train.micro_batch_size", std::to_string(t.micro_batch_size) +
                                        " does not divide the global batch of " + std::to_string(batch) +
                                        " sequences");
  if (!is_plain_file_name(c.run.name))
    e.add("run.name", "'" + c.run.name + "' must be a directory name: non-empty, at most 255 bytes, without '/', "
                      "not . or ..");
  // Paths keel writes under and names in JSON (summaries, manifests): a
  // non-UTF-8 byte would pass here and fail every save at the end of training.
  for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"run.name", &c.run.name},
                                   {"run.out_dir", &c.run.out_dir}})
    if (const size_t bad = first_invalid_utf8(*value); bad != std::string::npos)
      e.add(key, "is not valid UTF-8 (byte " + std::to_string(bad) + "): use a UTF-8 name");
}

}  // namespace keel
