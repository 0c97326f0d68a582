#include "train/metrics_logger.h"

#include "util/log.h"
#include "util/text.h"

namespace keel {

MetricsLogger::MetricsLogger(const Config& cfg, RunDir& run, const BatchGeometry& geometry, const ModelSize& size,
                             const ComputeSetup& compute, int world)
    : cfg_(cfg), run_(run), geometry_(geometry), size_(size), compute_(compute), world_(world) {}

void MetricsLogger::start(int64_t start_step) {
  start_step_ = start_step;
  run_start_ = interval_start_ = Clock::now();
  timed_steps_ = 0;  // the open interval's earlier steps (a resume) were timed by another process
  loader_wait_ms_ = comm_wait_ms_ = 0;
  run_.restore_unwritten(std::exchange(carried_, nlohmann::json::array()));
}

void MetricsLogger::restart(int64_t step, double elapsed_s) {
  start(step);
  earlier_s_ = elapsed_s;
}

double MetricsLogger::elapsed_s() const {
  return earlier_s_ + std::chrono::duration<double>(Clock::now() - run_start_).count();
}

void MetricsLogger::step_done(double loader_wait_ms, double comm_wait_ms) {
  ++interval_steps_;
  ++timed_steps_;
  loader_wait_ms_ += loader_wait_ms;
  comm_wait_ms_ += comm_wait_ms;
}

void MetricsLogger::add_spikes(const nlohmann::json& events) {
  for (const auto& e : events) spikes_.push_back(e);
}

MetricsLogger::Interval MetricsLogger::open_interval() const {
  return Interval{interval_steps_, timed_steps_, std::chrono::duration<double>(Clock::now() - interval_start_).count(),
                  loader_wait_ms_, comm_wait_ms_};
}

MetricsLogger::Interval MetricsLogger::close_interval() {
  const Interval i = open_interval();
  interval_steps_ = timed_steps_ = 0;
  loader_wait_ms_ = comm_wait_ms_ = 0;
  return i;
}

void MetricsLogger::log(const StepPlan& plan, const Interval& in, const DeviceCounters::Values& c,
                        const StepReport& r, std::optional<double> val_loss, const nlohmann::json& spike_score,
                        const nlohmann::json& evals) {
  write(plan, in, c, r, val_loss, spike_score, evals, "");
  interval_start_ = Clock::now();  // evaluation and logging count toward neither interval
}

void MetricsLogger::log_stop(const StepPlan& plan, const DeviceCounters::Values& c, const StepReport& r,
                             const std::string& why) {
  write(plan, open_interval(), c, r, std::nullopt, nlohmann::json(), nlohmann::json(), why);
}

void MetricsLogger::write(const StepPlan& plan, const Interval& in, const DeviceCounters::Values& c,
                          const StepReport& r, std::optional<double> val_loss, const nlohmann::json& spike_score,
                          const nlohmann::json& evals, const std::string& why) {
  const bool regular = why.empty();
  const int64_t step = plan.step;
  // Sums over every step since the previous record; times over the steps this process ran.
  const double n = static_cast<double>(in.steps), timed = static_cast<double>(in.timed_steps);
  const double loss = c.loss_sum / std::max(1.0, n), z = c.z_sum / std::max(1.0, n);
  last_loss_ = loss;
  // The summary's first loss and mean throughput are the regular records'.
  if (regular && std::isnan(initial_loss_)) initial_loss_ = loss;
  const bool measured = in.timed_steps > 0 && in.seconds > 0;
  const double tok_s = measured ? static_cast<double>(geometry_.tokens_per_step()) * timed / in.seconds : 0;
  const double step_ms = measured ? in.seconds * 1e3 / timed : 0;
  const double mfu = compute_.peak_flops > 0 ? size_.flops_per_token * tok_s / (compute_.peak_flops * world_) : 0;
  if (regular && measured) {
    tokens_per_s_sum_ += tok_s;
    ++tokens_per_s_n_;
  }
  const double elapsed = elapsed_s();
  const int64_t done = step - start_step_;
  const double eta = done > 0 ? (elapsed - earlier_s_) / done * static_cast<double>(cfg_.train.end_step() - step) : NAN;

  nlohmann::json rec = {{"step", step},
                        {"tokens", step * geometry_.tokens_per_step()},
                        {"loss", loss},
                        {"lr", r.lr},
                        {"grad_norm", c.grad_norm},
                        {"tokens_per_s", tok_s},
                        {"step_ms", step_ms},
                        {"loader_wait_ms", in.timed_steps > 0 ? in.loader_wait_ms / timed : 0.0},
                        {"mfu", mfu},
                        {"elapsed_s", elapsed}};
  // Host time blocked on gradient all-reduces: Gloo blocks; NCCL only orders
  // the stream (the host runs ahead), so there it is near zero.
  const double comm_ms = in.timed_steps > 0 ? in.comm_wait_ms / timed : 0;
  if (world_ > 1) rec["comm_wait_ms"] = comm_ms;
  if (cfg_.train.qk_clip_tau) rec["qk_clipped_heads"] = c.qk_clipped_heads;  // head-steps rescaled since the last record
  if (cfg_.train.z_loss > 0) rec["z_loss"] = z;
  if (std::isfinite(r.param_norm)) {
    rec["param_norm"] = r.param_norm;
    rec["update_ratio"] = r.update_ratio;
    rec["update_norm"] = r.update_norm;
    if (std::isfinite(r.update_norm_preclip)) rec["update_norm_preclip"] = r.update_norm_preclip;
  }
  if (!r.layer_grad_norms.is_null()) rec["layer_grad_norms"] = r.layer_grad_norms;
  if (!r.param_stats.is_null()) rec["params"] = r.param_stats;
  // A stop record leaves the pending spikes to the next regular record, where an uninterrupted run has them.
  if (regular && !spikes_.empty()) rec["spikes"] = std::exchange(spikes_, nlohmann::json::array());
  if (!regular) rec["stop"] = why;
  std::string monitor_text;
  if (!r.stats.is_null()) {
    rec["attn"] = r.stats["attn"];
    rec["output"] = r.stats["output"];
    if (r.stats.contains("activations")) rec["activations"] = r.stats["activations"];
    monitor_text = strf(" | attn L0 max %.1f | logit max %.1f", r.stats["attn"][0]["max_logit"].get<double>(),
                        r.stats["output"]["max_logit"].get<double>());
  }
  std::string val_text;
  if (val_loss) {
    rec["val_loss"] = *val_loss;
    rec["val_ppl"] = std::exp(*val_loss);
    rec["spike_score_percent"] = spike_score;  // OLMo 2, so far
    val_text = strf(" | val %.4f (ppl %.1f)", *val_loss, std::exp(*val_loss));
  }
  if (evals.is_object())
    for (auto it = evals.begin(); it != evals.end(); ++it) rec[it.key()] = it.value();
  // The first metric of each task on the progress line: "| builtin acc 0.412".
  if (evals.contains("tasks"))
    for (auto it = evals["tasks"].begin(); it != evals["tasks"].end(); ++it)
      if (it.value().contains("acc") && it.value()["acc"].is_number())
        val_text += strf(" | %s acc %.3f", it.key().c_str(), it.value()["acc"].get<double>());
  if (evals.contains("sets"))
    for (auto it = evals["sets"].begin(); it != evals["sets"].end(); ++it)
      val_text += strf(" | %s %.4f", it.key().c_str(), it.value()["loss"].get<double>());
  if (evals.contains("ema") && evals["ema"].contains("val_loss") && evals["ema"]["val_loss"].is_number())
    val_text += strf(" | ema val %.4f", evals["ema"]["val_loss"].get<double>());
  run_.append_metrics(rec);
  const std::string comm_text = world_ > 1 ? strf(" (comm wait %.1f)", comm_ms) : "";
  const std::string stop_text = regular ? "" : " | stop (" + why + ")";
  run_.log->info(strf("step %6lld/%lld | loss %.4f | lr %.2e | gnorm %.3f | %s tok/s | %.1f ms%s | MFU %.1f%%%s%s | "
                      "%s < %s%s",
                      static_cast<long long>(step), static_cast<long long>(cfg_.train.end_step()), loss, r.lr,
                      c.grad_norm, si(tok_s).c_str(), step_ms, comm_text.c_str(), 100 * mfu, val_text.c_str(),
                      monitor_text.c_str(), hms(elapsed).c_str(), hms(eta).c_str(), stop_text.c_str()));
}

namespace {
nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }
double number_or(const nlohmann::json& j, const char* key, double fallback) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
}
}  // namespace

void MetricsLogger::save_state(nlohmann::json& extra) const {
  extra["initial_loss"] = number_or_null(initial_loss_);
  extra["logger"] = {{"interval_steps", interval_steps_},
                     {"pending_spikes", spikes_},
                     {"last_loss", number_or_null(last_loss_)},
                     {"tokens_per_s_sum", tokens_per_s_sum_},
                     {"tokens_per_s_n", tokens_per_s_n_},
                     {"elapsed_s", elapsed_s()}};
  // A full disk: the records this run could not append, written by the resumed run.
  if (!run_.unwritten().empty()) extra["logger"]["unwritten"] = run_.unwritten();
}

void MetricsLogger::load_state(const nlohmann::json& extra) {
  initial_loss_ = number_or(extra, "initial_loss", initial_loss_);
  carried_ = nlohmann::json::array();
  if (!extra.contains("logger") || !extra["logger"].is_object()) return;  // a checkpoint of an older keel
  const auto& l = extra["logger"];
  interval_steps_ = static_cast<int64_t>(number_or(l, "interval_steps", 0));
  if (l.contains("pending_spikes") && l["pending_spikes"].is_array()) spikes_ = l["pending_spikes"];
  last_loss_ = number_or(l, "last_loss", NAN);
  tokens_per_s_sum_ = number_or(l, "tokens_per_s_sum", 0);
  tokens_per_s_n_ = static_cast<int64_t>(number_or(l, "tokens_per_s_n", 0));
  earlier_s_ = number_or(l, "elapsed_s", 0);
  if (l.contains("unwritten") && l["unwritten"].is_array()) carried_ = l["unwritten"];
}

}  // namespace keel
