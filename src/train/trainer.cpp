// The training loop. Read top to bottom: setup, then for each step: batch,
// forward/backward over micro-batches, clip, optimizer, log, eval, save.
#include "train/trainer.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <limits>
#include <cmath>
#include <sstream>
#include <thread>

#include "data/loader.h"
#include "data/manifest.h"
#include "data/prepare.h"
#include "dist/dist_env.h"
#include "model/init.h"
#include "model/model_size.h"
#include "monitor/stability.h"
#include "train/device.h"
#include "train/init_from.h"
#include "train/model_stats.h"
#include "train/optimizer.h"
#include "train/run_dir.h"
#include "train/qk_clip.h"
#include "train/schedule.h"
#include "train/step_runner.h"
#include "train/trainer_impl.h"

namespace keel {

namespace {

std::atomic<int> g_stop_signal{0};
void on_stop_signal(int sig) { g_stop_signal.store(sig); }  // only sets a flag (REFERENCE.md §9)

std::string hms(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d:%02d:%02d", static_cast<int>(s / 3600), static_cast<int>(s / 60 % 60),
                static_cast<int>(s % 60));
  return buf;
}

std::string si(double v) {
  char buf[32];
  if (v >= 1e9) std::snprintf(buf, sizeof buf, "%.2fG", v / 1e9);
  else if (v >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (v >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

}  // namespace

void install_stop_handlers() {
  g_stop_signal.store(0);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

bool stop_requested() { return g_stop_signal.load() != 0; }


void Trainer::setup() {
  // Who we are: a job of one, or a rank of a torchrun/SLURM/keel-launch job.
  const DistEnv env = parse_dist_env(current_dist_environment());
  compute_ = setup_compute(cfg_.train, env.local_rank, env.local_world_size);
  dist_ = env.distributed() ? std::make_unique<Dist>(env, resolve_backend(cfg_.dist.backend, compute_.device.is_cuda()),
                                                     cfg_.dist.timeout_s)
                            : std::make_unique<Dist>();
  check_config_matches_rank0();
  check_cuda_graph_setup(cfg_, compute_, dist_->world());  // every rank alike, before anything is written

  seq_len_ = cfg_.seq_len();
  global_batch_ = cfg_.train.batch_tokens > 0 ? cfg_.train.batch_tokens / seq_len_ : cfg_.train.batch_size;
  DataManifest data;
  // Rank 0 alone creates the run directory and prepares the data; the
  // others learn its verdict before they read either.
  collective_phase([&] {
    const int world = dist_->world();
    if (global_batch_ % world != 0)
      throw DistError(strf("train.batch_size: the global batch of %lld sequences does not split evenly over %d ranks",
                           static_cast<long long>(global_batch_), world));
    rows_ = global_batch_ / world;
    micro_batch_ = cfg_.train.micro_batch_size > 0 ? cfg_.train.micro_batch_size : rows_;
    if (rows_ % micro_batch_ != 0)
      throw DistError(strf("train.micro_batch_size: %lld does not divide the %lld sequences each of the %d ranks "
                           "gets per step", static_cast<long long>(micro_batch_), static_cast<long long>(rows_), world));
    n_micro_ = rows_ / micro_batch_;
    run_ = std::make_unique<RunDir>(cfg_, !opts_.resume.empty(), /*writer=*/rank0());
    if (rank0()) {
      run_->write_config(cfg_);
      data = ensure_prepared(cfg_);
    }
  });
  if (!rank0()) run_->log->quiet(strf("[rank %d]", dist_->rank()));

  collective_phase([&] {
    if (!rank0()) data = read_data_manifest(cfg_.data.dir);
    tokenizer_path_ = cfg_.data.dir + "/" + data.tokenizer.file;
    const uint64_t seed = static_cast<uint64_t>(cfg_.run.seed);
    const int64_t rank = dist_->rank(), world = dist_->world();
    train_data_ = std::make_unique<BatchLoader>(cfg_.data.dir, "train", seq_len_, global_batch_, rank, world, seed,
                                                cfg_.data.prefetch, cfg_.data.verify);
    // Validation batches hold micro_batch_size sequences (the global batch
    // when unset), split over the ranks when they divide evenly, else all on
    // rank 0: either way the same windows as a single process.
    val_rows_ = cfg_.train.micro_batch_size > 0 ? cfg_.train.micro_batch_size : global_batch_;
    has_val_ = data.val.tokens > seq_len_;
    if (has_val_ && val_rows_ % world == 0)
      val_data_ = std::make_unique<BatchLoader>(cfg_.data.dir, "val", seq_len_, val_rows_, rank, world, seed, 0,
                                                cfg_.data.verify);
    else if (has_val_ && rank0())
      val_data_ = std::make_unique<BatchLoader>(cfg_.data.dir, "val", seq_len_, val_rows_, 0, 1, seed, 0,
                                                cfg_.data.verify);
    if (!has_val_)
      run_->log->warn("no validation split in " + cfg_.data.dir + " (data.val_fraction = 0?): evaluation is off");

    size_ = model_size(cfg_.model, seq_len_);
    model_ = build_model(cfg_.model, seed, compute_.device);
    std::vector<NamedParam> params;
    for (auto& item : model_->named_parameters(true)) params.push_back({item.key(), item.value()});
    optimizer_ = std::make_unique<AdamW>(params, cfg_.train);
    runner_ = std::make_unique<StepRunner>(model_, *optimizer_, cfg_, compute_, micro_batch_);
    // Batches in page-locked memory: their copies to the GPU do not block the host.
    if (compute_.device.is_cuda()) train_data_->set_pinned(true);

    auto zeros = [&] { return torch::zeros({}, torch::TensorOptions().device(compute_.device)); };
    loss_sum_ = zeros();
    z_sum_ = zeros();
    nonfinite_count_ = zeros();
    grad_norm_ = zeros();
    stability_ = std::make_unique<StabilityMonitor>(cfg_.monitor);
    read_fault_injection();
    if (cfg_.train.cuda_graph && (nan_at_step_ || spike_at_step_))
      run_->log->warn("KEEL_FAULT_INJECT loss faults are not planted inside a CUDA graph (train.cuda_graph)");
  });
  if (!opts_.resume.empty()) {
    std::string dir;
    collective_phase([&] { dir = rank0() ? choose_resume_dir() : ""; });
    dir = dist_->exchange("resume", dir)[0];  // rank 0's choice, for every rank
    if (!dir.empty()) collective_phase([&] { resume_from_checkpoint(dir); });
  }
  // train.init_from (e.g. a `keel import-hf` directory): a fresh run starts from its weights.
  if (start_step_ == 0 && !cfg_.train.init_from.empty())
    collective_phase([&] { run_->log->info("initial weights from " + load_init_weights(cfg_, model_)); });
  setup_data_parallel();
}

// Tests plant faults through KEEL_FAULT_INJECT: nan_loss_at_step:N,
// loss_x10_at_step:N, kill_rank_at_step:R:N (SIGKILL), hang_rank_at_step:R:N.
void Trainer::read_fault_injection() {
  const char* fault = std::getenv("KEEL_FAULT_INJECT");
  if (!fault) return;
  const std::string f = fault;
  auto after = [&](const std::string& key) { return f.rfind(key, 0) == 0 ? f.substr(key.size()) : std::string(); };
  if (auto v = after("nan_loss_at_step:"); !v.empty()) nan_at_step_ = std::stoll(v);
  if (auto v = after("loss_x10_at_step:"); !v.empty()) spike_at_step_ = std::stoll(v);
  for (const char* key : {"kill_rank_at_step:", "hang_rank_at_step:"}) {
    auto v = after(key);
    if (v.empty() || std::stoi(v) != dist_->rank()) continue;
    (std::string(key)[0] == 'k' ? kill_at_step_ : hang_at_step_) = std::stoll(v.substr(v.find(':') + 1));
  }
}

nlohmann::json Trainer::per_layer_grad_norms() {
  torch::NoGradGuard no_grad;
  std::vector<std::vector<torch::Tensor>> groups(cfg_.model.n_layers + 1);
  for (const auto& p : optimizer_->params()) {
    if (!p.param.grad().defined()) continue;
    size_t g = groups.size() - 1;
    if (p.name.rfind("blocks.", 0) == 0) g = std::stoul(p.name.substr(7, p.name.find('.', 7) - 7));
    groups[g].push_back(p.param.grad());
  }
  std::vector<torch::Tensor> norms;
  for (const auto& g : groups)
    norms.push_back(g.empty() ? torch::zeros({}, torch::TensorOptions().device(compute_.device))
                              : torch::stack(torch::_foreach_norm(g, 2.0, torch::kFloat32)).norm());
  auto host = torch::stack(norms).to(torch::kFloat64).cpu();
  nlohmann::json out = {{"blocks", nlohmann::json::array()}, {"other", host[cfg_.model.n_layers].item<double>()}};
  for (int64_t i = 0; i < cfg_.model.n_layers; ++i) out["blocks"].push_back(host[i].item<double>());
  return out;
}

// QK-clip (train/qk_clip.h) after the update, from the per-head maximum
// logits the step's forwards recorded; ranks take the maximum over all ranks
// so that every replica applies the same rescaling.
void Trainer::apply_qk_clip() {
  auto clipped = qk_clip_model_(model_, *cfg_.train.qk_clip_tau,
                                [&](torch::Tensor& maxima) { dist_->all_reduce_max(maxima, "the QK-clip maximum"); });
  qk_clipped_heads_ = qk_clipped_heads_.defined() ? qk_clipped_heads_ + clipped : clipped;
}

void Trainer::record_spikes(const std::vector<SpikeEvent>& events) {
  for (const auto& e : events) {
    nlohmann::json j = e.to_json();
    run_->append_event("spikes.jsonl", j);
    pending_spikes_.push_back(j);
    run_->log->warn(strf("spike at step %lld: %s %.4g (z %.1f over mean %.4g)%s", static_cast<long long>(e.step),
                         e.signal.c_str(), e.value, e.z, e.mean,
                         e.top_attn_layer ? strf(", largest attention logit in layer %lld",
                                                 static_cast<long long>(*e.top_attn_layer)).c_str()
                                          : ""));
  }
}

void Trainer::print_settings() {
  auto& log = *run_->log;
  const auto& m = cfg_.model;
  const auto& t = cfg_.train;
  const std::string rule = "+" + std::string(26, '-') + "+" + std::string(54, '-') + "+";
  auto row = [&](const std::string& k, const std::string& v) { log.info(strf("| %-24s | %-52s |", k.c_str(), v.c_str())); };
  log.info(rule);
  row("run", run_->path());
  row("device", compute_.device_name + (compute_.bf16_autocast ? ", bf16 autocast" : ", fp32"));
  row("model", std::to_string(m.n_layers) + " layers, d " + std::to_string(m.d_model) + ", " +
                   std::to_string(m.n_heads) + "q/" + std::to_string(m.n_kv_heads) + "kv heads, " + m.mlp);
  row("norm placement / norm", m.norm_placement + " / " + m.norm);
  row("qk_norm", m.qk_norm.type == "none" ? "none"
                                          : m.qk_norm.type + ", " + m.qk_norm.scope + ", " + m.qk_norm.position);
  row("softcaps attn / final", (m.attn_softcap ? std::to_string(*m.attn_softcap) : "off") + " / " +
                                   (m.final_softcap ? std::to_string(*m.final_softcap) : "off"));
  row("vocab (padded)", std::to_string(m.vocab_size) + " (" + std::to_string(m.padded_vocab()) + ")");
  row("parameters", std::to_string(size_.total) + " (" + si(static_cast<double>(size_.total)) + ")");
  row("FLOPs per token", si(size_.flops_per_token));
  row("batch", std::to_string(global_batch_) + " x " + std::to_string(seq_len_) + " tokens, " +
                   std::to_string(n_micro_) + " micro-step(s) of " + std::to_string(micro_batch_));
  row("optimizer", std::string(optimizer_->fused() ? "fused" : "reference") + " AdamW, lr " +
                       std::to_string(t.lr) + ", wd " + std::to_string(t.weight_decay));
  row("schedule", t.schedule + ", warm-up " + std::to_string(t.warmup_steps) + ", " + std::to_string(t.max_steps) +
                      " steps");
  row("train tokens", si(static_cast<double>(train_data_->tokens())));
  if (dist_->distributed())
    row("data parallel", strf("%d ranks, %s (%s env), %lld seq/rank, %zu buckets <= %g MiB, %s", dist_->world(),
                              dist_->backend().c_str(), dist_->env().source.c_str(), static_cast<long long>(rows_),
                              grad_sync_->bucket_count(), cfg_.dist.bucket_mb,
                              cfg_.dist.overlap ? "overlapped" : "after backward"));
  row("MFU peak", si(compute_.peak_flops) + "FLOP/s, " + compute_.peak_source);
  log.info(rule);
  log.info("MFU convention: " + flops_convention());
}

void Trainer::train_step(int64_t step) {
  if (step + 1 == kill_at_step_) std::raise(SIGKILL);  // injected fault: this rank dies
  while (step + 1 == hang_at_step_) std::this_thread::sleep_for(std::chrono::seconds(1));  // ... or hangs
  lr_ = lr_at(cfg_.train, step);
  const bool logging = (step + 1) % cfg_.train.log_every == 0 || step + 1 == cfg_.train.max_steps;
  const bool graphed = runner_->graph_mode();
  // On logging steps, the weights before the step, to measure the update.
  std::vector<torch::Tensor> before;
  if (logging) {
    torch::NoGradGuard no_grad;
    for (const auto& p : optimizer_->params()) before.push_back(p.param.detach().clone());
  }
  if (!graphed) {
    if (grad_sync_)
      grad_sync_->zero_grad();  // zeroes the buckets that .grad views
    else
      optimizer_->zero_grad();
    runner_->begin_step();
  }
  auto wait0 = Clock::now();
  Batch batch = train_data_->get(step);
  loader_wait_ms_ += seconds_since(wait0) * 1e3;
  if (monitor_step(step) && rank0()) {  // statistics are rank 0's job: it logs them
    const int64_t n = std::min<int64_t>(cfg_.monitor.sequences, batch.inputs.size(0));
    pending_monitor_ = collect_model_stats(model_, batch.inputs.narrow(0, 0, n).to(compute_.device),
                                           compute_.bf16_autocast);
    const auto& attn = pending_monitor_["attn"];
    max_attn_logit_.resize(attn.size(), 0.0);
    for (size_t i = 0; i < attn.size(); ++i)
      max_attn_logit_[i] = std::max(max_attn_logit_[i], attn[i]["max_logit"].get<double>());
    stability_->observe_attention(step + 1, attn);
    final_z_ = pending_monitor_["output"]["z_loss"].get<double>();
  }
  StepResult r;
  if (graphed) {
    r = runner_->graphed_step(runner_->to_device(batch), lr_);  // forward .. update in one replay
  } else {
    MicroHooks hooks;
    hooks.before_backward = [&](int64_t micro, LossParts& loss) {
      if (grad_sync_ && micro == n_micro_ - 1) grad_sync_->arm();  // this backward's gradients are final
      inject_loss_faults(step, loss);
    };
    r.loss = runner_->forward_backward(runner_->to_device(batch), hooks);
    if (grad_sync_) {
      comm_wait_ms_ += grad_sync_->finish();  // gradients are now the mean over ranks
      reduce_step_loss(r.loss.ce, r.loss.z);
    }
    if (logging && cfg_.monitor.layer_grad_norms) layer_grad_norms_ = per_layer_grad_norms();
    r.clip = runner_->clip(r.loss.ce);
  }
  loss_sum_ += r.loss.ce;
  z_sum_ += r.loss.z;
  ++loss_count_;
  // A graph's output is rewritten by the next replay: keep a copy for the log line.
  grad_norm_ = graphed ? r.clip.grad_norm.clone() : r.clip.grad_norm;
  auto found_inf = r.clip.found_inf;
  nonfinite_count_ += found_inf;
  auto signals = torch::stack({r.loss.ce.to(torch::kFloat32), grad_norm_.to(torch::kFloat32)});
  if (cfg_.monitor.skip_on_spike) {  // never with train.cuda_graph (a config check)
    // The verdict is needed before the update: one host sync per step.
    auto host = signals.cpu();
    auto events = stability_->observe(step + 1, host[0].item<double>(), host[1].item<double>());
    record_spikes(events);
    if (!events.empty()) {
      found_inf = torch::ones_like(found_inf);  // skip the update on the device
      ++spike_skips_;
    }
  } else {
    stability_->push(step + 1, signals);
  }
  if (!graphed) {
    runner_->update(lr_, found_inf);
    if (cfg_.train.qk_clip_tau) apply_qk_clip();
  }
  if (logging) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> now;
    for (const auto& p : optimizer_->params()) now.push_back(p.param.detach());
    torch::_foreach_sub_(before, now);  // before := before - after = -update
    auto update = torch::stack(torch::_foreach_norm(before, 2.0, torch::kFloat32)).norm();
    auto weights = torch::stack(torch::_foreach_norm(now, 2.0, torch::kFloat32)).norm();
    param_norm_ = weights.item<double>();
    update_ratio_ = (update / weights).item<double>();
  }
}

// Faults planted by the tests (read_fault_injection): a loss spike or a
// non-finite loss at one step.
void Trainer::inject_loss_faults(int64_t step, LossParts& loss) const {
  if (step + 1 == spike_at_step_) {
    loss.total = loss.total * 10.0;
    loss.ce = loss.ce * 10.0;
  }
  if (step + 1 == nan_at_step_) {
    loss.total = loss.total * std::numeric_limits<double>::quiet_NaN();
    loss.ce = loss.ce * std::numeric_limits<double>::quiet_NaN();
  }
}

// Mean validation loss over train.eval_batches fixed batches; every rank
// evaluates its share and the sums are all-reduced.
double Trainer::evaluate() {
  torch::NoGradGuard no_grad;
  auto total = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(compute_.device));
  for (int64_t i = 0; val_data_ && i < cfg_.train.eval_batches; ++i) {
    Batch b = val_data_->val_batch(i);
    AutocastScope autocast(compute_.bf16_autocast);
    auto logits = model_->forward(b.inputs.to(compute_.device));
    auto ce = language_model_loss(logits, b.targets.to(compute_.device), 0.0).ce;
    total += ce.to(torch::kFloat64) * static_cast<double>(b.inputs.size(0));
  }
  dist_->all_reduce_sum(total, "the validation all-reduce");
  return total.item<double>() / static_cast<double>(val_rows_ * cfg_.train.eval_batches);
}

void Trainer::log_step(int64_t step, bool eval_now) {
  const double loss = loss_sum_.item<double>() / static_cast<double>(std::max<int64_t>(1, loss_count_));
  const double z = z_sum_.item<double>() / static_cast<double>(std::max<int64_t>(1, loss_count_));
  const double gnorm = grad_norm_.item<double>();
  loss_sum_.zero_();
  z_sum_.zero_();
  loss_count_ = 0;
  last_loss_ = loss;
  if (std::isnan(initial_loss_)) initial_loss_ = loss;

  const double dt = seconds_since(interval_start_);
  const double tokens_step = static_cast<double>(global_batch_ * seq_len_);
  const double tok_s = interval_steps_ > 0 ? tokens_step * interval_steps_ / dt : 0;
  const double step_ms = interval_steps_ > 0 ? dt * 1e3 / interval_steps_ : 0;
  const double mfu = compute_.peak_flops > 0 ? size_.flops_per_token * tok_s / (compute_.peak_flops * dist_->world()) : 0;
  const double loader_ms = interval_steps_ > 0 ? loader_wait_ms_ / interval_steps_ : 0;
  const double comm_ms = interval_steps_ > 0 ? comm_wait_ms_ / interval_steps_ : 0;
  if (interval_steps_ > 0) {
    tokens_per_s_sum_ += tok_s;
    ++tokens_per_s_n_;
  }
  const double elapsed = seconds_since(run_start_);
  const int64_t done = step + 1 - start_step_;
  const double eta = done > 0 ? elapsed / done * (cfg_.train.max_steps - step - 1) : NAN;

  nlohmann::json rec = {{"step", step + 1},
                        {"tokens", (step + 1) * global_batch_ * seq_len_},
                        {"loss", loss},
                        {"lr", lr_},
                        {"grad_norm", gnorm},
                        {"tokens_per_s", tok_s},
                        {"step_ms", step_ms},
                        {"loader_wait_ms", loader_ms},
                        {"mfu", mfu},
                        {"elapsed_s", elapsed}};
  if (dist_->distributed()) rec["comm_wait_ms"] = comm_ms;  // host time blocked on gradient all-reduces
  if (qk_clipped_heads_.defined()) {  // head-steps rescaled by QK-clip since the last record
    rec["qk_clipped_heads"] = qk_clipped_heads_.item<double>();
    qk_clipped_heads_ = torch::Tensor();
  }
  if (cfg_.train.z_loss > 0) rec["z_loss"] = z;
  if (std::isfinite(param_norm_)) {  // measured on this step only (see train_step)
    rec["param_norm"] = param_norm_;
    rec["update_ratio"] = update_ratio_;
    param_norm_ = update_ratio_ = NAN;
  }
  if (!layer_grad_norms_.is_null()) {
    rec["layer_grad_norms"] = layer_grad_norms_;
    layer_grad_norms_ = nullptr;
  }
  if (!pending_spikes_.empty()) {
    rec["spikes"] = pending_spikes_;
    pending_spikes_ = nlohmann::json::array();
  }
  std::string monitor_text;
  if (!pending_monitor_.is_null()) {
    rec["attn"] = pending_monitor_["attn"];
    rec["output"] = pending_monitor_["output"];
    monitor_text = strf(" | attn L0 max %.1f | logit max %.1f", pending_monitor_["attn"][0]["max_logit"].get<double>(),
                        pending_monitor_["output"]["max_logit"].get<double>());
    pending_monitor_ = nullptr;
  }
  std::string val_text;
  if (eval_now) {
    last_val_loss_ = evaluate();
    best_val_loss_ = std::min(best_val_loss_, last_val_loss_);
    rec["val_loss"] = last_val_loss_;
    rec["val_ppl"] = std::exp(last_val_loss_);
    rec["spike_score_percent"] = stability_->summary()["spike_score_percent"];  // OLMo 2, so far
    val_text = strf(" | val %.4f (ppl %.1f)", last_val_loss_, std::exp(last_val_loss_));
  }
  run_->append_metrics(rec);
  const std::string comm_text = dist_->distributed() ? strf(" (comm wait %.1f)", comm_ms) : "";
  run_->log->info(strf("step %6lld/%lld | loss %.4f | lr %.2e | gnorm %.3f | %s tok/s | %.1f ms%s | MFU %.1f%%%s%s | %s < %s",
                       static_cast<long long>(step + 1), static_cast<long long>(cfg_.train.max_steps), loss, lr_,
                       gnorm, si(tok_s).c_str(), step_ms, comm_text.c_str(), 100 * mfu, val_text.c_str(),
                       monitor_text.c_str(), hms(elapsed).c_str(), hms(eta).c_str()));
  interval_start_ = Clock::now();
  interval_steps_ = 0;
  loader_wait_ms_ = 0;
  comm_wait_ms_ = 0;
}

void Trainer::write_summary(const std::string& stopped_by) {
  const double time_s = seconds_since(run_start_);
  nlohmann::json s = {{"stopped_by", stopped_by},
                      {"steps", steps_done_},
                      {"tokens", steps_done_ * global_batch_ * seq_len_},
                      {"time_s", time_s},
                      {"final_loss", last_loss_},
                      {"initial_loss", initial_loss_},
                      {"final_val_loss", last_val_loss_},
                      {"best_val_loss", std::isfinite(best_val_loss_) ? best_val_loss_ : NAN},
                      {"tokens_per_s", tokens_per_s_n_ > 0 ? tokens_per_s_sum_ / tokens_per_s_n_ : 0.0},
                      {"nonfinite_steps", nonfinite_seen_},
                      {"parameters", size_.total},
                      {"world_size", dist_->world()},
                      {"max_attn_logit_per_layer", max_attn_logit_},
                      {"spike_skipped_steps", spike_skips_},
                      {"final_z_loss", std::isfinite(final_z_) ? nlohmann::json(final_z_) : nlohmann::json()}};
  s.update(stability_->summary());
  run_->write_json_atomic("summary.json", s);
  run_->log->info(strf("summary: %s after %lld steps, %.1f s; final loss %.4f, val loss %.4f (best %.4f); %s",
                       stopped_by.c_str(), static_cast<long long>(steps_done_), time_s, last_loss_, last_val_loss_,
                       best_val_loss_, run_->file("summary.json").c_str()));
}

int Trainer::run() {
  setup();
  print_settings();
  install_stop_handlers();
  run_start_ = interval_start_ = Clock::now();
  if (start_step_ >= cfg_.train.max_steps) {
    run_->log->info(strf("nothing to do: the checkpoint is at step %lld and train.max_steps is %lld",
                         static_cast<long long>(start_step_), static_cast<long long>(cfg_.train.max_steps)));
    steps_done_ = start_step_;
    write_summary("completed");
    return 0;
  }
  std::string stopped_by = "completed";
  int exit_code = 0;
  const int64_t max_steps = cfg_.train.max_steps;
  for (int64_t step = start_step_; step < max_steps; ++step) {
    train_step(step);
    ++interval_steps_;
    steps_done_ = step + 1;
    const bool last = step + 1 == max_steps;
    bool signal_stop = stop_requested();
    const bool eval_now = has_val_ && (last || (cfg_.train.eval_every > 0 && (step + 1) % cfg_.train.eval_every == 0));
    // Non-finite values: checked every step on the CPU (free there), on
    // logging steps on CUDA (a host sync); the update was skipped regardless.
    const bool check_now = compute_.device.is_cpu() || (step + 1) % cfg_.train.log_every == 0 || last;
    if (check_now) {
      const int64_t bad = static_cast<int64_t>(nonfinite_count_.item<double>());
      if (bad > nonfinite_seen_) {
        nonfinite_seen_ = bad;
        nlohmann::json rec = {{"step", step + 1}, {"loss", loss_sum_.item<double>()},
                              {"grad_norm", grad_norm_.item<double>()}, {"lr", lr_},
                              {"nonfinite_steps", bad}, {"policy", cfg_.train.nonfinite}};
        run_->append_event("nonfinite.jsonl", rec);
        if (cfg_.train.nonfinite == "halt") {
          run_->log->error(strf("non-finite loss or gradient at step %lld (loss %s, grad norm %s); update skipped, "
                                "halting (train.nonfinite: halt). Record: %s",
                                static_cast<long long>(step + 1), rec["loss"].dump().c_str(),
                                rec["grad_norm"].dump().c_str(), run_->file("nonfinite.jsonl").c_str()));
          stopped_by = "nonfinite";
          exit_code = 3;
          break;
        }
        run_->log->warn(strf("non-finite loss or gradient at step %lld: update skipped (%lld so far)",
                             static_cast<long long>(step + 1), static_cast<long long>(bad)));
      }
    }
    const bool periodic = cfg_.checkpoint.every > 0 && (step + 1) % cfg_.checkpoint.every == 0;
    if (step + 1 == max_steps || (step + 1) % cfg_.train.log_every == 0 || eval_now || periodic ||
        monitor_step(step))
      record_spikes(stability_->drain());
    // Stopping is agreed by all ranks (REFERENCE.md §9): a signal seen by any
    // rank, or a divergence seen by rank 0's attention monitor, stops every
    // rank after this step. Every step on the CPU; on CUDA (where reading the
    // vote is a host sync) on logging steps.
    bool any_diverged = stability_->diverged();
    if (dist_->distributed()) {
      if (compute_.device.is_cpu() || check_now) {
        auto votes = torch::tensor({signal_stop ? 1.0f : 0.0f, any_diverged ? 1.0f : 0.0f}).to(compute_.device);
        dist_->all_reduce_max(votes, "the stop vote");
        auto host = votes.cpu();
        signal_stop = host[0].item<float>() > 0;
        any_diverged = host[1].item<float>() > 0;
      } else {
        signal_stop = any_diverged = false;  // decided at the next logging step
      }
    }
    const bool stopping = signal_stop || (opts_.stop_after_step > 0 && step + 1 == opts_.stop_after_step);
    if (stopping) record_spikes(stability_->drain());
    const bool log_now = (step + 1) % cfg_.train.log_every == 0 || last || eval_now || stopping || monitor_step(step);
    bool diverged_stop = false;
    if (any_diverged && !divergence_reported_) {
      divergence_reported_ = true;
      if (stability_->diverged()) {  // rank 0 always knows why; other ranks only that it happened
        const auto sum = stability_->summary();
        run_->log->warn(strf("diverged at step %lld: %s%s",
                             static_cast<long long>(sum["diverged_step"].get<int64_t>()),
                             sum["diverged_reason"].get<std::string>().c_str(),
                             cfg_.monitor.stop_on_divergence ? "; stopping (monitor.stop_on_divergence)" : ""));
      }
      diverged_stop = cfg_.monitor.stop_on_divergence;
    }
    if (log_now || diverged_stop) log_step(step, eval_now);
    if (diverged_stop) {
      stopped_by = "diverged";
      break;
    }
    if (periodic || stopping || (last && cfg_.checkpoint.at_end)) save_checkpoint(step + 1);
    if (stopping) {
      stopped_by = signal_stop ? "signal" : "stop_after_step";
      run_->log->warn(strf("stopping after step %lld (%s)", static_cast<long long>(step + 1),
                           !signal_stop ? "--stop-after-step"
                           : stop_requested() ? strf("signal %d", g_stop_signal.load()).c_str()
                                              : "a signal to another rank"));
      break;
    }
  }
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

}  // namespace keel
