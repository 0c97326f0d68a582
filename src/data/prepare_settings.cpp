#include "data/prepare_settings.h"

#include <map>

#include "config/config.h"
#include "data/shard.h"
#include "util/hashing.h"
#include "util/json.h"

namespace keel {

nlohmann::json prepare_settings(const Config& c, const std::vector<SourceFile>& files, const std::string& tokenizer_sha) {
  nlohmann::json s;
  s["format_version"] = kShardVersion;
  s["sources"] = nlohmann::json::array();
  for (const auto& f : files) s["sources"].push_back({{"path", f.path}, {"bytes", f.bytes}});
  s["doc_separator"] = c.data.doc_separator;
  // Only when set: directories prepared before the key existed keep their fingerprint.
  if (c.data.text_field != "text") s["text_field"] = c.data.text_field;
  s["val_fraction"] = c.data.val_fraction;
  s["shard_tokens"] = c.data.shard_tokens;
  if (c.data.tokenizer.empty())
    s["tokenizer"] = {{"train", c.data.tokenizer_type}, {"vocab_size", c.model.vocab_size},
                      {"sample_mb", c.data.tokenizer_sample_mb}};
  else
    s["tokenizer"] = {{"file_sha256", tokenizer_sha}, {"vocab_size", c.model.vocab_size}};
  return s;
}

std::string describe_settings_change(const nlohmann::json& before, const nlohmann::json& now) {
  std::vector<std::string> out;
  for (auto it = now.begin(); it != now.end(); ++it) {
    const std::string& key = it.key();
    if (!before.contains(key)) {
      out.push_back(key + " is new");
      continue;
    }
    if (before[key] == *it) continue;
    if (key == "sources" && before[key].is_array()) {
      std::map<std::string, int64_t> a, b;
      for (const auto& s : before[key]) a[s.value("path", "")] = json_int_or<int64_t>(s, "bytes", int64_t{0});
      for (const auto& s : *it) b[s.value("path", "")] = json_int_or<int64_t>(s, "bytes", int64_t{0});
      for (const auto& [path, bytes] : b) {
        if (!a.count(path)) out.push_back("source " + path + " added");
        else if (a[path] != bytes)
          out.push_back("source " + path + " changed size (" + std::to_string(a[path]) + " -> " +
                        std::to_string(bytes) + " bytes)");
      }
      for (const auto& [path, bytes] : a)
        if (!b.count(path)) out.push_back("source " + path + " removed");
      if (a == b) out.push_back("sources reordered");
      continue;
    }
    out.push_back(key + " was " + before[key].dump() + ", now " + it->dump());
  }
  std::string joined;
  for (size_t i = 0; i < out.size() && i < 5; ++i) joined += (i ? "; " : "") + out[i];
  if (out.size() > 5) joined += "; and " + std::to_string(out.size() - 5) + " more";
  return joined.empty() ? "settings differ" : joined;
}

std::string settings_fingerprint(const nlohmann::json& settings) { return sha256_hex(settings.dump()); }

}  // namespace keel
