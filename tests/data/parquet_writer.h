// Writes small Parquet files for the reader's tests, with Arrow's own writer
// (compiled as C++20 in keel_test_parquet, like the reader).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace keel_test {

// Columns "id" (int64) and `column` (strings; null where a value is empty
// optional; int64 instead when int_text), rows_per_group rows per row group,
// zstd pages with CRCs, no statistics. Throws std::runtime_error when Arrow fails.
void write_parquet(const std::string& path, const std::vector<std::optional<std::string>>& values,
                   const std::string& column = "text", int64_t rows_per_group = 3, bool int_text = false);

}  // namespace keel_test
