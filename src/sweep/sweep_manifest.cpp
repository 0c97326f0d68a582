#include "sweep/sweep_manifest.h"

#include <set>

#include "checkpoint/checkpoint_store.h"
#include "util/fs.h"
#include "util/json.h"

namespace keel {

namespace {

// Keys `keel train --resume` also lets change: they decide where and how
// often things are written, not what a point computes.
bool result_neutral(const std::string& key) {
  static const std::set<std::string> neutral = {
      "run.name",        "run.out_dir",          "run.overwrite",         "run.tensorboard",
      "train.threads",   "train.log_every",      "data.prefetch",         "dist.timeout_s",
      "checkpoint.every", "checkpoint.keep_last", "checkpoint.keep_every", "checkpoint.at_end"};
  return neutral.count(key) > 0;
}

std::string list_points(const std::vector<std::string>& names, size_t total) {
  std::string list;
  for (size_t i = 0; i < names.size() && i < 3; ++i) list += (i ? ", " : "") + names[i];
  if (names.size() > 3) list += ", ...";
  return std::to_string(names.size()) + (names.size() == total ? " (all) " : " ") + "point" +
         (names.size() == 1 ? "" : "s") + ": " + list;
}

}  // namespace

FlatConfig result_config(const Config& config) {
  Config copy = config;  // the schema binds mutable pointers
  Schema schema = make_schema(copy);
  FlatConfig out;
  for (const auto& key : schema.keys())
    if (!result_neutral(key.path)) out[key.path] = schema.value_string(key);
  return out;
}

Reconciliation reconcile(const nlohmann::json& old_manifest, const std::vector<SweepPoint>& points) {
  Reconciliation r;
  std::map<std::string, std::vector<std::string>> conflicts;  // "key: a -> b" -> points
  std::vector<std::string> order;
  std::set<std::string> in_plan;
  const ManifestIndex known(old_manifest);
  for (const auto& point : points) {
    in_plan.insert(point.name);
    const FlatConfig old = known.config(point.name);
    if (old.empty()) {
      r.added.push_back(point.name);
      continue;
    }
    const FlatConfig now = result_config(point.config);
    bool same = true;
    std::set<std::string> keys;
    for (const auto& [k, v] : old) keys.insert(k);
    for (const auto& [k, v] : now) keys.insert(k);
    for (const auto& k : keys) {
      // A key added to keel since (absent in the old record) with its
      // default value is no change.
      auto a = old.find(k), b = now.find(k);
      if (a == old.end()) continue;
      const std::string va = a->second, vb = b == now.end() ? "(no such key now)" : b->second;
      if (va == vb) continue;
      same = false;
      const std::string line = k + ": " + va + " -> " + vb;
      if (!conflicts.count(line)) order.push_back(line);
      conflicts[line].push_back(point.name);
    }
    if (same) r.reused.push_back(point.name);
  }
  for (const auto& line : order) r.conflicts.push_back(line + " (" + list_points(conflicts[line], points.size()) + ")");
  if (old_manifest.contains("points"))
    for (const auto& p : old_manifest["points"])
      if (!in_plan.count(p.value("name", "")) && p.value("active", true)) r.retired.push_back(p.value("name", ""));
  return r;
}

nlohmann::json make_manifest(const SweepSpec& spec, const std::vector<SweepPoint>& points,
                             const nlohmann::json& old_manifest) {
  nlohmann::json axes = nlohmann::json::array();
  for (const auto& axis : spec.axes) {
    nlohmann::json a = {{"key", axis.key}, {"short", axis.short_name}, {"values", nlohmann::json::array()}};
    for (const auto& v : axis.values) a["values"].push_back({{"label", v.label}, {"overrides", v.overrides}});
    axes.push_back(a);
  }
  // Reference config: the first point's; every point stores its differences.
  const FlatConfig reference = points.empty() ? FlatConfig{} : result_config(points.front().config);
  auto differs = [&](const FlatConfig& flat) {
    nlohmann::json d = nlohmann::json::object();
    for (const auto& [k, v] : flat) {
      auto it = reference.find(k);
      if (it == reference.end() || it->second != v) d[k] = v;
    }
    return d;
  };
  nlohmann::json list = nlohmann::json::array();
  std::set<std::string> in_plan;
  const ManifestIndex known(old_manifest);
  for (const auto& p : points) {
    in_plan.insert(p.name);
    list.push_back({{"name", p.name},
                    {"active", true},
                    {"labels", p.labels},
                    {"overrides", p.overrides},
                    {"max_steps", p.config.train.max_steps},
                    {"lr", p.config.train.lr},
                    {"seed", p.config.run.seed},
                    {"differs", differs(result_config(p.config))}});
  }
  if (old_manifest.contains("points"))
    for (const auto& p : old_manifest["points"]) {
      const std::string name = p.value("name", "");
      if (in_plan.count(name)) continue;
      nlohmann::json kept = p;
      kept["active"] = false;
      kept["differs"] = differs(known.config(name));
      list.push_back(kept);
    }
  nlohmann::json search = nullptr;
  if (spec.has_search)
    search = {{"key", spec.search.key},   {"short", spec.search.short_name}, {"low", spec.search.low},
              {"high", spec.search.high}, {"factor", spec.search.factor},    {"criterion", spec.search.criterion},
              {"margin", spec.search.margin}};
  return {{"format", "keel-sweep"},
          {"version", 1},
          {"search", search},
          {"name", spec.name},
          {"sweep_file", spec.file},
          {"base_config", spec.base_config},
          {"early_stop", spec.early_stop},
          {"common_overrides", spec.common},
          {"axes", axes},
          {"config", reference},
          {"points", list},
          {"sessions", old_manifest.value("sessions", nlohmann::json::array())}};
}

PointStatus point_status(const std::string& run_dir) {
  PointStatus s;
  if (!is_directory(run_dir)) return s;
  const std::string summary_path = run_dir + "/summary.json";
  if (path_exists(summary_path)) {
    const auto summary = read_summary_json(summary_path);
    const std::string by = summary.value("stopped_by", "");
    if (by == "completed" || by == "diverged" || by == "nonfinite" || by == "logit_unstable") {
      s.state = PointState::finished;
      s.stopped_by = by;
      s.step = json_int_or<int64_t>(summary, "steps", int64_t{0});
      return s;
    }
  }
  if (auto latest = CheckpointStore(run_dir).latest_valid()) {
    s.state = PointState::resumable;
    s.step = CheckpointStore::parse_step_dir_name(base_name(*latest)).value_or(0);
  }
  return s;
}

}  // namespace keel
