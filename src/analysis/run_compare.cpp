#include "analysis/run_compare.h"

#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "config/config.h"
#include "util/dir_lock.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"

namespace keel {

namespace {

std::string loss_and_ppl(double loss) {
  return std::isfinite(loss) ? strf("%.4f (%.1f)", loss, std::exp(loss)) : "-";
}

// Fills what summary.json would hold from the records written so far.
void read_metrics_so_far(const std::string& run_dir, PointRow& r) {
  double tok_sum = 0;
  int64_t tok_n = 0;
  for_each_log_record(run_dir + "/metrics.jsonl", [&](const nlohmann::json& rec) {
    r.steps = json_int<int64_t>(rec["step"]);
    if (rec.contains("loss") && rec["loss"].is_number()) {
      r.final_loss = rec["loss"].get<double>();
      if (std::isnan(r.initial_loss)) r.initial_loss = r.final_loss;
    }
    if (rec.contains("val_loss") && rec["val_loss"].is_number()) {
      r.final_val_loss = rec["val_loss"].get<double>();
      r.best_val_loss = std::isfinite(r.best_val_loss) ? std::min(r.best_val_loss, r.final_val_loss) : r.final_val_loss;
    }
    if (rec.contains("tokens_per_s") && rec["tokens_per_s"].is_number()) {
      tok_sum += rec["tokens_per_s"].get<double>();
      ++tok_n;
    }
    if (rec.contains("attn") && rec["attn"].is_array() && !rec["attn"].empty() && rec["attn"][0].is_object() &&
        rec["attn"][0].contains("max_logit") && rec["attn"][0]["max_logit"].is_number()) {
      const double m = rec["attn"][0]["max_logit"].get<double>();
      r.max_attn_logit_l0 = std::isfinite(r.max_attn_logit_l0) ? std::max(r.max_attn_logit_l0, m) : m;
    }
    if (rec.contains("spikes") && rec["spikes"].is_array()) {
      for (const auto& e : rec["spikes"]) {
        if (!e.is_object()) continue;
        if (e.contains("signal") && e["signal"] == "grad_norm") ++r.grad_spikes;
        else ++r.loss_spikes;
      }
    }
    if (rec.contains("elapsed_s") && rec["elapsed_s"].is_number()) r.time_s = rec["elapsed_s"].get<double>();
    read_eval_results(rec, r);  // the last record with "tasks" / "sets" wins, as summary.json would hold it
  });
  if (tok_n > 0) r.tokens_per_s = tok_sum / static_cast<double>(tok_n);
}

}  // namespace

ConfigValues resolved_values(const std::string& run_dir) {
  ConfigValues out;
  try {
    Config c = load_config(run_dir + "/config.yaml");
    Schema s = make_schema(c);
    for (const auto& k : s.keys()) out[k.path] = s.value_string(k);
  } catch (const Error&) {
  }
  return out;
}

PointRow read_run_row(const std::string& run_dir, const ConfigValues& config) {
  PointRow r;
  r.name = run_dir;
  read_run_summary(run_dir, r);
  if (r.status == "not run") {
    read_metrics_so_far(run_dir, r);
    r.status = dir_is_locked(run_dir) ? "running" : r.steps > 0 ? "interrupted" : "not started";
  }
  if (config.count("train.lr")) r.lr = std::strtod(config.at("train.lr").c_str(), nullptr);
  if (config.count("train.max_steps")) r.max_steps = std::stoll(config.at("train.max_steps"));
  if (config.count("run.seed")) r.seed = std::stoll(config.at("run.seed"));
  return r;
}

std::vector<ConfigValues> differing_keys(const std::vector<ConfigValues>& values) {
  std::set<std::string> keys;
  for (const auto& v : values)
    for (const auto& [k, value] : v) keys.insert(k);
  std::vector<ConfigValues> out(values.size());
  for (const auto& k : keys) {
    if (k == "run.name" || k == "run.out_dir") continue;
    std::set<std::string> seen;
    for (const auto& v : values) seen.insert(v.count(k) ? v.at(k) : "?");
    if (seen.size() < 2) continue;
    for (size_t i = 0; i < values.size(); ++i) out[i][k] = values[i].count(k) ? values[i].at(k) : "?";
  }
  return out;
}

int compare_runs(const std::vector<std::string>& run_dirs, const CompareOptions& options) {
  for (const auto& d : run_dirs)
    if (!path_exists(d + "/metrics.jsonl") && !path_exists(d + "/summary.json"))
      throw RunDirError(d + " is not a run directory (no metrics.jsonl or summary.json)");
  // Before any is read: a damaged log is an error naming it, never a plot
  // script's traceback or a run shown as something it is not.
  for (const auto& d : run_dirs) check_run_logs(d);
  std::vector<ConfigValues> configs;  // each config.yaml read once
  for (const auto& d : run_dirs) configs.push_back(resolved_values(d));
  const auto diffs = differing_keys(configs);
  std::vector<PointRow> rows;
  nlohmann::json runs = nlohmann::json::array();
  for (size_t i = 0; i < run_dirs.size(); ++i) {
    PointRow r = read_run_row(run_dirs[i], configs[i]);
    for (const auto& [k, v] : diffs[i]) r.variant += (r.variant.empty() ? "" : ", ") + k + "=" + v;
    if (r.variant.empty()) r.variant = base_name(run_dirs[i]);  // identical configs: the directory names tell them apart
    runs.push_back({{"dir", real_path(run_dirs[i])}, {"label", base_name(run_dirs[i]) + ": " + r.variant}});
    rows.push_back(r);
  }

  const EvalColumns eval(rows);  // task accuracy and held-out set loss columns, only where a run has them
  std::string table =
      "| run | differs in | status | steps | final loss (ppl) | final val (ppl) | best val (ppl) | diverged | "
      "spikes loss/grad | max L0 attn logit | tokens/s |" +
      eval.md_header() + "\n|---|---|---|---|---|---|---|---|---|---|---|" + eval.md_rule() + "\n";
  for (const auto& r : rows)
    table += "| `" + r.name + "` | " + r.variant + " | " + r.status + " | " + std::to_string(r.steps) +
             (r.max_steps > 0 ? "/" + std::to_string(r.max_steps) : "") + " | " + loss_and_ppl(r.final_loss) + " | " +
             loss_and_ppl(r.final_val_loss) + " | " + loss_and_ppl(r.best_val_loss) + " | " +
             (r.diverged ? "yes" + (r.diverged_step >= 0 ? " (step " + std::to_string(r.diverged_step) + ")" : "")
                         : "no") +
             " | " + std::to_string(r.loss_spikes) + "/" + std::to_string(r.grad_spikes) + " | " +
             md_cell(r.max_attn_logit_l0, "%.1f") + " | " + md_cell(r.tokens_per_s, "%.0f") + " |" + eval.md_cells(r) +
             "\n";
  std::printf("%s", table.c_str());
  if (options.out_dir.empty()) return 0;

  const std::string& out = options.out_dir;
  ensure_directory(out);
  write_file_atomic(out + "/compare.csv", summary_csv(rows));
  write_file_atomic(out + "/runs.json", runs.dump(2) + "\n");
  std::vector<std::string> plots;
  std::string note;
  const int code = options.plots ? draw_plots("scripts/plots/plot_runs.py", {out}, out, options.python,
                                              {"loss", "val_loss", "attn_logit", "grad_norm", "output_logits",
                                               "update_ratio", "adam_eps_share", "tasks"},
                                              &plots,
                                              &note)
                                 : 0;
  std::string md = "# Runs compared\n\n" + table + "\nPerplexity is exp(loss). A run without summary.json is read from "
                   "its metrics.jsonl so far (running: its lock is held).\n";
  if (!eval.empty())
    md += "\nTask columns: accuracy ± its standard error at the run's last task evaluation (`eval.tasks`); set "
          "columns: the loss on each `eval.sets` data set then.\n";
  if (!note.empty()) md += "\n" + note + "\n";
  for (const auto& p : plots) md += "\n![" + p + "](plots/" + p + ".png)\n";
  write_file_atomic(out + "/compare.md", md);
  std::printf("compare: %s/compare.md, %s/compare.csv%s\n", out.c_str(), out.c_str(),
              plots.empty() ? "" : (", " + std::to_string(plots.size()) + " plots in " + out + "/plots").c_str());
  return code;
}

}  // namespace keel
