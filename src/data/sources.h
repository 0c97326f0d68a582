// Expands data.sources (files and directories) into the ordered list of input
// files that `keel prepare` reads.
//
// Rules, chosen so the result depends only on the file tree:
//   - A listed file is read whatever its name. A listed directory is walked
//     recursively; there only files named *.txt, *.text, *.md or *.jsonl (each
//     optionally + .gz) are read, and names starting with '.' are skipped.
//   - Files are ordered as listed; inside a directory, depth first with names
//     in byte order, so every machine reads them in the same order.
//   - *.jsonl(.gz) is JSON Lines with a string field "text"; anything else is
//     text. A name ending in .gz is read through zlib.
//   - A file reached twice (listed twice, or via two directories) is an error:
//     its documents would be counted twice.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

enum class SourceFormat { text, jsonl };

struct SourceFile {
  std::string path;      // as reached from data.sources (relative paths stay relative)
  int64_t bytes = 0;     // size on disk
  SourceFormat format = SourceFormat::text;
  bool gzip = false;
};

// Throws DataError naming the first path that does not exist, is not a
// regular file or directory, or cannot be read; and when nothing is found.
std::vector<SourceFile> expand_sources(const std::vector<std::string>& sources);

// Estimated uncompressed size: the size on disk, or for gzip the ISIZE field
// of the trailer (exact for single-member files under 4 GiB).
int64_t estimated_text_bytes(const SourceFile& file);

const char* format_name(SourceFormat format);

}  // namespace keel
