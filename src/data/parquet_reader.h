// Parquet sources (FineWeb, FineWeb-Edu): one document per row, the string
// column data.text_field, read one row group at a time through Apache
// Arrow's C++ libraries, so a file is never held in memory whole (a row
// group of FineWeb is some tens of MB).
//
// Arrow comes from the pyarrow wheel in .venv (cmake/keel_parquet.cmake). A
// keel built without it still lists *.parquet files and refuses them with a
// message that says Parquet is off and how to turn it on.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "data/corpus_reader.h"
#include "data/sources.h"

namespace keel {

// Whether this keel was built with Arrow; and its version ("" when not).
bool parquet_available();
std::string parquet_library_version();

// Calls emit with one Record per non-null row of the text column, in row
// order: bytes = the value, line = the row's 1-based number in the file,
// offset = its row group. Throws DataError naming the file (and the row group)
// for a missing or non-string column, a corrupt file or row group, or a keel
// built without Parquet.
void read_parquet_records(const SourceFile& file, int32_t index, const std::function<bool(Record&&)>& emit);

// Uncompressed size of the text column from the footer (for progress), or
// the file size when unknown.
int64_t parquet_text_bytes(const SourceFile& file);

}  // namespace keel
