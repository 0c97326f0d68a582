// Expands data.sources (files and directories) into the ordered list of input
// files that `keel prepare` reads.
//
// Rules, chosen so the result depends only on the file tree:
//   - A listed file is read whatever its name. A listed directory is walked
//     recursively; there only files named *.txt, *.text, *.md or *.jsonl (each
//     optionally + .gz or .zst), *.json.gz / *.json.zst or *.parquet are read, and names
//     starting with '.' are skipped.
//   - Files are ordered as listed; inside a directory, depth first with names
//     in byte order, so every machine reads them in the same order.
//   - *.jsonl(.gz|.zst) is JSON Lines with a string field "text" (or
//     data.text_field), and so is a
//     compressed *.json (Dolma and DCLM ship JSON Lines as .json.gz and
//     .json.zst); anything else is text. A name ending in .gz is read through
//     zlib, one ending in .zst through libzstd (concatenated frames included).
//   - *.parquet is Parquet (FineWeb): one document per row of the string
//     column "text" (or data.text_field), read by parquet_reader.h; its
//     compression is inside the file.
//   - A file reached twice (listed twice, or via two directories) is an error:
//     its documents would be counted twice.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

enum class SourceFormat { text, jsonl, parquet };
enum class Compression { none, gzip, zstd };

struct SourceFile {
  std::string path;      // as reached from data.sources (relative paths stay relative)
  int64_t bytes = 0;     // size on disk
  SourceFormat format = SourceFormat::text;
  Compression compression = Compression::none;
  std::string text_field = "text";  // JSON Lines: the field holding the document (data.text_field)
  int32_t entry = 0;     // the data.sources entry it was reached from (a mixture's source)
};

// Throws DataError naming the first path that does not exist, is not a
// regular file or directory, or cannot be read; and when nothing is found.
// `text_field` is data.text_field, for the JSON Lines files among them.
std::vector<SourceFile> expand_sources(const std::vector<std::string>& sources,
                                       const std::string& text_field = "text");

// Estimated uncompressed size: the size on disk; for gzip the ISIZE field of
// the trailer (exact for single-member files under 4 GiB; 3x the size when
// ISIZE is below the file's size or above deflate's 1032:1); for zstd the first
// frame's content size (exact for single-frame files), else 4x the size.
int64_t estimated_text_bytes(const SourceFile& file);

const char* format_name(SourceFormat format);
const char* compression_name(Compression compression);  // none | gzip | zstd

}  // namespace keel
