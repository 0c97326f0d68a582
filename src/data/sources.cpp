#include "data/sources.h"

#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>

#include "data/parquet_reader.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/text.h"

namespace keel {

namespace {

constexpr int64_t kMaxDeflateRatio = 1032;  // the most a deflate stream expands (zlib's technical notes)

Compression compression_of(const std::string& name) {
  if (ends_with(name, ".gz")) return Compression::gzip;
  if (ends_with(name, ".zst")) return Compression::zstd;
  return Compression::none;
}

// The name without its compression suffix.
std::string uncompressed_name(const std::string& name) {
  switch (compression_of(name)) {
    case Compression::gzip: return name.substr(0, name.size() - 3);
    case Compression::zstd: return name.substr(0, name.size() - 4);
    case Compression::none: break;
  }
  return name;
}

SourceFormat format_of(const std::string& name) {
  const std::string base = uncompressed_name(name);
  if (ends_with(base, ".jsonl")) return SourceFormat::jsonl;
  if (ends_with(name, ".parquet")) return SourceFormat::parquet;
  if (ends_with(base, ".json") && compression_of(name) != Compression::none) return SourceFormat::jsonl;
  return SourceFormat::text;
}

bool wanted_in_directory(const std::string& name) {
  if (name.empty() || name[0] == '.') return false;
  if (format_of(name) != SourceFormat::text) return true;
  std::string base = uncompressed_name(name);
  for (const char* ext : {".txt", ".text", ".md"})
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
  f.compression = compression_of(name);
  f.format = format_of(name);
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

const char* format_name(SourceFormat format) {
  switch (format) {
    case SourceFormat::jsonl: return "jsonl";
    case SourceFormat::parquet: return "parquet";
    case SourceFormat::text: break;
  }
  return "text";
}

const char* compression_name(Compression compression) {
  switch (compression) {
    case Compression::gzip: return "gzip";
    case Compression::zstd: return "zstd";
    case Compression::none: break;
  }
  return "none";
}

std::vector<SourceFile> expand_sources(const std::vector<std::string>& sources, const std::string& text_field) {
  if (sources.empty()) throw DataError("data.sources is empty: nothing to prepare");
  std::vector<SourceFile> files;
  std::set<std::string> seen;  // real paths
  int32_t entry = 0;
  auto add = [&](const std::string& path) {
    if (!seen.insert(real_path(path)).second)
      throw data_error(path, "reached twice through data.sources; its documents would be counted twice");
    files.push_back(describe(path));
    files.back().text_field = text_field;
    files.back().entry = entry;
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
          throw data_error(source, "directory holds no *.txt, *.text, *.md or *.jsonl files (optionally .gz or .zst), "
                                       "nor *.json.gz, *.json.zst or *.parquet");
        for (const auto& f : found) add(f);
        break;
      }
      case PathKind::other:
        throw data_error(source, "is neither a regular file nor a directory");
    }
    ++entry;
  }
  return files;
}

int64_t estimated_text_bytes(const SourceFile& file) {
  if (file.format == SourceFormat::parquet) return parquet_text_bytes(file);
  if (file.compression == Compression::none) return file.bytes;
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(file.path.c_str(), "rb"), &std::fclose);
  if (!f) return 3 * file.bytes;
  if (file.compression == Compression::zstd) {
    unsigned char head[18];  // ZSTD_FRAMEHEADERSIZE_MAX (in zstd.h's static-linking-only part)
    const size_t got = std::fread(head, 1, sizeof head, f.get());
    const unsigned long long size = ZSTD_getFrameContentSize(head, got);
    if (size == ZSTD_CONTENTSIZE_UNKNOWN || size == ZSTD_CONTENTSIZE_ERROR) return 4 * file.bytes;
    // A first frame smaller than the file's bytes means more frames follow.
    return static_cast<int64_t>(size) >= file.bytes ? static_cast<int64_t>(size) : 4 * file.bytes;
  }
  unsigned char t[4];
  if (file.bytes < 18 || std::fseek(f.get(), -4, SEEK_END) != 0 || std::fread(t, 1, 4, f.get()) != 4)
    return 3 * file.bytes;
  int64_t isize = int64_t(t[0]) | int64_t(t[1]) << 8 | int64_t(t[2]) << 16 | int64_t(t[3]) << 24;
  // ISIZE is the size mod 2^32; below the compressed size it has wrapped.
  // Above what deflate can reach (1032:1) it is no trailer at all (bytes
  // appended to the file, which the reader refuses): an estimate that large
  // would make the tokenizer's sample rate near zero.
  if (isize > kMaxDeflateRatio * file.bytes) return 3 * file.bytes;
  return isize >= file.bytes ? isize : 3 * file.bytes;
}

}  // namespace keel
