#include "data/sources.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>

#include "util/error.h"
#include "util/fs.h"
#include "util/text.h"

namespace keel {

namespace {

std::string strip_gz(const std::string& name) {
  return ends_with(name, ".gz") ? name.substr(0, name.size() - 3) : name;
}

bool wanted_in_directory(const std::string& name) {
  if (name.empty() || name[0] == '.') return false;
  std::string base = strip_gz(name);
  for (const char* ext : {".txt", ".text", ".md", ".jsonl"})
    if (ends_with(base, ext)) return true;
  return false;
}

SourceFile describe(const std::string& path) {
  SourceFile f;
  f.path = path;
  f.bytes = static_cast<int64_t>(file_size(path));
  if (::access(path.c_str(), R_OK) != 0)
    throw data_error(path, std::string("not readable: ") + std::strerror(errno));
  std::string name = base_name(path);
  f.gzip = ends_with(name, ".gz");
  f.format = ends_with(strip_gz(name), ".jsonl") ? SourceFormat::jsonl : SourceFormat::text;
  return f;
}

// Files under `dir` that a directory source reads, by path (byte order).
void walk(const std::string& dir, int depth, std::vector<std::string>& found) {
  if (depth > 32) throw data_error(dir, "directories nested more than 32 deep (a symlink loop?)");
  for (const auto& name : list_directory(dir)) {
    if (name[0] == '.') continue;  // .git and friends
    std::string path = dir + "/" + name;
    auto kind = path_kind(path);
    if (kind == PathKind::directory) walk(path, depth + 1, found);
    else if (kind == PathKind::file && wanted_in_directory(name)) found.push_back(path);
  }
}

}  // namespace

const char* format_name(SourceFormat format) { return format == SourceFormat::jsonl ? "jsonl" : "text"; }

std::vector<SourceFile> expand_sources(const std::vector<std::string>& sources) {
  if (sources.empty()) throw DataError("data.sources is empty: nothing to prepare");
  std::vector<SourceFile> files;
  std::set<std::string> seen;  // real paths
  auto add = [&](const std::string& path) {
    if (!seen.insert(real_path(path)).second)
      throw data_error(path, "reached twice through data.sources; its documents would be counted twice");
    files.push_back(describe(path));
  };
  for (std::string source : sources) {
    while (source.size() > 1 && source.back() == '/') source.pop_back();
    switch (path_kind(source)) {
      case PathKind::missing:
        throw data_error(source, "listed in data.sources but does not exist (relative paths start at " +
                                     current_dir() + ")");
      case PathKind::file:
        add(source);
        break;
      case PathKind::directory: {
        std::vector<std::string> found;
        walk(source, 0, found);
        if (found.empty())
          throw data_error(source, "directory holds no *.txt, *.text, *.md or *.jsonl files (optionally .gz)");
        for (const auto& f : found) add(f);
        break;
      }
      case PathKind::other:
        throw data_error(source, "is neither a regular file nor a directory");
    }
  }
  return files;
}

int64_t estimated_text_bytes(const SourceFile& file) {
  if (!file.gzip || file.bytes < 18) return file.bytes;
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(file.path.c_str(), "rb"), &std::fclose);
  unsigned char t[4];
  if (!f || std::fseek(f.get(), -4, SEEK_END) != 0 || std::fread(t, 1, 4, f.get()) != 4) return 3 * file.bytes;
  int64_t isize = int64_t(t[0]) | int64_t(t[1]) << 8 | int64_t(t[2]) << 16 | int64_t(t[3]) << 24;
  // ISIZE is the size mod 2^32; below the compressed size it has wrapped.
  return isize >= file.bytes ? isize : 3 * file.bytes;
}

}  // namespace keel
