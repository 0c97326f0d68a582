#include "analysis/cooldown_report.h"

#include <cmath>
#include <map>

#include "analysis/run_files.h"
#include "util/fs.h"
#include "util/log.h"

namespace keel {

namespace {

struct CooldownBranch {
  const PointRow* row = nullptr;
  int64_t at = 0, steps = 0;
  std::string shape, parent;
};

// What the trunk measured at one evaluation step.
struct TrunkEval {
  double val = NAN, ema_val = NAN, builtin_acc = NAN;
};

double number_or_nan(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

std::map<int64_t, TrunkEval> trunk_evals(const std::string& trunk_dir) {
  std::map<int64_t, TrunkEval> out;
  for_each_log_record(trunk_dir + "/metrics.jsonl", [&](const nlohmann::json& rec) {
    if (!rec.contains("step") || !rec["step"].is_number_integer()) return;
    TrunkEval e;
    e.val = number_or_nan(rec, "val_loss");
    if (rec.contains("ema")) e.ema_val = number_or_nan(rec["ema"], "val_loss");
    if (rec.contains("tasks") && rec["tasks"].is_object() && rec["tasks"].contains("builtin"))
      e.builtin_acc = number_or_nan(rec["tasks"]["builtin"], "acc");
    if (std::isfinite(e.val)) out[rec["step"].get<int64_t>()] = e;
  });
  return out;
}

std::string signed_cell(double v) { return std::isfinite(v) ? strf("%+.4f", v) : std::string("-"); }
std::string csv_number(double v) { return std::isfinite(v) ? strf("%.6g", v) : std::string(); }

}  // namespace

std::string cooldown_markdown(const std::string& sweep_dir, const std::vector<PointRow>& rows, std::string* csv) {
  std::vector<CooldownBranch> branches;
  for (const auto& r : rows) {
    const std::string path = sweep_dir + "/" + r.name + "/summary.json";
    if (!r.finished() || !path_exists(path)) continue;
    const auto s = read_summary_json(path);
    if (!s.contains("cooldown") || !s["cooldown"].is_object()) continue;
    const auto& c = s["cooldown"];
    if (!c.contains("parent_run") || !c["parent_run"].is_string()) continue;
    CooldownBranch b;
    b.row = &r;
    b.at = c.value("at", int64_t{0});
    b.steps = c.value("steps", int64_t{0});
    b.shape = c.value("shape", std::string("?"));
    b.parent = c["parent_run"].get<std::string>();
    branches.push_back(b);
  }
  if (branches.empty()) return "";

  std::map<std::string, std::map<int64_t, TrunkEval>> trunks;
  std::string missing;
  for (const auto& b : branches)
    if (!trunks.count(b.parent)) {
      trunks[b.parent] = path_exists(b.parent + "/metrics.jsonl") ? trunk_evals(b.parent) : std::map<int64_t, TrunkEval>{};
      if (trunks[b.parent].empty()) missing += (missing.empty() ? "`" : ", `") + b.parent + "`";
    }

  std::string m =
      "## Cooldown branches\n\n"
      "Each branch decays the LR from its trunk's checkpoint at step *at* to 0 over *steps* steps and ends at step "
      "at + steps. Beside its final validation loss: the trunk's own at that step (its constant LR, no decay) and "
      "the trunk's weight EMA there, where the trunk evaluated at that step (`train.eval_every`); Δ is branch − "
      "trunk. Builtin accuracy: the `builtin` task at the branch's and the trunk's evaluation at that step.\n\n";
  if (!missing.empty())
    m += "Trunk metrics not found (the parent path as the branch recorded it, relative to where the sweep ran): " +
         missing + ".\n\n";
  m += "| branch | trunk | at | steps | shape | ends at step | branch val loss | trunk val loss | Δ | trunk EMA val loss | "
       "branch builtin acc | trunk builtin acc |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  *csv = "point,trunk,cooldown_at,cooldown_steps,shape,end_step,branch_val_loss,trunk_val_loss,delta,trunk_ema_val_loss,"
         "branch_builtin_acc,trunk_builtin_acc\n";
  for (const auto& b : branches) {
    const int64_t end = b.at + b.steps;
    const auto& evals = trunks[b.parent];
    const auto it = evals.find(end);
    const TrunkEval t = it == evals.end() ? TrunkEval{} : it->second;
    const PointRow& r = *b.row;
    const auto task = r.tasks.find("builtin");
    const double acc = task == r.tasks.end() ? NAN : task->second.acc;
    const double delta = r.final_val_loss - t.val;
    m += "| " + r.name + " | " + b.parent + " | " + std::to_string(b.at) + " | " + std::to_string(b.steps) + " | " +
         b.shape + " | " + std::to_string(end) + " | " + md_cell(r.final_val_loss) + " | " +
         (it == evals.end() ? std::string("not evaluated at " + std::to_string(end)) : md_cell(t.val)) + " | " +
         signed_cell(delta) + " | " + md_cell(t.ema_val) + " | " + md_cell(acc, "%.3f") + " | " +
         md_cell(t.builtin_acc, "%.3f") + " |\n";
    *csv += csv_field(r.name) + "," + csv_field(b.parent) + "," + std::to_string(b.at) + "," + std::to_string(b.steps) + "," + csv_field(b.shape) + "," +
            std::to_string(end) + "," + csv_number(r.final_val_loss) + "," + csv_number(t.val) + "," +
            csv_number(delta) + "," + csv_number(t.ema_val) + "," + csv_number(acc) + "," +
            csv_number(t.builtin_acc) + "\n";
  }
  return m + "\n";
}

}  // namespace keel
