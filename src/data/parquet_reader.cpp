#include "data/parquet_reader.h"

#include "util/error.h"

#ifdef KEEL_WITH_PARQUET
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#endif

namespace keel {

#ifndef KEEL_WITH_PARQUET

bool parquet_available() { return false; }
std::string parquet_library_version() { return ""; }

void read_parquet_records(const SourceFile& file, int32_t, const std::function<bool(Record&&)>&) {
  throw data_error(file.path,
                   "is Parquet, and this keel was built without Parquet support (Apache Arrow's C++ libraries, from "
                   "the pyarrow wheel, were not found when CMake ran); run scripts/setup.sh, which installs pyarrow "
                   "into .venv, then reconfigure (cmake -S . -B build -DKEEL_PARQUET=ON)");
}

int64_t parquet_text_bytes(const SourceFile& file) { return file.bytes; }

#else

namespace {

constexpr int kMaxRowGroups = 1 << 20;

template <typename T>
T value_or_throw(arrow::Result<T> r, const std::string& where) {
  if (!r.ok()) throw DataError(where + ": " + r.status().ToString());
  return std::move(r).ValueOrDie();
}

void check(const arrow::Status& s, const std::string& where) {
  if (!s.ok()) throw DataError(where + ": " + s.ToString());
}

struct OpenFile {
  std::unique_ptr<parquet::arrow::FileReader> reader;
  std::shared_ptr<parquet::FileMetaData> metadata;
  int column = -1;  // top-level field index of the text column
};

OpenFile open_file(const SourceFile& file) {
  const std::string& path = file.path;
  OpenFile f;
  auto input = value_or_throw(arrow::io::ReadableFile::Open(path), path);
  parquet::ReaderProperties props(arrow::default_memory_pool());
  props.enable_buffered_stream();  // pages are read as needed, not whole column chunks at once
  props.set_page_checksum_verification(true);  // files written with page CRCs get them checked
  std::unique_ptr<parquet::ParquetFileReader> raw;
  try {
    raw = parquet::ParquetFileReader::Open(input, props);
  } catch (const std::exception& e) {
    throw data_error(path, std::string("not a readable Parquet file: ") + e.what());
  }
  f.metadata = raw->metadata();
  if (f.metadata->num_row_groups() > kMaxRowGroups)
    throw data_error(path, "has " + std::to_string(f.metadata->num_row_groups()) + " row groups, more than keel reads");
  f.reader = value_or_throw(parquet::arrow::FileReader::Make(arrow::default_memory_pool(), std::move(raw)), path);
  std::shared_ptr<arrow::Schema> schema;
  check(f.reader->GetSchema(&schema), path);
  f.column = schema->GetFieldIndex(file.text_field);
  if (f.column < 0) {
    std::string names;
    for (int i = 0; i < schema->num_fields() && i < 20; ++i) names += (i ? ", " : "") + schema->field(i)->name();
    throw data_error(path, "has no column \"" + file.text_field + "\" (its columns: " + names +
                               "; data.text_field names the column holding the documents)");
  }
  const auto type = schema->field(f.column)->type()->id();
  if (type != arrow::Type::STRING && type != arrow::Type::LARGE_STRING && type != arrow::Type::STRING_VIEW)
    throw data_error(path, "column \"" + file.text_field + "\" is " + schema->field(f.column)->type()->ToString() +
                               ", not a string column (data.text_field names the column holding the documents)");
  return f;
}

template <typename Array>
bool emit_rows(const Array& a, int32_t index, int row_group, int64_t& row, const std::function<bool(Record&&)>& emit) {
  for (int64_t i = 0; i < a.length(); ++i, ++row) {
    if (a.IsNull(i)) continue;
    auto v = a.GetView(i);
    if (v.empty()) continue;
    Record r{std::string(v.data(), v.size()), index, row + 1, row_group};
    if (!emit(std::move(r))) return false;
  }
  return true;
}

}  // namespace

bool parquet_available() { return true; }
std::string parquet_library_version() { return ARROW_VERSION_STRING; }

void read_parquet_records(const SourceFile& file, int32_t index, const std::function<bool(Record&&)>& emit) {
  OpenFile f = open_file(file);
  int64_t row = 0;
  for (int g = 0; g < f.reader->num_row_groups(); ++g) {
    const std::string where = file.path + ": row group " + std::to_string(g);
    std::shared_ptr<arrow::ChunkedArray> column;
    try {
      check(f.reader->RowGroup(g)->Column(f.column)->Read(&column), where);
    } catch (const DataError&) {
      throw;
    } catch (const std::exception& e) {  // parquet::ParquetException, std::bad_alloc from a hostile size
      throw DataError(where + ": " + e.what());
    }
    for (const auto& chunk : column->chunks()) {
      bool go_on = true;
      switch (chunk->type_id()) {
        case arrow::Type::STRING:
          go_on = emit_rows(static_cast<const arrow::StringArray&>(*chunk), index, g, row, emit);
          break;
        case arrow::Type::LARGE_STRING:
          go_on = emit_rows(static_cast<const arrow::LargeStringArray&>(*chunk), index, g, row, emit);
          break;
        case arrow::Type::STRING_VIEW:
          go_on = emit_rows(static_cast<const arrow::StringViewArray&>(*chunk), index, g, row, emit);
          break;
        default:
          throw DataError(where + ": column \"" + file.text_field + "\" read as " + chunk->type()->ToString());
      }
      if (!go_on) return;
    }
  }
}

int64_t parquet_text_bytes(const SourceFile& file) {
  try {
    OpenFile f = open_file(file);
    const int leaf = f.metadata->schema()->ColumnIndex(file.text_field);  // a flat column: its path is its name
    if (leaf < 0) return file.bytes;
    int64_t total = 0;
    for (int g = 0; g < f.metadata->num_row_groups(); ++g)
      total += f.metadata->RowGroup(g)->ColumnChunk(leaf)->total_uncompressed_size();
    return total > 0 ? total : file.bytes;
  } catch (const std::exception&) {
    return file.bytes;  // the reader reports the problem with its context
  }
}

#endif

}  // namespace keel
