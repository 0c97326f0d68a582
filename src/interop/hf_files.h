// Output-directory handling shared by export-hf and import-hf.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>

namespace keel {

// Throws InteropError unless `dir` is missing, an empty directory, or (with
// `force`) any directory. Creates nothing: called before expensive work.
void check_output_dir(const std::string& dir, bool force);
// check_output_dir, then mkdir -p. A non-empty directory's other files are left alone.
void prepare_output_dir(const std::string& dir, bool force);

// Writes dir/name through `write` into a temporary name, fsyncs and renames
// it into place, so a crash never leaves a half-written file under the name.
void write_output_file(const std::string& dir, const std::string& name,
                       const std::function<void(const std::string& path)>& write);
// JSON, 2-space indented; InteropError if a string is not valid UTF-8.
void write_output_json(const std::string& dir, const std::string& name, const nlohmann::ordered_json& value);

}  // namespace keel
