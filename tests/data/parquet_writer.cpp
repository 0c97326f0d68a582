#include "parquet_writer.h"

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/writer.h>

#include <stdexcept>

namespace keel_test {

namespace {
void ok(const arrow::Status& s) {
  if (!s.ok()) throw std::runtime_error("arrow: " + s.ToString());
}
}  // namespace

void write_parquet(const std::string& path, const std::vector<std::optional<std::string>>& values,
                   const std::string& column, int64_t rows_per_group, bool int_text) {
  arrow::Int64Builder ids, numbers;
  arrow::StringBuilder text;
  for (size_t i = 0; i < values.size(); ++i) {
    ok(ids.Append(static_cast<int64_t>(i)));
    ok(values[i] ? text.Append(*values[i]) : text.AppendNull());
    ok(numbers.Append(static_cast<int64_t>(i) * 7));
  }
  std::shared_ptr<arrow::Array> id_array, text_array;
  ok(ids.Finish(&id_array));
  ok(int_text ? numbers.Finish(&text_array) : text.Finish(&text_array));
  auto schema = arrow::schema({arrow::field("id", arrow::int64()), arrow::field(column, text_array->type())});
  auto table = arrow::Table::Make(schema, {id_array, text_array});
  auto sink = arrow::io::FileOutputStream::Open(path);
  ok(sink.status());
  parquet::WriterProperties::Builder props;
  // No min/max statistics: the footer stays small, so most bytes are pages.
  props.compression(parquet::Compression::ZSTD)->enable_page_checksum()->disable_statistics();
  ok(parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), *sink, rows_per_group, props.build()));
  ok((*sink)->Close());
}

}  // namespace keel_test
