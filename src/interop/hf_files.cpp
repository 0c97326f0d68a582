#include "interop/hf_files.h"

#include <unistd.h>

#include "util/error.h"
#include "util/fs.h"

namespace keel {

void check_output_dir(const std::string& dir, bool force) {
  if (path_exists(dir) && !is_directory(dir)) throw InteropError(dir + ": exists and is not a directory");
  if (is_directory(dir) && !list_directory(dir).empty() && !force)
    throw InteropError(dir + ": exists and is not empty; choose another directory or pass --force to write "
                              "into it (files of the same name are replaced)");
}

void prepare_output_dir(const std::string& dir, bool force) {
  check_output_dir(dir, force);
  ensure_directory(dir);
}

void write_output_file(const std::string& dir, const std::string& name,
                       const std::function<void(const std::string& path)>& write) {
  const std::string final_path = dir + "/" + name;
  const std::string tmp = dir + "/." + name + ".tmp-" + std::to_string(::getpid());
  try {
    write(tmp);
    fsync_file(tmp);
    rename_path(tmp, final_path);
  } catch (...) {
    if (path_exists(tmp)) remove_file(tmp);
    throw;
  }
}

void write_output_json(const std::string& dir, const std::string& name, const nlohmann::ordered_json& value) {
  std::string text;
  try {
    text = value.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {
    throw InteropError(dir + "/" + name + ": cannot write JSON: " + e.what());
  }
  write_output_file(dir, name, [&](const std::string& p) { write_file_durably(p, text); });
}

}  // namespace keel
