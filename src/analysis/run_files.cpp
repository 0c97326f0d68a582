#include "analysis/run_files.h"

#include <sstream>

#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

namespace keel {

namespace {

FlatConfig json_to_flat(const nlohmann::json& j) {
  FlatConfig out;
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it) out[it.key()] = it.value().get<std::string>();
  return out;
}

}  // namespace

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

}  // namespace keel
