#include "analysis/sweep_report.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "analysis/cooldown_report.h"
#include "analysis/edge_criteria.h"
#include "analysis/edge_report.h"
#include "analysis/edge_width.h"
#include "analysis/lr_transfer.h"
#include "analysis/run_files.h"
#include "analysis/warning_report.h"
#include "train/run_dir.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "util/stop_signal.h"
#include "util/text.h"

extern char** environ;

namespace keel {

namespace {

double num(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

std::string fmt(double v, const char* format = "%.4f") { return std::isfinite(v) ? strf(format, v) : ""; }

std::string lr_text(double lr) { return std::isfinite(lr) ? strf("%g", lr) : "-"; }

// A parameter count for the CSVs: empty when not known (0).
std::string count_text(int64_t n) { return n > 0 ? std::to_string(n) : ""; }

std::vector<std::string> plot_candidates(const std::string& relative) {
  std::vector<std::string> out;
  if (const char* src = std::getenv("KEEL_SOURCE_DIR")) out.push_back(std::string(src) + "/" + relative);
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) out.push_back(dir_name(dir_name(std::string(buf, static_cast<size_t>(n)))) + "/" + relative);  // build/keel -> repo
  out.push_back(relative);  // from the current directory (the repository root)
  return out;
}

std::string first_existing(const std::vector<std::string>& candidates) {
  for (const auto& c : candidates)
    if (access(c.c_str(), R_OK) == 0) return c;
  return "";
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Runs python SCRIPT ARGS...; returns the exit code.
int run_python(const std::string& python, const std::vector<std::string>& args) {
  std::vector<std::string> all = {python};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  posix_spawnattr_t attr;  // the signal mask keel started with (util/stop_signal.h)
  posix_spawnattr_init(&attr);
  posix_spawnattr_setsigmask(&attr, &original_signal_mask());
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  const int spawned = posix_spawn(&pid, python.c_str(), nullptr, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (spawned != 0) return 127;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

std::string md_cell(double v, const char* format) { return std::isfinite(v) ? strf(format, v) : "-"; }

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

namespace {

// One record of metrics.jsonl or spikes.jsonl as the plot scripts index it:
// an object with a whole "step"; "attn", where present, a list of objects.
// Returns what is wrong, or "".
std::string record_problem(const nlohmann::json& rec) {
  if (!rec.is_object()) return "expected a JSON object (one record), got " + json_excerpt(rec, 60);
  if (!rec.contains("step")) return "the record has no \"step\"";
  const auto& step = rec["step"];
  if (!(step.is_number_unsigned() || (step.is_number_integer() && json_int<int64_t>(step) >= 0)))
    return "\"step\" is " + json_excerpt(step, 60) + ", not a non-negative whole number";
  if (rec.contains("attn") && !rec["attn"].is_null()) {
    const auto& attn = rec["attn"];
    if (!attn.is_array()) return "\"attn\" is " + json_excerpt(attn, 60) + ", not a list of per-layer objects";
    for (const auto& layer : attn)
      if (!layer.is_object()) return "\"attn\" holds " + json_excerpt(layer, 60) + ", not a per-layer object";
  }
  return "";
}

void check_jsonl_log(const std::string& path) {
  if (!path_exists(path)) return;
  const uint64_t size = file_size(path);
  if (size > kMaxRunLogBytes)
    throw RunDirError(path + ": " + std::to_string(size) + " bytes, more than the " + std::to_string(kMaxRunLogBytes) +
                      " keel reads of a run's log");
  const std::string text = read_small_file(path, kMaxRunLogBytes);
  int64_t line_no = 0;
  for (size_t start = 0; start < text.size();) {
    const size_t nl = text.find('\n', start);
    const size_t end = nl == std::string::npos ? text.size() : nl;
    const std::string_view line(text.data() + start, end - start);
    const std::string where = path + ":" + std::to_string(++line_no);
    start = end + 1;
    if (line.size() > kMaxRunLogLine)
      throw RunDirError(where + ": a line of " + std::to_string(line.size()) + " bytes, more than the " +
                        std::to_string(kMaxRunLogLine) + " of any record keel writes");
    if (json_nesting_depth(line) > kMaxJsonDepth)
      throw RunDirError(where + ": nested deeper than " + std::to_string(kMaxJsonDepth) +
                        " levels, which no record keel writes is");
    const auto rec = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (rec.is_discarded()) continue;  // not JSON: a line torn by a crash, or being written; readers skip it
    const std::string problem = record_problem(rec);
    if (!problem.empty()) throw RunDirError(where + ": " + problem);
  }
}

}  // namespace

void check_run_logs(const std::string& run_dir) {
  for (const char* name : {"metrics.jsonl", "spikes.jsonl"}) check_jsonl_log(run_dir + "/" + name);
}

int draw_plots(const std::string& script_name, const std::vector<std::string>& args, const std::string& out,
               const std::string& asked_python, const std::vector<std::string>& names, std::vector<std::string>* drawn,
               std::string* note) {
  const std::string script = first_existing(plot_candidates(script_name));
  std::vector<std::string> pythons;
  if (!asked_python.empty()) {
    pythons.push_back(asked_python);  // asked for: that one or none
  } else {
    if (const char* p = std::getenv("KEEL_PYTHON")) pythons.push_back(p);
    for (const auto& c : plot_candidates(".venv/bin/python")) pythons.push_back(c);
  }
  std::string python;
  for (const auto& c : pythons)
    if (access(c.c_str(), X_OK) == 0) {
      python = c;
      break;
    }
  int code = 0;
  if (script.empty() || python.empty()) {
    *note = "Plots not drawn: " + std::string(script.empty() ? script_name : "a Python interpreter") +
            " not found (looked for " + joined(script.empty() ? plot_candidates(script_name) : pythons) +
            "; set KEEL_PYTHON, or run scripts/setup.sh to create .venv).";
    code = exit_code::environment;  // the files were checked before: what is missing is the machine's
  } else {
    ensure_directory(out + "/plots");
    std::vector<std::string> argv = {script};
    argv.insert(argv.end(), args.begin(), args.end());
    const int rc = run_python(python, argv);
    if (rc != 0) {
      *note = "Plots not drawn: " + python + " " + script + " exited with code " + std::to_string(rc) +
              " (its message is above; `pip install -r scripts/build/requirements.txt` installs matplotlib).";
      code = exit_code::environment;
    }
    for (const auto& p : names)
      if (path_exists(out + "/plots/" + p + ".png")) drawn->push_back(p);
  }
  if (code != 0) std::fprintf(stderr, "keel: %s\n", note->c_str());
  return code;
}

void for_each_log_record(const std::string& path, const std::function<void(const nlohmann::json&)>& record) {
  if (!path_exists(path)) return;
  std::istringstream in(read_small_file(path, kMaxRunLogBytes));
  for (std::string line; std::getline(in, line);) {
    const auto rec = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (rec.is_object() && rec.contains("step") && rec["step"].is_number_integer()) record(rec);
  }
}

std::vector<PointRow> collect_rows(const std::string& sweep_dir, const nlohmann::json& manifest) {
  std::vector<PointRow> rows;
  const ManifestIndex index(manifest);
  for (const auto& p : manifest.at("points")) {
    if (!p.value("active", true)) continue;
    PointRow r;
    r.name = p.at("name").get<std::string>();
    r.lr = p.value("lr", static_cast<double>(NAN));  // a float default would make value() return a float
    r.seed = json_int_or<int64_t>(p, "seed", int64_t{0});
    r.max_steps = json_int_or<int64_t>(p, "max_steps", int64_t{0});
    const FlatConfig config = index.config(r.name);
    if (config.count("model.vocab_size")) r.vocab_size = std::stoll(config.at("model.vocab_size"));
    if (config.count("model.d_model")) r.d_model = std::stoll(config.at("model.d_model"));
    if (config.count("model.n_layers")) r.n_layers = std::stoll(config.at("model.n_layers"));
    const auto& labels = p.at("labels");
    r.condition = labels.contains("variant") ? labels["variant"].get<std::string>() : "all";
    if (labels.contains("size")) r.size = labels["size"].get<std::string>();
    for (const auto& axis : manifest.at("axes")) {
      const std::string key = axis.at("key");
      if (key == "train.lr" || key == "run.seed") continue;
      const std::string short_name = axis.value("short", std::string());
      if (labels.contains(key))
        r.variant += (r.variant.empty() ? "" : "_") + (short_name.empty() ? "" : short_name + "=") +
                     labels[key].get<std::string>();
    }
    if (r.variant.empty()) r.variant = "all";
    read_run_summary(sweep_dir + "/" + r.name, r);
    rows.push_back(r);
  }
  return rows;
}

void read_run_summary(const std::string& run_dir, PointRow& r) {
  const std::string summary_path = run_dir + "/summary.json";
  r.status = "not run";
  if (path_exists(summary_path)) {
    const auto s = read_summary_json(summary_path);  // throws naming the key of a damaged file
    const std::string by = s.value("stopped_by", "");
    r.status = (by == "completed" || by == "diverged" || by == "nonfinite" || by == "logit_unstable") ? by
                                                                                                     : "interrupted";
    r.steps = json_int_or<int64_t>(s, "steps", int64_t{0});
    r.final_loss = num(s, "final_loss");
    r.final_val_loss = num(s, "final_val_loss");
    r.best_val_loss = num(s, "best_val_loss");
    r.initial_loss = num(s, "initial_loss");
    r.diverged = s.value("diverged", false) || by == "nonfinite";
    if (s.contains("diverged_step") && s["diverged_step"].is_number()) r.diverged_step = json_int<int64_t>(s["diverged_step"]);
    if (s.contains("diverged_reason") && s["diverged_reason"].is_string()) r.diverged_reason = s["diverged_reason"];
    r.logit_unstable = s.value("attn_logit_unstable", false);
    if (s.contains("attn_logit_unstable_step") && s["attn_logit_unstable_step"].is_number())
      r.logit_unstable_step = json_int<int64_t>(s["attn_logit_unstable_step"]);
    r.output_unstable = s.value("output_logit_unstable", false);
    if (s.contains("output_logit_unstable_step") && s["output_logit_unstable_step"].is_number())
      r.output_unstable_step = json_int<int64_t>(s["output_logit_unstable_step"]);
    if (by == "nonfinite" && r.diverged_reason.empty()) {
      r.diverged_reason = "non-finite loss or gradient (train.nonfinite: halt)";
      r.diverged_step = r.steps;
    }
    if (s.contains("first_failure") && s["first_failure"].is_object()) {
      r.first_failure = s["first_failure"].value("kind", std::string());
      r.first_failure_step = json_int_or<int64_t>(s["first_failure"], "step", int64_t{-1});
    } else if (r.diverged || r.logit_unstable) {  // a summary from before first_failure: from the two it has
      const bool logits_first = r.logit_unstable && (!r.diverged || r.logit_unstable_step <= r.diverged_step);
      const bool tie = r.logit_unstable && r.diverged && r.logit_unstable_step == r.diverged_step;
      r.first_failure = tie ? "attention_logits+loss" : logits_first ? "attention_logits" : "loss";
      r.first_failure_step = logits_first ? r.logit_unstable_step : r.diverged_step;
    }
    if (s.contains("spike_score_percent")) {
      r.spike_score_loss = num(s["spike_score_percent"], "loss");
      r.spike_score_grad = num(s["spike_score_percent"], "grad_norm");
    }
    if (s.contains("spikes")) {
      r.loss_spikes = json_int_or<int64_t>(s["spikes"], "loss", int64_t{0});
      r.grad_spikes = json_int_or<int64_t>(s["spikes"], "grad_norm", int64_t{0});
    }
    if (s.contains("max_attn_logit_per_layer") && s["max_attn_logit_per_layer"].is_array() &&
        !s["max_attn_logit_per_layer"].empty() && s["max_attn_logit_per_layer"][0].is_number())
      r.max_attn_logit_l0 = s["max_attn_logit_per_layer"][0].get<double>();
    r.final_mean_log_z = num(s, "final_mean_log_z");
    r.final_max_output_logit = num(s, "final_max_output_logit");
    r.parameters = json_int_or<int64_t>(s, "parameters", int64_t{0});
    r.non_embedding_parameters = json_int_or<int64_t>(s, "non_embedding_parameters", int64_t{0});
    r.tokens_per_s = num(s, "tokens_per_s");
    r.time_s = num(s, "time_s");
    read_eval_results(s, r);
  }
}

void read_eval_results(const nlohmann::json& record, PointRow& r) {
  if (record.contains("tasks") && record["tasks"].is_object()) {
    r.tasks.clear();
    for (auto it = record["tasks"].begin(); it != record["tasks"].end(); ++it)
      if (it.value().is_object())
        r.tasks[it.key()] = {num(it.value(), "acc"), num(it.value(), "acc_stderr"), num(it.value(), "acc_norm")};
  }
  if (record.contains("sets") && record["sets"].is_object()) {
    r.set_losses.clear();
    for (auto it = record["sets"].begin(); it != record["sets"].end(); ++it)
      if (it.value().is_object()) r.set_losses[it.key()] = num(it.value(), "loss");  // null (non-finite): NaN, "-"
  }
}

std::vector<VariantRow> summarize_variants(const std::vector<PointRow>& rows) {
  std::vector<VariantRow> out;
  std::map<std::string, size_t> index;
  std::map<std::string, std::vector<LrResult>> results;
  for (const auto& r : rows) {
    if (!index.count(r.variant)) {
      index[r.variant] = out.size();
      VariantRow row;
      row.variant = r.variant;
      row.condition = r.condition;
      row.size = r.size;
      out.push_back(row);
    }
    auto& v = out[index[r.variant]];
    v.non_embedding_parameters = std::max(v.non_embedding_parameters, r.non_embedding_parameters);
    v.d_model = r.d_model;
    v.n_layers = r.n_layers;
    ++v.points;
    if (!r.finished()) continue;
    ++v.finished;
    const double l0 = r.uniform_loss();
    if (std::isfinite(l0)) v.init_loss = std::isfinite(v.init_loss) ? std::max(v.init_loss, l0) : l0;
    results[r.variant].push_back({r.lr, r.result_loss(), r.diverged});
  }
  for (auto& v : out) {
    v.lr = lr_sensitivity(results[v.variant], v.init_loss);
    v.ci = bootstrap_lr_sensitivity(results[v.variant], v.init_loss);
    v.results = results[v.variant];
    std::map<double, size_t> per_lr;
    for (const auto& r : results[v.variant]) v.seeds = std::max(v.seeds, ++per_lr[r.lr]);
  }
  return out;
}

namespace {

// A task or set name in a markdown cell: names come from config and from
// directory names (a set's), and a "|" would split the cell.
std::string md_name(const std::string& name) {
  std::string out;
  for (char c : name) out += c == '|' ? std::string("\\|") : c == '\n' || c == '\r' ? std::string(" ") : std::string(1, c);
  return out;
}

// "0.528 ± 0.032"; the accuracy alone without a standard error; "-" without an accuracy.
std::string acc_cell(const TaskAccuracy& t) {
  if (!std::isfinite(t.acc)) return "-";
  return std::isfinite(t.acc_stderr) ? strf("%.3f ± %.3f", t.acc, t.acc_stderr) : strf("%.3f", t.acc);
}

}  // namespace

EvalColumns::EvalColumns(const std::vector<PointRow>& rows) {
  std::set<std::string> tasks, sets;
  for (const auto& r : rows) {
    for (const auto& [name, result] : r.tasks) tasks.insert(name);
    for (const auto& [name, loss] : r.set_losses) sets.insert(name);
  }
  tasks_.assign(tasks.begin(), tasks.end());
  sets_.assign(sets.begin(), sets.end());
}

std::string EvalColumns::md_header() const {
  std::string out;
  for (const auto& t : tasks_) out += " " + md_name(t) + " acc |";
  for (const auto& s : sets_) out += " " + md_name(s) + " loss |";
  return out;
}

std::string EvalColumns::md_rule() const {
  std::string out;
  for (size_t i = 0; i < tasks_.size() + sets_.size(); ++i) out += "---|";
  return out;
}

std::string EvalColumns::md_cells(const PointRow& r) const {
  std::string out;
  for (const auto& t : tasks_) {
    auto it = r.tasks.find(t);
    out += " " + (it == r.tasks.end() ? std::string("-") : acc_cell(it->second)) + " |";
  }
  for (const auto& s : sets_) {
    auto it = r.set_losses.find(s);
    out += " " + md_cell(it == r.set_losses.end() ? NAN : it->second) + " |";
  }
  return out;
}

std::string EvalColumns::csv_header() const {
  std::string out;
  for (const auto& t : tasks_)
    for (const char* metric : {"acc", "acc_stderr", "acc_norm"}) out += "," + csv_field("task_" + t + "_" + metric);
  for (const auto& s : sets_) out += "," + csv_field("set_" + s + "_loss");
  return out;
}

std::string EvalColumns::csv_fields(const PointRow& r) const {
  std::string out;
  for (const auto& t : tasks_) {
    auto it = r.tasks.find(t);
    const TaskAccuracy result = it == r.tasks.end() ? TaskAccuracy{} : it->second;
    out += "," + fmt(result.acc, "%.6g") + "," + fmt(result.acc_stderr, "%.6g") + "," + fmt(result.acc_norm, "%.6g");
  }
  for (const auto& s : sets_) {
    auto it = r.set_losses.find(s);
    out += "," + fmt(it == r.set_losses.end() ? NAN : it->second, "%.6g");
  }
  return out;
}

std::string summary_csv(const std::vector<PointRow>& rows) {
  const EvalColumns eval(rows);  // appended after the fixed columns, whose order readers rely on
  std::string out =
      "point,variant,lr,seed,status,steps,max_steps,final_loss,final_val_loss,best_val_loss,initial_loss,diverged,"
      "diverged_step,diverged_reason,spike_score_loss,spike_score_grad_norm,loss_spikes,grad_norm_spikes,"
      "max_attn_logit_l0,tokens_per_s,time_s,attn_logit_unstable,attn_logit_unstable_step,final_val_ppl,condition,size,"
      "parameters,non_embedding_parameters,final_mean_log_z,final_max_output_logit,output_logit_unstable,"
      "output_logit_unstable_step,first_failure,first_failure_step" +
      eval.csv_header() + "\n";
  for (const auto& r : rows) {
    out += csv_field(r.name) + "," + csv_field(r.variant) + "," + strf("%g", r.lr) + "," + std::to_string(r.seed) + "," +
           r.status + "," + std::to_string(r.steps) + "," + std::to_string(r.max_steps) + "," + fmt(r.final_loss, "%.6g") +
           "," + fmt(r.final_val_loss, "%.6g") + "," + fmt(r.best_val_loss, "%.6g") + "," + fmt(r.initial_loss, "%.6g") +
           "," + (r.diverged ? "true" : "false") + "," + (r.diverged_step >= 0 ? std::to_string(r.diverged_step) : "") +
           "," + csv_field(r.diverged_reason) + "," + fmt(r.spike_score_loss, "%.6g") + "," +
           fmt(r.spike_score_grad, "%.6g") + "," + std::to_string(r.loss_spikes) + "," + std::to_string(r.grad_spikes) +
           "," + fmt(r.max_attn_logit_l0, "%.6g") + "," + fmt(r.tokens_per_s, "%.1f") + "," + fmt(r.time_s, "%.1f") +
           "," + (r.logit_unstable ? "true" : "false") + "," +
           (r.logit_unstable_step >= 0 ? std::to_string(r.logit_unstable_step) : "") + "," +
           fmt(std::exp(r.final_val_loss), "%.6g") + "," + csv_field(r.condition) + "," + csv_field(r.size) + "," +
           count_text(r.parameters) + "," + count_text(r.non_embedding_parameters) + "," +
           fmt(r.final_mean_log_z, "%.6g") + "," + fmt(r.final_max_output_logit, "%.6g") + "," +
           (r.output_unstable ? "true" : "false") + "," +
           (r.output_unstable_step >= 0 ? std::to_string(r.output_unstable_step) : "") + "," + r.first_failure + "," +
           (r.first_failure_step >= 0 ? std::to_string(r.first_failure_step) : "") + eval.csv_fields(r) + "\n";
  }
  return out;
}

std::string variants_csv(const std::vector<VariantRow>& variants) {
  std::string out =
      "variant,points,finished,diverged,init_loss,best_loss,best_lr,lr_sensitivity,max_stable_lr,condition,size,"
      "non_embedding_parameters,lr_sensitivity_lo,lr_sensitivity_hi,best_lr_lo,best_lr_hi,d_model,n_layers\n";
  for (const auto& v : variants)
    out += csv_field(v.variant) + "," + std::to_string(v.points) + "," + std::to_string(v.finished) + "," +
           std::to_string(v.lr.diverged) + "," + fmt(v.init_loss, "%.6g") + "," + fmt(v.lr.best_loss, "%.6g") + "," +
           fmt(v.lr.best_lr, "%g") + "," + fmt(v.lr.sensitivity, "%.6g") + "," + fmt(v.lr.max_stable_lr, "%g") + "," +
           csv_field(v.condition) + "," + csv_field(v.size) + "," + count_text(v.non_embedding_parameters) + "," +
           fmt(v.ci.sensitivity.lo, "%.6g") + "," + fmt(v.ci.sensitivity.hi, "%.6g") + "," +
           fmt(v.ci.best_lr.lo, "%g") + "," + fmt(v.ci.best_lr.hi, "%g") + "," + count_text(v.d_model) + "," +
           count_text(v.n_layers) + "\n";
  return out;
}

namespace {

std::string interval_text(const Interval& i, const char* format) {
  return std::isfinite(i.lo) ? strf(format, i.lo) + "–" + strf(format, i.hi) : std::string("-");
}

std::string mean_sd_text(const MeanSd& m, const char* format) {
  if (m.n == 0) return "-";
  return strf(format, m.mean) + (std::isfinite(m.sd) ? " ± " + strf(format, m.sd) : std::string());
}

// The published form (Rybakov et al. 2024; Wortsman et al. 2023): one row per
// condition and LR, divergence as a frequency with its Wilson interval, the
// final loss and perplexity over the runs that did not diverge.
std::string condition_markdown(const std::vector<PointRow>& rows, const std::vector<VariantRow>& variants) {
  std::string m =
      "## Divergence and final perplexity by condition and learning rate\n\n"
      "Runs: finished points (seeds) at that LR. Loss diverged: k of N with its 95% Wilson interval, a run counting "
      "as diverged as in the LR sensitivity (non-finite, exploding, or a final loss at or above ℓ₀). Final loss and "
      "perplexity (exp of the final validation loss): mean ± standard deviation over the runs that did not diverge. "
      "Logit-unstable runs are counted, not excluded.\n\n"
      "| condition | LR | runs | loss diverged (95% interval) | logit-unstable | final val loss | final val PPL |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const auto& v : variants) {
    std::map<double, std::vector<const PointRow*>> by_lr;
    for (const auto& r : rows)
      if (r.variant == v.variant && r.finished()) by_lr[r.lr].push_back(&r);
    for (const auto& [lr, runs] : by_lr) {
      int64_t diverged = 0, unstable = 0;
      std::vector<double> losses, ppl;
      for (const auto* r : runs) {
        unstable += r->logit_unstable;
        if (r->loss_diverged(v.init_loss)) {
          ++diverged;
          continue;
        }
        losses.push_back(r->result_loss());
        ppl.push_back(std::exp(r->result_loss()));
      }
      const int64_t n = static_cast<int64_t>(runs.size());
      const Interval w = wilson_interval(diverged, n);
      m += "| " + v.variant + " | " + lr_text(lr) + " | " + std::to_string(n) + " | " + std::to_string(diverged) + "/" +
           std::to_string(n) + " runs (" + interval_text(w, "%.2f") + ") | " + std::to_string(unstable) + "/" +
           std::to_string(n) + " | " + (losses.empty() ? std::string("diverged") : mean_sd_text(mean_sd(losses), "%.4f")) +
           " | " + (ppl.empty() ? std::string("diverged") : mean_sd_text(mean_sd(ppl), "%.1f")) + " |\n";
    }
  }
  return m + "\n";
}

// Output-logit drift (Wortsman et al. 2023, section 3.2) per condition and
// LR, at each run's last monitor step: the mean log Z (z-loss pulls it to 0;
// without z-loss or weight decay it drifts) and the largest output logit.
std::string output_markdown(const std::vector<PointRow>& rows, const std::vector<VariantRow>& variants) {
  std::string m =
      "## Output logits\n\n"
      "At each run's last monitor step (mean ± sd over the seeds): the mean over tokens of log Z, the log of the "
      "softmax normaliser, which z-loss pulls towards 0 and which drifts without z-loss or weight decay (Wortsman et "
      "al. 2023, §3.2); and the largest |output logit|. Diverged runs are included.\n\n"
      "| condition | LR | runs | final mean log Z | final largest output logit |\n|---|---|---|---|---|\n";
  for (const auto& v : variants) {
    std::map<double, std::pair<std::vector<double>, std::vector<double>>> by_lr;
    for (const auto& r : rows)
      if (r.variant == v.variant && r.finished() && std::isfinite(r.final_mean_log_z)) {
        by_lr[r.lr].first.push_back(r.final_mean_log_z);
        if (std::isfinite(r.final_max_output_logit)) by_lr[r.lr].second.push_back(r.final_max_output_logit);
      }
    for (const auto& [lr, values] : by_lr)
      m += "| " + v.variant + " | " + lr_text(lr) + " | " + std::to_string(values.first.size()) + " | " +
           mean_sd_text(mean_sd(values.first), "%.3f") + " | " + mean_sd_text(mean_sd(values.second), "%.2f") + " |\n";
  }
  return m + "\n";
}

// The model-size axis in the form of Wortsman et al. (2023), Fig. 1: per
// condition and size, the non-embedding parameter count against the LR
// sensitivity and the layer-0 attention logit at each LR.
std::string size_markdown(const std::vector<PointRow>& rows, const std::vector<VariantRow>& variants) {
  std::string m =
      "## Model size\n\n"
      "Wortsman et al. (2023), Fig. 1: how the LR sensitivity and the attention logits change with model size, per "
      "condition. Parameters: non-embedding (every trainable parameter but the token embedding and an untied output "
      "head). Intervals as in the LR-sensitivity table.\n\n"
      "| condition | size | non-embedding parameters | finished | loss diverged | best LR (95%) | ℓ* (PPL) | "
      "LR sensitivity (95%) | largest LR without divergence |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& v : variants) {
    const std::string best_lr_ci =
        std::isfinite(v.ci.best_lr.lo) ? " (" + lr_text(v.ci.best_lr.lo) + "–" + lr_text(v.ci.best_lr.hi) + ")" : "";
    const std::string sens_ci = std::isfinite(v.ci.sensitivity.lo) ? " (" + interval_text(v.ci.sensitivity, "%.3f") + ")" : "";
    m += "| " + v.condition + " | " + (v.size.empty() ? "-" : v.size) + " | " +
         (v.non_embedding_parameters > 0 ? si(static_cast<double>(v.non_embedding_parameters)) : std::string("-")) +
         " | " + std::to_string(v.finished) + "/" + std::to_string(v.points) + " | " + std::to_string(v.lr.diverged) +
         " | " + lr_text(v.lr.best_lr) + best_lr_ci + " | " + md_cell(v.lr.best_loss) +
         (std::isfinite(v.lr.best_loss) ? strf(" (%.1f)", std::exp(v.lr.best_loss)) : std::string()) + " | " +
         (std::isfinite(v.lr.sensitivity) ? strf("%.4f", v.lr.sensitivity) + sens_ci
                                          : v.finished ? std::string("all diverged") : std::string("-")) +
         " | " + lr_text(v.lr.max_stable_lr) + " |\n";
  }
  // The layer-0 attention logit: the largest over each run, the median over seeds.
  std::vector<double> lrs;
  for (const auto& r : rows)
    if (r.finished() && std::find(lrs.begin(), lrs.end(), r.lr) == lrs.end()) lrs.push_back(r.lr);
  std::sort(lrs.begin(), lrs.end());
  m += "\nLargest layer-0 attention logit over the run (the median over seeds), per condition and size, at each "
       "peak LR:\n\n| condition | size |";
  for (double lr : lrs) m += " LR " + lr_text(lr) + " |";
  m += "\n|---|---|";
  for (size_t i = 0; i < lrs.size(); ++i) m += "---|";
  m += "\n";
  for (const auto& v : variants) {
    m += "| " + v.condition + " | " + (v.size.empty() ? "-" : v.size) + " |";
    for (double lr : lrs) {
      std::vector<double> values;
      for (const auto& r : rows)
        if (r.variant == v.variant && r.finished() && r.lr == lr && std::isfinite(r.max_attn_logit_l0))
          values.push_back(r.max_attn_logit_l0);
      std::sort(values.begin(), values.end());
      const double median = values.empty() ? NAN
                            : values.size() % 2 ? values[values.size() / 2]
                                                : 0.5 * (values[values.size() / 2 - 1] + values[values.size() / 2]);
      m += " " + md_cell(median, "%.3g") + " |";
    }
    m += "\n";
  }
  return m + "\n";
}

// Issue 33's transfer reading: per condition, the best LR at each size and
// how far it moves per doubling of the axis that changes (width, else depth).
std::string transfer_markdown(const std::vector<VariantRow>& variants) {
  std::vector<std::string> conditions;
  for (const auto& v : variants)
    if (std::find(conditions.begin(), conditions.end(), v.condition) == conditions.end()) conditions.push_back(v.condition);
  std::string rows_md, reading;
  bool any = false;
  for (const auto& c : conditions) {
    std::vector<const VariantRow*> sizes;
    for (const auto& v : variants)
      if (v.condition == c && !v.size.empty() && v.finished > 0) sizes.push_back(&v);
    std::set<int64_t> widths, depths;
    for (const auto* v : sizes) widths.insert(v->d_model), depths.insert(v->n_layers);
    const bool by_width = widths.size() > 1, by_depth = !by_width && depths.size() > 1;
    if (!by_width && !by_depth) continue;
    std::sort(sizes.begin(), sizes.end(), [&](const VariantRow* a, const VariantRow* b) {
      return by_width ? a->d_model < b->d_model : a->n_layers < b->n_layers;
    });
    std::vector<TransferSize> input;
    for (const auto* v : sizes)
      input.push_back({static_cast<double>(by_width ? v->d_model : v->n_layers), v->init_loss, v->results});
    const LrTransfer t = lr_transfer(input);
    any = true;
    std::string best;
    for (size_t i = 0; i < sizes.size(); ++i)
      best += (i ? ", " : "") + sizes[i]->size + " " + lr_text(t.best_lr[i]);
    const std::string ci = std::isfinite(t.drift_ci.lo) ? strf("%+.2f to %+.2f", t.drift_ci.lo, t.drift_ci.hi) : "-";
    const double ratio = sizes.size() >= 2 ? t.best_lr.back() / t.best_lr.front() : NAN;
    rows_md += "| " + c + " | " + (by_width ? "width (d_model)" : "depth (n_layers)") + " | " + best + " | " +
               md_cell(t.drift, "%+.2f") + " | " + ci + " | " + md_cell(ratio, "%.3g") + " |\n";
    reading += "- **" + c + "**: " +
               (std::isfinite(t.drift)
                    ? strf("the best LR changes by x%.2f per doubling of %s (log2 slope %+.2f, 95%% interval %s, %zu "
                           "bootstrap replicates)",
                           std::exp2(t.drift), by_width ? "width" : "depth", t.drift, ci.c_str(), t.replicates)
                    : std::string("no slope: fewer than two sizes have a best LR")) +
               (t.at_edge ? "; a best LR sits at the grid's edge, so the true optimum of that size may lie beyond "
                            "it and the slope is bounded by the grid"
                          : "") +
               ".\n";
  }
  if (!any) return "";
  return "## Transfer\n\n"
         "How far the best learning rate moves as the model grows (µP and CompleteP aim for 0; "
         "docs/papers.md#mup-and-completep): per condition, the least-squares slope of log2(best LR) against "
         "log2(size), where size is d_model when it varies and n_layers otherwise. 0 means the LR transfers; "
         "−1 means it halves at every doubling. The interval is a 95% percentile bootstrap over seeds (2000 "
         "replicates, the seeds at each size and LR resampled with replacement). The best LR of a size is a grid "
         "value, so the slope moves in steps the grid sets; LR sensitivity and the layer-0 logit per size are in "
         "the Model size section.\n\n"
         "| condition | axis | best LR per size | drift per doubling (log2) | 95% interval | best LR largest / "
         "smallest |\n|---|---|---|---|---|---|\n" +
         rows_md + "\n" + reading + "\n";
}

// The LR-sensitivity table per variant and a line of plain facts each.
std::string lr_sensitivity_markdown(const std::vector<PointRow>& rows, const std::vector<VariantRow>& variants) {
  std::string m = "## Learning-rate sensitivity per variant\n\n";
  m += "LR sensitivity (Wortsman et al. 2023): the mean over the LR grid of min(ℓ(η), ℓ₀) − ℓ*, where ℓ(η) is the "
       "final loss at peak LR η (validation loss), ℓ₀ the loss at initialization (here ln(vocab size), the loss of the "
       "uniform prediction a freshly initialized model makes) and ℓ* the best final loss over the grid. A point whose "
       "loss diverged (non-finite, above `monitor.diverge_loss_factor` × its initial loss, or a final loss at or above "
       "ℓ₀) counts as ℓ₀; every other point counts with its real final loss, also when its attention logits passed "
       "`monitor.diverge_attn_logit` (logit-unstable: reported, not counted as divergence). Lower means less "
       "sensitive to the choice of LR. Read it with the loss-vs-LR plot.\n\n";
  m += "With several seeds per LR the intervals are 95% percentile-bootstrap intervals (2000 replicates, the seeds "
       "at each LR resampled with replacement; seeds: the most finished runs at one LR). With one seed there is no "
       "interval, and the best LR and sensitivity may be decided by that seed alone.\n\n";
  m += "| variant | finished | seeds | loss diverged | logit-unstable | ℓ₀ | best LR (95%) | best final loss ℓ* (PPL) | "
       "LR sensitivity (95%) | largest LR without divergence |\n|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& v : variants) {
    size_t unstable = 0;
    for (const auto& r : rows) unstable += r.variant == v.variant && r.finished() && r.logit_unstable;
    const std::string best_lr_ci = std::isfinite(v.ci.best_lr.lo)
                                       ? " (" + lr_text(v.ci.best_lr.lo) + "–" + lr_text(v.ci.best_lr.hi) + ")" : "";
    const std::string sens_ci = std::isfinite(v.ci.sensitivity.lo) ? " (" + interval_text(v.ci.sensitivity, "%.3f") + ")" : "";
    m += "| " + v.variant + " | " + std::to_string(v.finished) + "/" + std::to_string(v.points) + " | " +
         std::to_string(v.seeds) + " | " + std::to_string(v.lr.diverged) + " | " + std::to_string(unstable) + " | " +
         md_cell(v.init_loss, "%.3f") + " | " + lr_text(v.lr.best_lr) + best_lr_ci + " | " + md_cell(v.lr.best_loss) +
         (std::isfinite(v.lr.best_loss) ? strf(" (%.1f)", std::exp(v.lr.best_loss)) : std::string()) + " | " +
         (std::isfinite(v.lr.sensitivity) ? strf("%.4f", v.lr.sensitivity) + sens_ci
                                          : v.finished ? std::string("all diverged") : std::string("-")) +
         " | " + lr_text(v.lr.max_stable_lr) + " |\n";
  }
  m += "\n";
  // Plain facts per variant, generated from the table above.
  for (const auto& v : variants) {
    if (!v.finished) continue;
    std::vector<std::string> div;
    for (const auto& r : rows)
      if (r.variant == v.variant && r.diverged)
        div.push_back("LR " + lr_text(r.lr) + " at step " + std::to_string(r.diverged_step) + " (" + r.diverged_reason + ")");
    m += "- **" + v.variant + "**: " +
         (std::isfinite(v.lr.best_lr) ? "best final loss " + md_cell(v.lr.best_loss) + " at LR " + lr_text(v.lr.best_lr)
                                      : std::string("no point trained below ℓ₀")) +
         "; " + (div.empty() ? std::string("no point diverged") : "diverged: " + joined(div)) + ".\n";
  }
  m += "\n";
  return m;
}

std::string report_markdown(const nlohmann::json& manifest, const std::string& sweep_dir,
                            const std::vector<PointRow>& rows, const std::vector<VariantRow>& variants,
                            const std::vector<std::string>& plots, const std::string& plot_note,
                            const std::string& notes, const std::string& warnings, const std::string& lead) {
  std::string m = "# Sweep `" + manifest.value("name", std::string("?")) + "`\n\n";
  if (!notes.empty()) m += notes + (notes.back() == '\n' ? "\n" : "\n\n");
  std::string axes;
  for (const auto& a : manifest["axes"]) {
    std::vector<std::string> labels;
    for (const auto& v : a["values"]) labels.push_back(v["label"]);
    axes += (axes.empty() ? "" : " × ") + std::string("`") + a["key"].get<std::string>() + "` (" + joined(labels) + ")";
  }
  size_t finished = 0;
  for (const auto& r : rows) finished += r.finished();
  m += "Sweep file `" + manifest.value("sweep_file", std::string("?")) + "`, base config `" +
       manifest.value("base_config", std::string("?")) + "`, directory `" + sweep_dir + "`.\n\n";
  m += "Grid: " + axes + ": " + std::to_string(rows.size()) + " points, " + std::to_string(finished) + " finished.";
  if (EdgeSearchSpec search; manifest_search(manifest, &search))
    m += " Search: `" + search.key + "` bisected in [" + edge_value_label(search.low) + ", " +
         edge_value_label(search.high) + "] to a factor " + edge_value_label(search.factor) + " for " + search.criterion +
         " in every group (the section Stability edge).";
  if (manifest.value("early_stop", false)) m += " Diverged points stop early (`monitor.stop_on_divergence`).";
  m += "\n\nSettings added to the base config for every point: ";
  std::vector<std::string> common;
  for (const auto& o : manifest.value("common_overrides", nlohmann::json::array())) common.push_back("`" + o.get<std::string>() + "`");
  m += (common.empty() ? "none" : joined(common)) + ".\n\n";

  if (!manifest.value("sessions", nlohmann::json::array()).empty()) {
    m += "| started (UTC) | command | machine | points × threads | wall time |\n|---|---|---|---|---|\n";
    for (const auto& s : manifest["sessions"])
      m += "| " + s.value("started", std::string("?")) + " | `" + s.value("command", std::string("?")) + "` | " +
           s.value("cpu", std::string("?")) + ", " + std::to_string(json_int_or<int>(s, "cores", 0)) + " cores | " +
           std::to_string(json_int_or<int>(s, "parallel", 0)) + " × " + std::to_string(json_int_or<int>(s, "threads_per_point", 0)) + " | " +
           (s.contains("wall_s") ? strf("%.1f min", s["wall_s"].get<double>() / 60) : std::string("(unfinished)")) +
           " |\n";
    m += "\n";
  }

  m += lead;  // the edge tables and cooldown branches, where the sweep has them
  std::set<double> lrs;
  for (const auto& r : rows)
    if (std::isfinite(r.lr)) lrs.insert(r.lr);
  if (lrs.size() == 1)  // a sweep over other axes (cooldown branches, data): no LR sensitivity to speak of
    m += "## Learning rate\n\nEvery point trained at peak LR " + lr_text(*lrs.begin()) +
         ": the sweep has no LR axis, so no LR sensitivity or best LR.\n\n";
  else m += lr_sensitivity_markdown(rows, variants);
  m += condition_markdown(rows, variants);
  if (std::any_of(rows.begin(), rows.end(), [](const PointRow& r) { return !r.size.empty(); }))
    m += size_markdown(rows, variants) + transfer_markdown(variants);
  if (std::any_of(rows.begin(), rows.end(), [](const PointRow& r) { return std::isfinite(r.final_mean_log_z); }))
    m += output_markdown(rows, variants);
  m += warnings;

  if (!plots.empty() || !plot_note.empty()) m += "## Plots\n\n";
  if (!plot_note.empty()) m += plot_note + "\n\n";
  const std::map<std::string, std::string> captions = {
      {"loss_vs_lr", "Final validation loss against peak LR, one line per variant; diverged points are drawn as × at ℓ₀."},
      {"loss_curves", "Training loss per variant, one curve per LR (colour: LR)."},
      {"attn_logit", "Layer-0 maximum attention logit (log scale) per variant; the dashed line is the divergence threshold."},
      {"grad_norm", "Gradient norm per variant (log scale), one curve per LR; red dots are detected gradient-norm spikes."},
      {"output_logit", "Output logits per variant, one curve per LR: the largest |logit| (top) and the mean log Z "
                       "(bottom, log of the softmax normaliser; z-loss pulls it to 0)."},
      {"loss_vs_lr_by_size", "Final validation loss against peak LR, one panel per condition, one line per model size; "
                             "× marks divergence (at ℓ₀)."},
      {"lr_sensitivity_vs_params", "LR sensitivity against non-embedding parameters (log x), one line per condition; "
                                   "bars are the bootstrap intervals over seeds where there are several."},
      {"attn_logit_vs_params", "Largest layer-0 attention logit over the run against non-embedding parameters, one "
                               "panel per peak LR, one line per condition (log y; dashed: the instability threshold)."},
      {"edge_vs_width", "Stability edge against d_model per criterion (log-log): top, each condition's edge, the bar "
                        "from the largest LR that passed to the smallest that failed (▲: above the grid, ▼: below), "
                        "dashed the least-squares line to the target width; bottom, each condition's edge over the "
                        "first condition's."},
      {"layer_update_ratio", "Per variant, at its largest LR: each block's update/weight RMS ratio (mean over the "
                             "block's matrices) at the monitor steps, one line per block (monitor.param_stats)."},
      {"cooldown", "Cooldown branches (train.cooldown_steps): training loss against tokens for each trunk (grey) "
                   "and its branches (colour: the step they branch at); dots are validation losses."},
      {"adam_eps_share", "Share of Adam's second-moment entries with sqrt(v_hat) under eps (mean over tensors), per "
                         "variant, one curve per LR (Wortsman et al. 2023, §3.4)."}};
  for (const auto& p : plots) {
    auto it = captions.find(p);
    m += "![" + p + "](plots/" + p + ".png)\n\n" + (it == captions.end() ? "" : it->second) + " ([SVG](plots/" + p +
         ".svg))\n\n";
  }

  m += "## Points\n\n";
  const EvalColumns eval(rows);  // eval.tasks accuracy and eval.sets loss, where the points have them
  m += "| point | variant | LR | status | steps | final val loss (PPL) | best val loss | diverged (step: reason) | "
       "logit-unstable (step) | spike score loss / grad % | max L0 attn logit | tokens/s |" +
       eval.md_header() + "\n|---|---|---|---|---|---|---|---|---|---|---|---|" + eval.md_rule() + "\n";
  for (const auto& r : rows)
    m += "| " + r.name + " | " + r.variant + " | " + lr_text(r.lr) + " | " + r.status + " | " + std::to_string(r.steps) +
         "/" + std::to_string(r.max_steps) + " | " + md_cell(r.final_val_loss) +
         (std::isfinite(r.final_val_loss) ? strf(" (%.1f)", std::exp(r.final_val_loss)) : std::string()) + " | " +
         md_cell(r.best_val_loss) + " | " +
         (r.diverged ? std::to_string(r.diverged_step) + ": " + r.diverged_reason : std::string("-")) + " | " +
         (r.logit_unstable ? "yes (" + std::to_string(r.logit_unstable_step) + ")" : std::string("-")) + " | " +
         md_cell(r.spike_score_loss, "%.2f") + " / " + md_cell(r.spike_score_grad, "%.2f") + " | " + md_cell(r.max_attn_logit_l0, "%.1f") +
         " | " + md_cell(r.tokens_per_s, "%.0f") + " |" + eval.md_cells(r) + "\n";
  m += "\nColumns as in `summary.csv`; per-variant numbers in `lr_sensitivity.csv`. Each point's run directory holds "
       "its `metrics.jsonl`, `spikes.jsonl`, `summary.json` and TensorBoard events (`tensorboard --logdir " +
       sweep_dir + "`).\n";
  if (!eval.empty())
    m += "\nTask columns: accuracy ± its standard error at the point's last task evaluation (`eval.tasks`), set "
         "columns: the loss on each `eval.sets` data set then; acc_norm in `summary.csv`.\n";
  return m;
}

}  // namespace

int write_report(const std::string& sweep_dir, const ReportOptions& options) {
  const std::string manifest_path = sweep_dir + "/sweep.json";
  if (!path_exists(manifest_path))
    throw RunDirError(sweep_dir + " is not a sweep directory (no sweep.json); run `keel sweep SWEEP.yaml` first");
  nlohmann::json manifest;
  try {  // bounded: the plot script reads it too, with a parser that recurses
    manifest = parse_json_bounded(read_small_file(manifest_path), manifest_path);
  } catch (const JsonError& e) {
    throw RunDirError(std::string(e.what()) + " (not a keel sweep manifest)");
  }
  if (!manifest.is_object() || !manifest.contains("format") || manifest["format"] != "keel-sweep" ||
      !manifest.contains("points") || !manifest["points"].is_array())
    throw RunDirError(manifest_path + " is not a keel sweep manifest");

  // Every file the report and its plot script read is checked before
  // anything is written or any Python runs.
  const auto rows = collect_rows(sweep_dir, manifest);
  for (const auto& r : rows) check_run_logs(sweep_dir + "/" + r.name);
  const std::string out = options.out_dir.empty() ? sweep_dir : options.out_dir;
  ensure_directory(out);

  const auto variants = summarize_variants(rows);
  write_file_atomic(out + "/summary.csv", summary_csv(rows));
  write_file_atomic(out + "/lr_sensitivity.csv", variants_csv(variants));

  // Every sweep over LRs: the three criteria's edges side by side
  // (edge_criteria.h), and along a width axis (edge_width.h), before the
  // plots, which draw edge_width.csv.
  std::string criteria_csv, width_csv;
  const auto criteria_groups = criteria_edges(rows, options.degradation_margin);
  const std::string criteria = criteria_markdown(criteria_groups, options.degradation_margin, &criteria_csv);
  if (!criteria.empty()) write_file_atomic(out + "/edge_criteria.csv", criteria_csv);
  const std::string width = width_markdown(rows, criteria_groups, options.target_width, &width_csv);
  if (!width.empty()) write_file_atomic(out + "/edge_width.csv", width_csv);

  std::string note;
  std::vector<std::string> plots;
  const int code = options.plots ? draw_plots("scripts/plots/plot_sweep.py", {sweep_dir, out}, out, options.python,
                                              {"loss_vs_lr", "loss_curves", "attn_logit", "grad_norm", "output_logit",
                                               "loss_vs_lr_by_size", "lr_sensitivity_vs_params", "attn_logit_vs_params",
                                               "best_lr_vs_size", "edge_vs_width", "layer_update_ratio", "adam_eps_share", "cooldown"},
                                              &plots, &note)
                                 : 0;
  // A hand-written reading of the results (OUT_DIR/README.md, or notes.md as
  // older result folders named it) survives regenerating the report.

  const std::string notes = path_exists(out + "/README.md")  ? read_small_file(out + "/README.md")
                            : path_exists(out + "/notes.md") ? read_small_file(out + "/notes.md")
                                                             : "";
  std::string warning_csv;
  const std::string warnings = warning_markdown(sweep_dir, rows, &warning_csv);
  if (!warnings.empty()) write_file_atomic(out + "/early_warning.csv", warning_csv);
  std::string edge, edge_csv;
  if (EdgeSearchSpec search; manifest_search(manifest, &search)) {
    edge = edge_markdown(search, edge_groups(manifest, search, rows), &edge_csv);
    write_file_atomic(out + "/edge.csv", edge_csv);
  }
  edge += criteria + width;
  std::string cooldown_csv;  // cooldown branches beside their trunk (cooldown_report.h)
  const std::string cooldown = cooldown_markdown(sweep_dir, rows, &cooldown_csv);
  if (!cooldown.empty()) {
    write_file_atomic(out + "/cooldown.csv", cooldown_csv);
    edge += cooldown;
  }
  write_file_atomic(out + "/report.md",
                    report_markdown(manifest, sweep_dir, rows, variants, plots, note, notes, warnings, edge));
  std::printf("report: %s/report.md, %s/summary.csv, %s/lr_sensitivity.csv%s\n", out.c_str(), out.c_str(), out.c_str(),
              plots.empty() ? "" : (", " + std::to_string(plots.size()) + " plots in " + out + "/plots").c_str());
  for (const auto& v : variants)
    std::printf("  %-20s best LR %-8s best loss %-8s LR sensitivity %-8s diverged %zu/%zu\n", v.variant.c_str(),
                lr_text(v.lr.best_lr).c_str(), md_cell(v.lr.best_loss).c_str(), md_cell(v.lr.sensitivity).c_str(), v.lr.diverged,
                v.finished);
  if (!criteria.empty()) {
    std::printf("  stability edge (largest LR that passed; geometric mean over seeds [seeds bracketed]):\n");
    std::printf("  %-20s %-34s %-34s %-34s\n", "", "loss divergence", "logit instability", "degradation");
    for (const auto& g : criteria_groups) {
      std::printf("  %-20s", g.group.c_str());
      for (const auto& e : g.by_criterion) std::printf(" %-34s", criterion_edge_text(e).c_str());
      std::printf("\n");
    }
  }
  return code;
}

}  // namespace keel
