// CheckpointStore: finding and verifying checkpoints.
#include <algorithm>

#include "checkpoint/checkpoint_store.h"
#include "util/fs.h"
#include "util/json.h"

namespace keel {

std::vector<std::pair<int64_t, std::string>> CheckpointStore::step_dirs() const {
  std::vector<std::pair<int64_t, std::string>> out;
  if (!path_exists(checkpoints_dir_)) return out;  // nothing saved yet
  for (const auto& name : list_directory(checkpoints_dir_)) {
    const std::string dir = checkpoints_dir_ + "/" + name;
    if (auto step = parse_step_dir_name(name); step && is_directory(dir)) out.emplace_back(*step, dir);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

Manifest CheckpointStore::verify(const std::string& checkpoint_dir, VerifyLevel level) {
  const std::string manifest_path = checkpoint_dir + "/" + kManifestName;
  if (!path_exists(manifest_path))
    throw checkpoint_error(manifest_path, "missing: the save did not finish or a prune was interrupted");
  Manifest m = parse_manifest(read_small_file(manifest_path), manifest_path);

  const std::string name = base_name(checkpoint_dir);
  if (auto step = parse_step_dir_name(name); step && *step != m.step)
    throw checkpoint_error(manifest_path, "says step " + std::to_string(m.step) + " but the directory is " + name);

  for (const auto& f : m.files) {
    const std::string path = checkpoint_dir + "/" + f.name;
    if (!path_exists(path)) throw checkpoint_error(path, "listed in the manifest but missing");
    const uint64_t size = file_size(path);
    if (size != f.size)
      throw checkpoint_error(path, "is " + std::to_string(size) + " bytes, the manifest says " +
                                       std::to_string(f.size) + " (truncated or rewritten after saving)");
    if (level == VerifyLevel::checksums) {
      FileDigest d = digest_file(path);
      if (d.crc32 != f.crc32)
        throw checkpoint_error(path, "CRC-32 is " + crc32_hex(d.crc32) + ", the manifest says " + crc32_hex(f.crc32) +
                                         " (the file was corrupted after saving)");
    }
    // state.json must parse: a write that failed unnoticed once left an empty
    // one that its manifest vouched for, and resume then failed on it.
    if (f.name == "state.json") {
      try {
        if (!parse_json_bounded(read_small_file(path), path).is_object())
          throw checkpoint_error(path, "is not a JSON object");
      } catch (const JsonError& e) {
        throw CheckpointError(e.what());
      }
    }
  }
  return m;
}

std::vector<std::pair<int64_t, std::string>> CheckpointStore::list_valid(VerifyLevel level,
                                                                         std::vector<std::string>* rejected) const {
  std::vector<std::pair<int64_t, std::string>> out;
  for (const auto& [step, dir] : step_dirs()) {
    try {
      verify(dir, level);
      out.emplace_back(step, dir);
    } catch (const Error& e) {  // CheckpointError, or FileError reading it: not usable
      if (rejected) rejected->push_back(e.what());
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::optional<std::string> CheckpointStore::latest_valid(std::vector<std::string>* rejected) const {
  // Newest first, stopping at the first good one: usually one checkpoint is read.
  for (const auto& [step, dir] : step_dirs()) {
    try {
      verify(dir, VerifyLevel::checksums);
      return dir;
    } catch (const Error& e) {  // CheckpointError, or FileError reading it: not usable
      if (rejected) rejected->push_back(e.what());
    }
  }
  return std::nullopt;
}

}  // namespace keel
