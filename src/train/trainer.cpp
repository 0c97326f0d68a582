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

#include "data/loader.h"
#include "data/prepare.h"
#include "model/init.h"
#include "model/model_size.h"
#include "monitor/stability.h"
#include "train/device.h"
#include "train/model_stats.h"
#include "train/optimizer.h"
#include "train/run_dir.h"
#include "train/schedule.h"
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
  compute_ = setup_compute(cfg_.train);
  run_ = std::make_unique<RunDir>(cfg_, !opts_.resume.empty(), /*writer=*/true);
  run_->write_config(cfg_);

  seq_len_ = cfg_.seq_len();
  global_batch_ = cfg_.train.batch_tokens > 0 ? cfg_.train.batch_tokens / seq_len_ : cfg_.train.batch_size;
  micro_batch_ = cfg_.train.micro_batch_size > 0 ? cfg_.train.micro_batch_size : global_batch_;
  n_micro_ = global_batch_ / micro_batch_;

  DataManifest data = ensure_prepared(cfg_);
  tokenizer_path_ = cfg_.data.dir + "/" + data.tokenizer.file;
  const uint64_t seed = static_cast<uint64_t>(cfg_.run.seed);
  train_data_ = std::make_unique<BatchLoader>(cfg_.data.dir, "train", seq_len_, global_batch_, 0, 1, seed,
                                              cfg_.data.prefetch, cfg_.data.verify);
  if (data.val.tokens > seq_len_)
    val_data_ = std::make_unique<BatchLoader>(cfg_.data.dir, "val", seq_len_, micro_batch_, 0, 1, seed, 0,
                                              cfg_.data.verify);
  else
    run_->log->warn("no validation split in " + cfg_.data.dir + " (data.val_fraction = 0?): evaluation is off");

  size_ = model_size(cfg_.model, seq_len_);
  model_ = build_model(cfg_.model, seed, compute_.device);
  std::vector<NamedParam> params;
  for (auto& item : model_->named_parameters(true)) params.push_back({item.key(), item.value()});
  optimizer_ = std::make_unique<AdamW>(params, cfg_.train);

  auto zeros = [&] { return torch::zeros({}, torch::TensorOptions().device(compute_.device)); };
  loss_sum_ = zeros();
  z_sum_ = zeros();
  nonfinite_count_ = zeros();
  grad_norm_ = zeros();
  stability_ = std::make_unique<StabilityMonitor>(cfg_.monitor);
  if (const char* fault = std::getenv("KEEL_FAULT_INJECT")) {
    const std::string f = fault, key = "nan_loss_at_step:";
    if (f.rfind(key, 0) == 0) nan_at_step_ = std::stoll(f.substr(key.size()));
    const std::string spike_key = "loss_x10_at_step:";
    if (f.rfind(spike_key, 0) == 0) spike_at_step_ = std::stoll(f.substr(spike_key.size()));
  }
  if (!opts_.resume.empty()) resume_from_checkpoint();
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
  row("MFU peak", si(compute_.peak_flops) + "FLOP/s, " + compute_.peak_source);
  log.info(rule);
  log.info("MFU convention: " + flops_convention());
}

void Trainer::train_step(int64_t step) {
  lr_ = lr_at(cfg_.train, step);
  optimizer_->zero_grad();
  auto wait0 = Clock::now();
  Batch batch = train_data_->get(step);
  loader_wait_ms_ += seconds_since(wait0) * 1e3;
  if (cfg_.monitor.every > 0 && (step + 1) % cfg_.monitor.every == 0) {
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
  auto step_loss = torch::zeros({}, torch::TensorOptions().device(compute_.device));
  for (int64_t i = 0; i < n_micro_; ++i) {
    auto x = batch.inputs.narrow(0, i * micro_batch_, micro_batch_).to(compute_.device, /*non_blocking=*/true);
    auto y = batch.targets.narrow(0, i * micro_batch_, micro_batch_).to(compute_.device, true);
    LossParts loss;
    {
      AutocastScope autocast(compute_.bf16_autocast);
      auto logits = model_->forward(x);
      loss = language_model_loss(logits, y, cfg_.train.z_loss);
    }
    if (step + 1 == spike_at_step_) {  // injected fault: a loss spike
      loss.total = loss.total * 10.0;
      loss.ce = loss.ce * 10.0;
    }
    if (step + 1 == nan_at_step_) {  // injected fault: a non-finite loss
      loss.total = loss.total * std::numeric_limits<double>::quiet_NaN();
      loss.ce = loss.ce * std::numeric_limits<double>::quiet_NaN();
    }
    // Equal-sized micro-batches: the mean of their means is the batch mean.
    (loss.total / static_cast<double>(n_micro_)).backward();
    loss_sum_ += loss.ce.detach() / static_cast<double>(n_micro_);
    step_loss += loss.ce.detach() / static_cast<double>(n_micro_);
    if (loss.z.defined()) z_sum_ += loss.z.detach() / static_cast<double>(n_micro_);
  }
  ++loss_count_;
  const bool logging = (step + 1) % cfg_.train.log_every == 0 || step + 1 == cfg_.train.max_steps;
  if (logging && cfg_.monitor.layer_grad_norms) layer_grad_norms_ = per_layer_grad_norms();
  grad_norm_ = clip_grad_norm(optimizer_->params(), cfg_.train.grad_clip);
  // A non-finite loss or gradient skips the update on the device, no sync.
  auto found_inf = 1.0 - (torch::isfinite(grad_norm_) & torch::isfinite(loss_sum_)).to(torch::kFloat32);
  nonfinite_count_ += found_inf;
  auto signals = torch::stack({step_loss.to(torch::kFloat32), grad_norm_.to(torch::kFloat32)});
  if (cfg_.monitor.skip_on_spike) {
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
  // On logging steps, also measure the update relative to the weights.
  std::vector<torch::Tensor> before;
  if (logging) {
    torch::NoGradGuard no_grad;
    for (const auto& p : optimizer_->params()) before.push_back(p.param.detach().clone());
  }
  optimizer_->step(lr_, found_inf);
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

double Trainer::evaluate() {
  torch::NoGradGuard no_grad;
  double total = 0;
  for (int64_t i = 0; i < cfg_.train.eval_batches; ++i) {
    Batch b = val_data_->val_batch(i);
    AutocastScope autocast(compute_.bf16_autocast);
    auto logits = model_->forward(b.inputs.to(compute_.device));
    total += language_model_loss(logits, b.targets.to(compute_.device), 0.0).ce.item<double>();
  }
  return total / static_cast<double>(cfg_.train.eval_batches);
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
  const double mfu = compute_.peak_flops > 0 ? size_.flops_per_token * tok_s / compute_.peak_flops : 0;
  const double loader_ms = interval_steps_ > 0 ? loader_wait_ms_ / interval_steps_ : 0;
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
  run_->log->info(strf("step %6lld/%lld | loss %.4f | lr %.2e | gnorm %.3f | %s tok/s | %.1f ms | MFU %.1f%%%s%s | %s < %s",
                       static_cast<long long>(step + 1), static_cast<long long>(cfg_.train.max_steps), loss, lr_,
                       gnorm, si(tok_s).c_str(), step_ms, 100 * mfu, val_text.c_str(), monitor_text.c_str(), hms(elapsed).c_str(),
                       hms(eta).c_str()));
  interval_start_ = Clock::now();
  interval_steps_ = 0;
  loader_wait_ms_ = 0;
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
    const bool stopping = stop_requested() || (opts_.stop_after_step > 0 && step + 1 == opts_.stop_after_step);
    const bool eval_now = val_data_ && (last || (cfg_.train.eval_every > 0 && (step + 1) % cfg_.train.eval_every == 0));
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
    const bool monitored = !pending_monitor_.is_null();
    const bool periodic = cfg_.checkpoint.every > 0 && (step + 1) % cfg_.checkpoint.every == 0;
    const bool log_now = (step + 1) % cfg_.train.log_every == 0 || last || eval_now || stopping || monitored;
    if (log_now || periodic) record_spikes(stability_->drain());
    bool diverged_stop = false;
    if (stability_->diverged() && !divergence_reported_) {
      divergence_reported_ = true;
      const auto sum = stability_->summary();
      run_->log->warn(strf("diverged at step %lld: %s%s", static_cast<long long>(sum["diverged_step"].get<int64_t>()),
                           sum["diverged_reason"].get<std::string>().c_str(),
                           cfg_.monitor.stop_on_divergence ? "; stopping (monitor.stop_on_divergence)" : ""));
      diverged_stop = cfg_.monitor.stop_on_divergence;
    }
    if (log_now || diverged_stop) log_step(step, eval_now);
    if (diverged_stop) {
      stopped_by = "diverged";
      break;
    }
    if (periodic || stopping || (last && cfg_.checkpoint.at_end)) save_checkpoint(step + 1);
    if (stopping) {
      stopped_by = stop_requested() ? "signal" : "stop_after_step";
      run_->log->warn(strf("stopping after step %lld (%s)", static_cast<long long>(step + 1),
                           stop_requested() ? strf("signal %d", g_stop_signal.load()).c_str() : "--stop-after-step"));
      break;
    }
  }
  write_summary(stopped_by);
  return exit_code;
}

int run_training(const Config& config, const TrainOptions& options) {
  Trainer trainer(config, options);
  return trainer.run();
}

}  // namespace keel
