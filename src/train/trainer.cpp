// The training loop. run() reads top to bottom: setup, then every step trains
// and then does what its StepPlan says (records, evaluation, checkpoints),
// until the last step or an agreed stop.
#include "train/trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <limits>
#include <thread>

#include "config/eval_config.h"
#include "data/manifest.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "eval/builtin_task.h"
#include "distributed/dist_env.h"
#include "train/init_from.h"
#include "model/parametrization.h"
#include "train/model_stats.h"
#include "monitor/param_stats.h"
#include "optim/grad_norms.h"
#include "train/memory_plan.h"
#include "optim/qk_clip.h"
#include "optim/schedule.h"
#include "train/trainer_impl.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/stop_signal.h"
#include "util/text.h"

namespace keel {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

}  // namespace

int Trainer::run() {
  // Before setup: a signal while rank 0 prepares the data stops that cleanly
  // too (data/prepare.cpp polls), instead of killing it half-way. The
  // handlers only set a flag (docs/papers.md#checkpoint-and-resume).
  install_stop_handlers();
  setup();
  print_settings();
  metrics_->start(start_step_);  // writes the records a full disk kept from the attempt resumed
  if (start_step_ >= cfg_.train.end_step()) {
    run_->log->info(strf("nothing to do: the checkpoint is at step %lld and the run ends at step %lld",
                         static_cast<long long>(start_step_), static_cast<long long>(cfg_.train.end_step())));
    steps_done_ = start_step_;
    write_summary("completed");
    return exit_code::ok;
  }
  // ------------------------------------------------------------ training
  std::string stopped_by = "completed";
  int exit_code = exit_code::ok;
  const bool cpu = compute_.device.is_cpu();
  // Rewinds need a checkpoint before any spike: step 0's, for spikes before the first periodic one.
  if (cfg_.monitor.spike_action() == SpikeAction::rewind && start_step_ == 0) save_checkpoint(0);
  for (int64_t index = start_step_; index < cfg_.train.end_step(); ++index) {
    StepPlan plan = plan_step(cfg_, index, cpu, evaluator_->enabled());
    if (dist_->distributed() && vote_cadence_.due(plan.step)) plan.host_sync = true;  // the stop vote's bound
    const StepReport report = train_step(plan);
    steps_done_ = plan.step;
    if (plan.step == faults_.momentum_x1000_at_step) inject_momentum_fault();
    if (plan.host_sync && halt_on_nonfinite(plan)) {
      stopped_by = "nonfinite";
      exit_code = exit_code::nonfinite;
      break;
    }
    if (plan.drain_spikes) {
      const std::vector<SpikeEvent> spikes = stability_->drain();
      record_spikes(spikes);
      if (const auto spike = spike_to_rewind(spikes)) {  // every rank alike
        if (data_skips_.rewinds() >= cfg_.monitor.max_rewinds) {
          run_->log->warn(strf("spike at step %lld after %lld rewind(s): monitor.max_rewinds reached, stopping",
                               static_cast<long long>(*spike), static_cast<long long>(data_skips_.rewinds())));
          stopped_by = "max_rewinds";
          exit_code = exit_code::stopped;
          break;
        }
        index = rewind(*spike, spikes) - 1;  // the loop's ++index is the checkpoint's next step
        continue;
      }
    }
    const StopVote vote = vote_on_stopping(plan);
    if (vote.stopping()) {
      plan.stop();
      record_spikes(stability_->drain());
    }
    if (plan.log || vote.instability) log_step(plan, report);
    else if (plan.stop_record) metrics_->log_stop(plan, counters_->read(), report, vote.reason());
    if (run_->write_failed()) stop_on_write_failure(plan.step);
    if (vote.instability) {  // divergence or a loss spike with monitor.on_spike: stop
      stopped_by = vote.instability;
      exit_code = exit_code::stopped;
      break;
    }
    if (plan.checkpoint) save_checkpoint(plan.step);
    if (vote.stopping()) {
      stopped_by = vote.reason();
      // Interrupted, not finished: 128 + the signal, as a shell reports it, so
      // `keel train && next` does not go on. A rank stopped by another rank's
      // signal reports SIGTERM, what a scheduler sends; --stop-after-step
      // stops where it was asked to: 0.
      if (vote.signal) exit_code = exit_code::signal_base + (stop_requested() ? stop_signal() : SIGTERM);
      run_->log->warn(strf("stopping after step %lld (%s)", static_cast<long long>(plan.step),
                           !vote.signal        ? "--stop-after-step"
                           : stop_requested() ? strf("signal %d", stop_signal()).c_str()
                                              : "a signal to another rank"));
      break;
    }
  }
  // ------------------------------------------------------------- the end
  if (dist_->distributed()) {
    if (!replicas_identical())
      throw PeerFailure(strf("after step %lld the ranks' parameters differ: the data-parallel replicas diverged",
                             static_cast<long long>(steps_done_)));
    run_->log->info(strf("data parallel: parameters identical on all %d ranks after step %lld", dist_->world(),
                         static_cast<long long>(steps_done_)));
  }
  write_summary(stopped_by);
  return exit_code;
}

int run_training(const Config& config, const TrainOptions& options) {
  Trainer trainer(config, options);
  return trainer.run();
}

// ------------------------------------------------------------------- setup

void Trainer::setup() {
  // Who we are: a job of one, or a rank of a torchrun/SLURM/keel-launch job.
  const DistEnv env = parse_dist_env(current_dist_environment());
  compute_ = setup_compute(cfg_.train, env.local_rank, env.local_world_size);
  dist_ = env.distributed() ? std::make_unique<Dist>(env, resolve_backend(cfg_.dist.backend, compute_.device.is_cuda()),
                                                     cfg_.dist.timeout_s, compute_.device, compute_.device_key)
                            : std::make_unique<Dist>();
  check_config_matches_rank0();
  check_cuda_graph_setup(cfg_, compute_, dist_->world());  // every rank alike, before anything is written

  DataManifest data;
  // Rank 0 alone creates the run directory and prepares the data; the
  // others learn its verdict before they read either.
  collective_phase([&] {
    geometry_ = batch_geometry(cfg_, dist_->world());
    run_ = std::make_unique<RunDir>(cfg_, !opts_.resume.empty(), /*writer=*/rank0());
    if (rank0()) {
      run_->write_config(cfg_);
      // What "auto" became here (keel replay's precision branch reads it).
      run_->write_json_atomic("compute.json", {{"device", compute_.device.is_cuda() ? "cuda" : "cpu"},
                                               {"precision", compute_.bf16_autocast ? "bf16" : compute_.fp64 ? "fp64"
                                                                                                              : "fp32"},
                                               {"device_name", compute_.device_name}});
      data = ensure_prepared(cfg_);
      prepare_eval_sets(cfg_, data);
    }
  });
  if (!rank0()) run_->log->quiet(strf("[rank %d]", dist_->rank()));

  collective_phase([&] {
    if (!rank0()) data = read_data_manifest(cfg_.data.dir);
    tokenizer_path_ = cfg_.data.dir + "/" + data.tokenizer.file;
    train_data_ = std::make_unique<BatchLoader>(cfg_.data.dir, "train", geometry_.seq_len, geometry_.global_batch,
                                                dist_->rank(), dist_->world(), static_cast<uint64_t>(cfg_.run.seed),
                                                cfg_.data.prefetch, cfg_.data.verify, data_mixture(cfg_.data),
                                                cfg_.data.align);
    data_skips_ = DataSkips(parse_skip_batches(cfg_.data.skip_batches, nullptr));  // a checkpoint's list replaces it
    evaluator_ = std::make_unique<Evaluator>(cfg_, data, geometry_, *dist_, compute_);
    if (!evaluator_->enabled())
      run_->log->warn("no validation split in " + cfg_.data.dir + " (data.val_fraction = 0?): evaluation is off");
    if (!cfg_.eval.tasks.empty()) setup_tasks(data);
    parts_ = build_training_parts(cfg_, compute_, geometry_, dist_.get());
    if (cfg_.train.ema_decay) {
      std::vector<NamedParam> params;
      for (auto& p : parts_.model->named_parameters(true)) params.push_back({p.key(), p.value()});
      ema_ = std::make_unique<WeightEma>(std::move(params), *cfg_.train.ema_decay);
    }
    if (cfg_.data.document_mask) parts_.model->set_documents({data.tokenizer.eos_id, cfg_.data.resets_positions()});
    // Batches in page-locked memory: their copies to the GPU do not block the host.
    if (compute_.device.is_cuda()) train_data_->set_pinned(true);
    counters_ = std::make_unique<DeviceCounters>(compute_.device);
    stability_ = std::make_unique<StabilityMonitor>(cfg_.monitor);
    metrics_ = std::make_unique<MetricsLogger>(cfg_, *run_, geometry_, parts_.size, compute_, dist_->world());
    faults_ = TrainFaults::from_environment(dist_->rank());
    if (cfg_.train.cuda_graph && faults_.loss_faults())
      run_->log->warn("KEEL_FAULT_INJECT loss faults are not planted inside a CUDA graph (train.cuda_graph)");
  });
  if (!opts_.resume.empty()) {
    std::string dir;
    collective_phase([&] { dir = rank0() ? choose_resume_dir() : ""; });
    dir = dist_->exchange("resume", dir)[0];  // rank 0's choice, for every rank
    if (!dir.empty()) collective_phase([&] { resume_from_checkpoint(dir); });
    // No checkpoint (a job killed before its first save): a fresh start,
    // and the abandoned attempt's logs go, so the run reads as one history.
    else collective_phase([&] { truncate_logs_after(0); });
  }
  // train.cooldown_from: a fresh branch starts from its trunk's checkpoint of step cooldown_at.
  if (start_step_ == 0 && !cfg_.train.cooldown_from.empty()) collective_phase([&] { start_from_trunk(); });
  // train.init_from (e.g. a `keel import-hf` directory): a fresh run starts from its weights.
  if (start_step_ == 0 && !cfg_.train.init_from.empty())
    collective_phase([&] { run_->log->info("initial weights from " + load_init_weights(cfg_, parts_.model)); });
  setup_data_parallel();
}

void Trainer::print_settings() {
  auto& log = *run_->log;
  const auto& m = cfg_.model;
  const auto& t = cfg_.train;
  const auto& g = geometry_;
  const std::string rule = "+" + std::string(26, '-') + "+" + std::string(54, '-') + "+";
  auto row = [&](const std::string& k, const std::string& v) { log.info(strf("| %-24s | %-52s |", k.c_str(), v.c_str())); };
  log.info(rule);
  row("run", run_->path());
  row("device", compute_.device_name + (compute_.bf16_autocast ? ", bf16 autocast" : compute_.fp64 ? ", fp64" : ", fp32"));
  row("model", std::to_string(m.n_layers) + " layers, d " + std::to_string(m.d_model) + ", " +
                   std::to_string(m.n_heads) + "q/" + std::to_string(m.n_kv_heads) + "kv heads, " + name_of(m.mlp));
  row("norm placement / norm", name_of(m.norm_placement) + " / " + name_of(m.norm));
  row("qk_norm", m.qk_norm.type == NormKind::none ? "none"
                                          : name_of(m.qk_norm.type) + ", " + name_of(m.qk_norm.scope) + ", " +
                                                name_of(m.qk_norm.position));
  if (m.parametrization != Parametrization::standard) {
    const auto lines = describe_parametrization(m, param_scalings(m, t));
    for (size_t i = 0; i < lines.size(); ++i) row(i == 0 ? "parametrization" : "", lines[i]);
  }
  row("softcaps attn / final", (m.attn_softcap ? std::to_string(*m.attn_softcap) : "off") + " / " +
                                   (m.final_softcap ? std::to_string(*m.final_softcap) : "off"));
  row("vocab (padded)", std::to_string(m.vocab_size) + " (" + std::to_string(m.padded_vocab()) + ")");
  row("parameters", std::to_string(parts_.size.total) + " (" + si(static_cast<double>(parts_.size.total)) + ")");
  row("FLOPs per token", si(parts_.size.flops_per_token));
  row("batch", std::to_string(g.global_batch) + " x " + std::to_string(g.seq_len) + " tokens, " +
                   std::to_string(g.n_micro) + " micro-step(s) of " + std::to_string(g.micro_batch));
  row("optimizer", name_of(t.optimizer) + ", lr " + strf("%g", t.lr) + ", wd " + strf("%g", t.weight_decay));
  for (const auto& line : parts_.optimizer->describe()) row("", line);
  row("schedule", name_of(t.schedule) + ", warm-up " + std::to_string(t.warmup_steps) + ", " + std::to_string(t.max_steps) +
                      " steps");
  if (t.cooldown_steps > 0)
    row("cooldown", strf("after step %lld, %s to 0 over %lld steps; the run ends at step %lld%s",
                         static_cast<long long>(t.cooldown_at), name_of(t.cooldown_shape).c_str(),
                         static_cast<long long>(t.cooldown_steps), static_cast<long long>(t.end_step()),
                         t.cooldown_from.empty() ? "" : (", branched from " + t.cooldown_from).c_str()));
  row("train tokens", si(static_cast<double>(train_data_->tokens())));
  if (cfg_.data.document_mask || cfg_.data.align != WindowAlign::none)
    row("documents", std::string(cfg_.data.document_mask ? "attention masked per document" : "attention crosses documents") +
                         (cfg_.data.resets_positions() ? ", positions reset" : "") + ", windows aligned: " +
                         name_of(cfg_.data.align) +
                         (cfg_.data.align != WindowAlign::none
                              ? strf(" (%lld windows, %.1f%% of their tokens repeated)",
                                     static_cast<long long>(train_data_->windows_per_epoch()),
                                     100.0 * train_data_->repeated_fraction())
                              : ""));
  if (const Mixture* mix = train_data_->mixture()) {
    row("data mixture", strf("%zu sources, shares by weight over %lld sequences", mix->sources().size(),
                             static_cast<long long>(t.max_steps * g.global_batch)));
    for (const auto& line : mix->describe(t.max_steps * g.global_batch)) row("", line);
  }
  if (dist_->distributed())
    row("data parallel", strf("%d ranks, %s (%s env), %lld seq/rank, %zu buckets <= %g MiB, %s %s", dist_->world(),
                              name_of(dist_->backend()).c_str(), dist_->env().source.c_str(),
                              static_cast<long long>(g.rows_per_rank), grad_sync_->bucket_count(),
                              cfg_.dist.bucket_mb,
                              grad_sync_->sharded() ? "reduce-scattered to their owners" : "all-reduced",
                              cfg_.dist.overlap ? "overlapped" : "after backward"));
  row("attention", parts_.model->attention_kernel(g.micro_batch, g.seq_len, compute_.device,
                                                  compute_.bf16_autocast ? torch::kBFloat16 : torch::kFloat32) +
                       " (SDPA tries " + compute_.attention_order + ")");
  if (t.activation_checkpointing != ActivationCheckpointing::none)
    row("activation checkpointing",
        t.activation_checkpointing == ActivationCheckpointing::full ? "every block recomputed in backward"
        : t.activation_checkpointing == ActivationCheckpointing::selective
            ? "selective: linear outputs kept; norms, RoPE, activations, attention recomputed in backward"
            : strf("blocks 0, %lld, ... recomputed in backward", static_cast<long long>(t.checkpoint_every_n)));
  if (tasks_) {
    std::string names;
    for (const auto& task : tasks_->tasks()) names += (names.empty() ? "" : ", ") + task.spec.name;
    row("downstream tasks", names + strf(", every %lld steps", static_cast<long long>(task_eval_every(cfg_))));
  }
  if (!cfg_.eval.sets.empty()) row("held-out sets", strf("%zu (eval.sets)", cfg_.eval.sets.size()));
  {
    // keel plan's figure for this run: what a user compares with the device's peak.
    const MemoryPlan p = plan_memory_for_run(cfg_, compute_.device.is_cuda(), compute_.bf16_autocast, dist_->world());
    row("memory (keel plan)", strf("%.0f MiB per rank at %lld sequences per micro-step: %.0f fixed, %.0f per sequence",
                                   p.peak_bytes(g.micro_batch) / (1 << 20), static_cast<long long>(g.micro_batch),
                                   (p.static_bytes() + p.head_gradient) / (1 << 20),
                                   (p.saved_per_seq + p.transient_per_seq) / (1 << 20)));
  }
  row("MFU peak", si(compute_.peak_flops) + "FLOP/s, " + compute_.peak_source);
  log.info(rule);
  log.info("MFU convention: " + flops_convention());
}

// ---------------------------------------------------------------- the step

// The step's device work and what it measures for the logger. No host sync
// except where the plan or the config asks for one (monitor statistics,
// monitor.on_spike: skip_step, update norms on logged steps).
StepReport Trainer::train_step(const StepPlan& plan) {
  const int64_t index = plan.step - 1;
  if (plan.step == faults_.kill_at_step) std::raise(SIGKILL);  // injected fault: this rank dies
  // ... or is asked to stop after this step: SIGTERM to the process, as a scheduler sends it (keel-signals takes
  // it, util/stop_signal.h), then a wait for the flag that thread sets.
  if (plan.step == faults_.sigterm_at_step) {
    ::kill(::getpid(), SIGTERM);
    for (int ms = 0; ms < 5000 && !stop_requested(); ++ms) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  while (plan.step == faults_.hang_at_step) std::this_thread::sleep_for(std::chrono::seconds(1));  // ... or hangs
  StepRunner& runner = *parts_.runner;
  const bool graphed = runner.graph_mode();
  StepReport report;
  report.lr = lr_at(cfg_.train, index);
  std::vector<torch::Tensor> before;  // logged and monitor steps: the weights before the update
  // Rank 0 logs them; under ZeRO-1 every rank holds some parameters' figures (a collective).
  const bool param_stats =
      plan.monitor && cfg_.monitor.param_stats && (rank0() || parts_.optimizer->grad_shard() != nullptr);
  if (plan.log || param_stats) {
    torch::NoGradGuard no_grad;
    for (const auto& p : parts_.optimizer->params()) before.push_back(p.param.detach().clone());
  }
  if (!graphed) {
    if (grad_sync_) grad_sync_->zero_grad();  // zeroes the buckets that .grad views
    else parts_.optimizer->zero_grad();
    runner.begin_step();
  }
  const auto wait0 = Clock::now();
  const int64_t data_step = data_skips_.data_step(index);  // index itself unless batches were skipped
  Batch batch = train_data_->get(data_step);
  const double loader_ms = ms_since(wait0);
  if (plan.monitor && rank0()) {  // statistics are rank 0's job: it logs them
    const int64_t n = std::min<int64_t>(cfg_.monitor.sequences, batch.inputs.size(0));
    report.stats = collect_model_stats(parts_.model, batch.inputs.narrow(0, 0, n).to(compute_.device),
                                       compute_.bf16_autocast);
    stability_->observe_model_stats(plan.step, report.stats);
  }
  StepResult r;
  double comm_ms = 0;
  if (graphed) {
    r = runner.graphed_step(runner.to_device(batch), report.lr);  // forward .. update in one replay
    if (ema_) ema_->update();
  } else {
    MicroHooks hooks;
    hooks.before_backward = [&](int64_t micro, LossParts& loss) {
      if (grad_sync_ && micro == geometry_.n_micro - 1) grad_sync_->arm();  // this backward's gradients are final
      inject_loss_faults(data_step + 1, loss);  // planted in a batch: a skipped batch takes it along
    };
    r.loss = runner.forward_backward(runner.to_device(batch), hooks);
    if (grad_sync_) {
      comm_ms = grad_sync_->finish();  // gradients are now the mean over ranks
      reduce_step_loss(r.loss.ce, r.loss.z);
    }
    if (plan.log && cfg_.monitor.layer_grad_norms) report.layer_grad_norms = per_layer_grad_norms();
    r.clip = runner.clip(r.loss.ce);
  }
  counters_->add_step(r.loss.ce, r.loss.z, r.clip.grad_norm, r.clip.found_inf);
  auto skip = r.clip.found_inf;  // the update is skipped on the device when 1
  auto signals = torch::stack({r.loss.ce.to(torch::kFloat32), r.clip.grad_norm.to(torch::kFloat32)});
  if (cfg_.monitor.spike_action() == SpikeAction::skip_step) {  // never with train.cuda_graph (a config check)
    // The verdict is needed before the update: one host sync per step.
    auto host = signals.cpu();
    auto events = stability_->observe(plan.step, host[0].item<double>(), host[1].item<double>());
    record_spikes(events);
    if (!events.empty()) {
      skip = torch::ones_like(skip);
      ++spike_skips_;
    }
  } else {
    stability_->push(plan.step, signals);
  }
  if (!graphed) {
    parts_.optimizer->record_step_stats(param_stats);
    runner.update(report.lr, skip);
    parts_.optimizer->record_step_stats(false);
    if (cfg_.train.qk_clip_tau) apply_qk_clip();
    if (ema_) ema_->update();  // after every change to the weights this step
  }
  metrics_->step_done(loader_ms, comm_ms);
  if (plan.log) measure_update(before, report);
  if (param_stats)
    report.param_stats = keel::param_stats(*parts_.optimizer, before,
                                           cfg_.train.eps * forward_scaling(cfg_.model).adam_eps_mult,
                                           cfg_.train.beta2);
  return report;
}

// |W| and |W_after - W_before| / |W| over all parameters (a sync: logged steps only).
void Trainer::measure_update(const std::vector<torch::Tensor>& before, StepReport& report) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> now, delta = before;
  for (const auto& p : parts_.optimizer->params()) now.push_back(p.param.detach());
  torch::_foreach_sub_(delta, now);  // delta := before - after = -update
  auto update = torch::stack(torch::_foreach_norm(delta, 2.0, norm_dtype(delta))).norm();
  auto weights = torch::stack(torch::_foreach_norm(now, 2.0, norm_dtype(now))).norm();
  report.param_norm = weights.item<double>();
  report.update_norm = update.item<double>();
  report.update_ratio = report.update_norm / report.param_norm;
  if (parts_.runner->last_update_norm().defined()) report.update_norm_preclip = parts_.runner->last_update_norm().item<double>();
}

// Gradient L2 norm of each block ("blocks.N.*") and of everything else
// (embedding, final norm, head), before clipping.
nlohmann::json Trainer::per_layer_grad_norms() {
  torch::NoGradGuard no_grad;
  const auto& params = parts_.optimizer->params();
  const GradNorms each = grad_norms(params, parts_.optimizer->grad_shard());  // ZeRO-1: from their owners
  std::vector<std::vector<int64_t>> groups(cfg_.model.n_layers + 1);
  for (size_t j = 0; j < each.index.size(); ++j) {
    const auto& name = params[each.index[j]].name;
    size_t g = groups.size() - 1;
    if (starts_with(name, "blocks.")) g = std::stoul(name.substr(7, name.find('.', 7) - 7));
    groups[g].push_back(static_cast<int64_t>(j));
  }
  std::vector<torch::Tensor> norms;
  for (const auto& g : groups)
    norms.push_back(g.empty() ? torch::zeros({}, torch::TensorOptions().device(compute_.device))
                              : each.norms.index_select(0, torch::tensor(g).to(each.norms.device())).norm());
  auto host = torch::stack(norms).to(torch::kFloat64).cpu();  // sync point
  nlohmann::json out = {{"blocks", nlohmann::json::array()}, {"other", host[cfg_.model.n_layers].item<double>()}};
  for (int64_t i = 0; i < cfg_.model.n_layers; ++i) out["blocks"].push_back(host[i].item<double>());
  return out;
}

// QK-clip (optim/qk_clip.h) after the update, from the per-head maximum
// logits the step's forwards recorded; ranks take the maximum over all ranks
// so that every replica applies the same rescaling.
void Trainer::apply_qk_clip() {
  counters_->add_qk_clipped(qk_clip_model_(parts_.model, *cfg_.train.qk_clip_tau, [&](torch::Tensor& maxima) {
    dist_->all_reduce_max(maxima, "the QK-clip maximum");
  }));
}

// Faults planted by the tests (util/fault_inject.h): a loss spike or a
// non-finite loss at one step.
// `step` is the batch's (1-based data step): the training step unless batches were skipped.
void Trainer::inject_loss_faults(int64_t step, LossParts& loss) const {
  if (step == faults_.loss_x10_at_step) {
    loss.total = loss.total * 10.0;
    loss.ce = loss.ce * 10.0;
  }
  if (step == faults_.nan_loss_at_step) {
    loss.total = loss.total * std::numeric_limits<double>::quiet_NaN();
    loss.ce = loss.ce * std::numeric_limits<double>::quiet_NaN();
  }
}

// A spike planted in the optimizer state (momentum_x1000_at_step): the first
// moments grow a thousandfold after this step's update, before its checkpoint.
void Trainer::inject_momentum_fault() {
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : parts_.optimizer->state())
    if (starts_with(name, "exp_avg.") || starts_with(name, "muon_momentum.")) t.mul_(1000.0);
}

// ------------------------------------------------- once in a while: the host

// Non-finite steps since the last check (the update was skipped on the
// device regardless): recorded in nonfinite.jsonl; true when the run halts.
bool Trainer::halt_on_nonfinite(const StepPlan& plan) {
  const auto c = counters_->read();  // sync point
  if (c.nonfinite_steps <= nonfinite_seen_) return false;
  nonfinite_seen_ = c.nonfinite_steps;
  nlohmann::json rec = {{"step", plan.step}, {"loss", c.loss_sum}, {"grad_norm", c.grad_norm},
                        {"lr", lr_at(cfg_.train, plan.step - 1)}, {"nonfinite_steps", c.nonfinite_steps},
                        {"policy", cfg_.train.nonfinite}};
  run_->append_event("nonfinite.jsonl", rec);
  if (cfg_.train.nonfinite == NonfinitePolicy::halt) {
    run_->log->error(strf("non-finite loss or gradient at step %lld (loss %s, grad norm %s); update skipped, "
                          "halting (train.nonfinite: halt). Record: %s",
                          static_cast<long long>(plan.step), rec["loss"].dump().c_str(),
                          rec["grad_norm"].dump().c_str(), run_->file("nonfinite.jsonl").c_str()));
    return true;
  }
  run_->log->warn(strf("non-finite loss or gradient at step %lld: update skipped (%lld so far)",
                       static_cast<long long>(plan.step), static_cast<long long>(c.nonfinite_steps)));
  return false;
}

// Stopping is agreed by all ranks (docs/papers.md#checkpoint-and-resume):
// a signal seen by any rank, or a divergence seen by rank 0's monitor, stops
// every rank after this step. The vote is a host sync: every step on the CPU,
// on CUDA only where the plan syncs anyway.
Trainer::StopVote Trainer::vote_on_stopping(const StepPlan& plan) {
  StopVote vote;
  vote.signal = stop_requested();
  bool diverged = stability_->diverged(), unstable = stability_->logit_unstable();
  if (dist_->distributed()) {
    if (plan.host_sync) {
      // With the verdicts, this rank's seconds per step since the last vote:
      // the maximum sets the next vote for every rank alike.
      const auto now = std::chrono::steady_clock::now();
      const double step_s = std::chrono::duration<double>(now - last_vote_time_).count() /
                            static_cast<double>(std::max<int64_t>(1, plan.step - last_vote_step_));
      auto votes = torch::tensor({vote.signal ? 1.0 : 0.0, diverged ? 1.0 : 0.0, unstable ? 1.0 : 0.0, step_s},
                                 torch::TensorOptions().dtype(torch::kFloat32)).to(compute_.device);
      dist_->all_reduce_max(votes, "the stop vote");
      auto host = votes.cpu();  // sync point
      vote.signal = host[0].item<float>() > 0;
      diverged = host[1].item<float>() > 0;
      unstable = host[2].item<float>() > 0;
      vote_cadence_.voted(plan.step, host[3].item<float>());
      last_vote_time_ = now;
      last_vote_step_ = plan.step;
    } else {
      vote.signal = diverged = unstable = false;  // decided at the next synchronising step
    }
  }
  vote.stop_after = opts_.stop_after_step > 0 && plan.step == opts_.stop_after_step;
  // Each is reported once (rank 0 knows why; other ranks only that it
  // happened) and stops the run only where the config asks for it.
  if (diverged && !divergence_reported_) {
    divergence_reported_ = true;
    if (stability_->diverged())
      run_->log->warn(stability_->divergence_text() +
                      (cfg_.monitor.stop_on_divergence ? "; stopping (monitor.stop_on_divergence)" : ""));
    if (cfg_.monitor.stop_on_divergence) vote.instability = "diverged";
  }
  if (unstable && !instability_reported_) {
    instability_reported_ = true;
    if (stability_->logit_unstable())
      run_->log->warn(stability_->instability_text() +
                      (cfg_.monitor.stop_on_logit_instability ? "; stopping (monitor.stop_on_logit_instability)"
                                                              : "; training on (the loss decides divergence)"));
    if (cfg_.monitor.stop_on_logit_instability && !vote.instability) vote.instability = "logit_unstable";
  }
  return vote;
}

void Trainer::record_spikes(const std::vector<SpikeEvent>& events) {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& e : events) {
    nlohmann::json j = e.to_json();
    run_->append_event("spikes.jsonl", j);
    all.push_back(j);
    run_->log->warn(strf("spike at step %lld: %s %.4g (z %.1f over mean %.4g)%s", static_cast<long long>(e.step),
                         e.signal.c_str(), e.value, e.z, e.mean,
                         e.top_attn_layer ? strf(", largest attention logit in layer %lld",
                                                 static_cast<long long>(*e.top_attn_layer)).c_str()
                                          : ""));
  }
  metrics_->add_spikes(all);
}

void Trainer::log_step(const StepPlan& plan, const StepReport& report) {
  const auto interval = metrics_->close_interval();
  const auto counters = counters_->read();  // sync point
  counters_->reset_interval();
  std::optional<double> val_loss;
  nlohmann::json spike_score;
  if (plan.eval) {
    val_loss = evaluator_->evaluate(parts_.model);
    spike_score = stability_->summary()["spike_score_percent"];
  }
  nlohmann::json evals;
  if (plan.tasks) evals = evaluate_tasks(plan);
  if (ema_ && (plan.eval || plan.tasks)) {
    if (!evals.is_object()) evals = nlohmann::json::object();
    evals["ema"] = evaluate_ema(plan);
  }
  metrics_->log(plan, interval, counters, report, val_loss, spike_score, evals);
}

nlohmann::json Trainer::evaluate_ema(const StepPlan& plan) {
  nlohmann::json out = nlohmann::json::object();
  WeightEma::Swap swap(*ema_);  // the model holds the average until the end of this function
  double val = NAN;
  if (plan.eval) {
    val = evaluator_->loss(parts_.model);
    out["val_loss"] = val;
    out["val_ppl"] = std::exp(val);
  }
  if (plan.tasks) {
    if (tasks_) out["tasks"] = tasks_->evaluate_apart(parts_.model);
    if (!cfg_.eval.sets.empty()) out["sets"] = evaluator_->loss_sets(parts_.model);
  }
  ema_->record_eval(val, out);
  return out;
}

// eval.tasks: read and tokenized before the first step, so a bad file stops
// the run there; the builtin task is written to tasks/builtin.jsonl (the
// generic format) for a look, or for lm-eval.
void Trainer::setup_tasks(const DataManifest& data) {
  const Tokenizer tok(tokenizer_path_);
  auto tasks = load_eval_tasks(cfg_, data, tok);
  for (const auto& t : tasks) {
    size_t requests = 0;
    for (const auto& d : t.docs) requests += d.requests.size();
    run_->log->info(strf("task %s: %zu examples, %zu requests%s", t.spec.name.c_str(), t.docs.size(), requests,
                         t.spec.path.empty() ? " (builtin: from the validation split, chance 0.25)"
                                             : (" from " + t.spec.path).c_str()));
    if (t.spec.kind == "builtin" && rank0()) {
      ensure_directory(run_->file("tasks"));
      write_file_atomic(run_->file("tasks/" + t.spec.name + ".jsonl"), task_to_jsonl(t));
    }
  }
  tasks_ = std::make_unique<TaskEvaluator>(std::move(tasks), tok, cfg_.model.max_seq_len, cfg_.eval.batch_size,
                                           dist_.get(), EvalDevice{compute_.device, compute_.bf16_autocast});
}

// Downstream tasks and held-out sets, for the record; after the last step
// also each example's log-likelihoods (tasks/<name>.scores.jsonl).
nlohmann::json Trainer::evaluate_tasks(const StepPlan& plan) {
  nlohmann::json evals = nlohmann::json::object();
  const auto t0 = std::chrono::steady_clock::now();
  if (tasks_) {
    tasks_->evaluate(parts_.model);
    evals["tasks"] = tasks_->last();
    if (plan.last && rank0()) {
      ensure_directory(run_->file("tasks"));
      for (size_t t = 0; t < tasks_->tasks().size(); ++t)
        write_file_atomic(run_->file("tasks/" + tasks_->tasks()[t].spec.name + ".scores.jsonl"),
                          tasks_->examples_jsonl(t));
    }
  }
  if (!cfg_.eval.sets.empty()) evals["sets"] = evaluator_->evaluate_sets(parts_.model);
  // Its cost, beside the training time it interrupts (docs/evaluation.md: under 10% at the shipped cadence).
  evals["tasks_eval_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return evals;
}

// A record or a train.log line the disk refused (RunDir::append_record, the
// Logger): the run stops after this step rather than train on with its
// records missing (docs/reliability.md#a-full-disk). First a checkpoint of
// this step, which carries the refused records for the resumed run to
// write; it needs space too, and when it fails the newest checkpoint on disk
// stays valid and a resume redoes the steps after it, records included.
void Trainer::stop_on_write_failure(int64_t step) {
  run_->log->error(strf("stopping after step %lld: %s", static_cast<long long>(step), run_->write_error().c_str()));
  // Data parallel: a save is collective, and only rank 0 writes records, so it stops alone (its peers as on a
  // failed peer); the newest checkpoint stays the one to resume from.
  if (!dist_->distributed()) {
    try {
      save_checkpoint(step);
    } catch (const std::exception& e) {
      run_->log->warn(strf("no checkpoint of step %lld either (%s): the newest on disk stays valid, and a resume "
                           "redoes the steps after it", static_cast<long long>(step), e.what()));
    }
  }
  try {
    write_summary("write_failed");
  } catch (const std::exception&) {  // it needs space too; the error to report is the first
  }
  throw write_failure();
}

FileError Trainer::write_failure() const {
  return FileError(run_->write_error(), exit_code_for_errno(run_->write_errno()));
}

void Trainer::write_summary(const std::string& stopped_by) {
  const double time_s = metrics_->elapsed_s();
  const double best = evaluator_->best();
  nlohmann::json s = {{"stopped_by", stopped_by},
                      {"steps", steps_done_},
                      {"tokens", steps_done_ * geometry_.tokens_per_step()},
                      {"time_s", time_s},
                      {"final_loss", metrics_->last_loss()},
                      {"initial_loss", metrics_->initial_loss()},
                      {"final_val_loss", evaluator_->last()},
                      {"best_val_loss", std::isfinite(best) ? best : NAN},
                      {"final_val_ppl", std::exp(evaluator_->last())},  // NaN (null) without evaluation
                      {"best_val_ppl", std::isfinite(best) ? std::exp(best) : NAN},
                      {"tokens_per_s", metrics_->mean_tokens_per_s()},
                      {"nonfinite_steps", nonfinite_seen_},
                      {"parameters", parts_.size.total},
                      // Wortsman et al.'s x axis: all but the embedding table and an untied head.
                      {"non_embedding_parameters", parts_.size.total - parts_.size.embedding - parts_.size.head},
                      {"world_size", dist_->world()},
                      {"spike_skipped_steps", spike_skips_},
                      {"rewinds", data_skips_.rewinds()},
                      {"data_skips", data_skips_.to_json()}};
  if (tasks_ && !tasks_->last().is_null()) s["tasks"] = tasks_->last();
  if (ema_) s["ema"] = ema_->summary();
  if (cfg_.train.cooldown_steps > 0)
    s["cooldown"] = {{"at", cfg_.train.cooldown_at},
                     {"steps", cfg_.train.cooldown_steps},
                     {"shape", name_of(cfg_.train.cooldown_shape)},
                     {"parent_run", cfg_.train.cooldown_from.empty() ? nlohmann::json() : nlohmann::json(cfg_.train.cooldown_from)},
                     {"parent_checkpoint", parent_checkpoint_.empty() ? nlohmann::json() : nlohmann::json(parent_checkpoint_)}};
  if (!evaluator_->last_sets().is_null()) s["sets"] = evaluator_->last_sets();
  s.update(stability_->summary());
  if (const Mixture* mix = train_data_->mixture()) {  // what each source actually gave this run
    const int64_t drawn = steps_done_ * geometry_.global_batch;
    s["data_mixture"] = nlohmann::json::array();
    for (size_t i = 0; i < mix->sources().size(); ++i) {
      const int k = static_cast<int>(i);
      s["data_mixture"].push_back({{"source", mix->sources()[i].name},
                                   {"weight", mix->sources()[i].weight},
                                   {"share", mix->share(k)},
                                   {"train_tokens", mix->sources()[i].tokens},
                                   {"sequences", mix->count_before(k, drawn)},
                                   {"epochs", mix->epochs(k, drawn)}});
    }
  }
  run_->write_json_atomic("summary.json", s);
  // Before any evaluation (none configured, or a stop before the first) there is no val loss: n/a, as the nulls.
  const std::string val = std::isfinite(best) ? strf("val loss %.4f (best %.4f)", evaluator_->last(), best)
                                              : std::string("val loss n/a");
  run_->log->info(strf("summary: %s after %lld steps, %.1f s; final loss %.4f, %s; %s", stopped_by.c_str(),
                       static_cast<long long>(steps_done_), time_s, metrics_->last_loss(), val.c_str(),
                       run_->file("summary.json").c_str()));
  // Every way out of a run passes here: one whose logs lost a line ends as an environment error, not a success.
  if (run_->write_failed()) throw write_failure();
}

}  // namespace keel
