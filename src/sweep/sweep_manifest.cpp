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

FlatConfig json_to_flat(const nlohmann::json& j) {
  FlatConfig out;
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it) out[it.key()] = it.value().get<std::string>();
  return out;
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

FlatConfig manifest_point_config(const nlohmann::json& manifest, const std::string& name) {
  return ManifestIndex(manifest).config(name);
}

ManifestIndex::ManifestIndex(const nlohmann::json& manifest) {
  if (!manifest.is_object() || !manifest.contains("points") || !manifest["points"].is_array()) return;
  reference_ = json_to_flat(manifest.value("config", nlohmann::json::object()));
  for (const auto& p : manifest["points"])
    if (p.is_object()) points_.emplace(p.value("name", ""), &p);  // the first of a name, as the scan found it
}

const nlohmann::json* ManifestIndex::find(const std::string& name) const {
  auto it = points_.find(name);
  return it == points_.end() ? nullptr : it->second;
}

FlatConfig ManifestIndex::config(const std::string& name) const {
  const nlohmann::json* p = find(name);
  if (!p) return {};
  FlatConfig flat = reference_;
  for (const auto& [k, v] : json_to_flat(p->value("differs", nlohmann::json::object()))) flat[k] = v;
  return flat;
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

namespace {

constexpr uint64_t kMaxSummaryBytes = uint64_t{16} << 20;

// The keys of summary.json that keel reads, each checked for its type, so
// that a hand-edited or damaged file is an error naming the key rather than
// a run shown as something it is not ("-5/40 steps", "interrupted").
class SummaryCheck {
 public:
  SummaryCheck(const std::string& path, const nlohmann::json& s) : path_(path), s_(s) {}

  void run() const {
    if (!s_.is_object()) fail("", "expected a JSON object, got " + json_excerpt(s_, 60));
    string_key(s_, "stopped_by", /*required=*/true);
    count_key(s_, "steps", /*required=*/true, /*nullable=*/false);
    for (const char* k : {"tokens", "nonfinite_steps", "parameters", "non_embedding_parameters", "world_size",
                          "spike_skipped_steps", "rewinds"})
      count_key(s_, k, false, false);
    for (const char* k : {"diverged_step", "attn_logit_unstable_step", "output_logit_unstable_step"})
      count_key(s_, k, false, true);
    for (const char* k : {"time_s", "final_loss", "initial_loss", "final_val_loss", "best_val_loss", "final_val_ppl",
                          "best_val_ppl", "tokens_per_s", "final_z_loss", "final_mean_log_z", "final_max_output_logit"})
      number_key(s_, k, "");
    for (const char* k : {"diverged", "attn_logit_unstable", "output_logit_unstable"})
      if (s_.contains(k) && !s_[k].is_boolean()) fail(k, "expected true or false, got " + json_excerpt(s_[k], 60));
    if (s_.contains("first_failure") && !s_["first_failure"].is_null()) {
      if (const nlohmann::json* o = object_key("first_failure")) {
        string_key(*o, "kind", true);
        count_key(*o, "step", true, false, "first_failure.");
      }
    }
    if (s_.contains("diverged_reason") && !s_["diverged_reason"].is_null()) string_key(s_, "diverged_reason", false);
    if (const nlohmann::json* o = object_key("spikes"))
      for (const char* k : {"loss", "grad_norm"}) count_key(*o, k, false, false, "spikes.");
    if (const nlohmann::json* o = object_key("spike_score_percent"))
      for (const char* k : {"loss", "grad_norm"}) number_key(*o, k, "spike_score_percent.");
    if (s_.contains("max_attn_logit_per_layer")) {
      const auto& a = s_["max_attn_logit_per_layer"];
      if (!a.is_array()) fail("max_attn_logit_per_layer", "expected a list of numbers, got " + json_excerpt(a, 60));
      for (size_t i = 0; i < a.size(); ++i)
        if (!a[i].is_number() && !a[i].is_null())
          fail("max_attn_logit_per_layer[" + std::to_string(i) + "]",
               "expected a number, got " + json_excerpt(a[i], 60));
    }
  }

 private:
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw RunDirError(path_ + (key.empty() ? "" : ": " + key) + ": " + what +
                      "; not a summary keel wrote (delete the file and the run reads as interrupted, from its "
                      "metrics.jsonl and checkpoints)");
  }
  void string_key(const nlohmann::json& o, const char* key, bool required) const {
    if (!o.contains(key)) {
      if (required) fail(key, "missing");
      return;
    }
    if (!o[key].is_string()) fail(key, "expected a string, got " + json_excerpt(o[key], 60));
  }
  // A non-negative integer (or null where keel writes null).
  void count_key(const nlohmann::json& o, const char* key, bool required, bool nullable,
                 const std::string& prefix = "") const {
    if (!o.contains(key)) {
      if (required) fail(prefix + key, "missing");
      return;
    }
    const auto& v = o[key];
    if (nullable && v.is_null()) return;
    const bool ok = v.is_number_unsigned() ? json_int<uint64_t>(v) <= uint64_t(INT64_MAX)
                                           : v.is_number_integer() && json_int<int64_t>(v) >= 0;
    if (!ok) fail(prefix + key, "expected a non-negative whole number, got " + json_excerpt(v, 60));
  }
  void number_key(const nlohmann::json& o, const char* key, const std::string& prefix) const {
    if (o.contains(key) && !o[key].is_number() && !o[key].is_null())
      fail(prefix + key, "expected a number or null, got " + json_excerpt(o[key], 60));
  }
  const nlohmann::json* object_key(const char* key) const {
    if (!s_.contains(key)) return nullptr;
    if (!s_[key].is_object()) fail(key, "expected an object, got " + json_excerpt(s_[key], 60));
    return &s_[key];
  }

  const std::string& path_;
  const nlohmann::json& s_;
};

}  // namespace

nlohmann::json read_summary_json(const std::string& path) {
  const uint64_t size = file_size(path);
  if (size > kMaxSummaryBytes)
    throw RunDirError(path + ": " + std::to_string(size) + " bytes, more than the " +
                      std::to_string(kMaxSummaryBytes) + " a summary.json of keel's can be");
  nlohmann::json s;
  try {
    s = parse_json_bounded(read_small_file(path, kMaxSummaryBytes), path);
  } catch (const JsonError& e) {
    throw RunDirError(std::string(e.what()) + " (a summary.json keel writes is one JSON object)");
  }
  SummaryCheck(path, s).run();
  return s;
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
