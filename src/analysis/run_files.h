// Reading what runs and sweeps left on disk, for keel report, keel compare,
// keel replay and the sweep runner alike: a sweep manifest's points and their
// resolved configs, and a run's summary.json checked before anything reads it.
// (Writing the manifest is the sweep's: sweep/sweep_manifest.h.)
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace keel {

using FlatConfig = std::map<std::string, std::string>;  // key -> YAML value text

// Full resolved config of the manifest's point `name` (empty if unknown).
FlatConfig manifest_point_config(const nlohmann::json& manifest, const std::string& name);

// The points of a manifest by name, read in one pass, so that looking up
// every point of a plan costs O(N log N), not N scans of the list. Holds
// pointers into `manifest`, which must outlive it.
class ManifestIndex {
 public:
  explicit ManifestIndex(const nlohmann::json& manifest);
  const nlohmann::json* find(const std::string& name) const;  // nullptr if unknown
  FlatConfig config(const std::string& name) const;          // as manifest_point_config
 private:
  FlatConfig reference_;
  std::map<std::string, const nlohmann::json*> points_;
};

// RUN_DIR/summary.json, checked before anyone reads it: at most 16 MiB,
// nested at most kMaxJsonDepth (util/json.h), an object whose keys that keel
// reads have their types (stopped_by a string; steps and the other counts
// non-negative integers; losses numbers or null; ...). Unknown keys pass.
// Throws RunDirError naming the file and the key. Whether the file exists is
// the caller's question: a run without one was interrupted.
nlohmann::json read_summary_json(const std::string& path);

}  // namespace keel
