// The few file-system operations the data pipeline needs, on POSIX calls.
//
// Not std::filesystem: libtorch.so exports its own copies of many
// std::filesystem functions, which then interpose on libstdc++'s, and some
// (remove_all at least) crash when called through it. Paths here are plain
// strings; errors become DataError naming the path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel::data_fs {

enum class Kind { missing, file, directory, other };

Kind kind_of(const std::string& path);             // follows symlinks
int64_t file_bytes(const std::string& path);        // throws DataError
void make_dirs(const std::string& path);            // mkdir -p; throws DataError
void remove_tree(const std::string& path);          // rm -rf, best effort, never follows symlinks
std::vector<std::string> list_dir(const std::string& dir);  // names, sorted bytewise, without . and ..
std::string parent_of(const std::string& path);     // "a/b/c" -> "a/b", "c" -> "."
std::string base_of(const std::string& path);       // "a/b/c" -> "c"
std::string real_path(const std::string& path);     // realpath(3), or `path` if that fails
std::string current_dir();
void fsync_dir(const std::string& dir);             // best effort

}  // namespace keel::data_fs
