// json_int: integer fields of files keel reads are checked, not cast.
#include <gtest/gtest.h>

#include <cstdint>
#include <cmath>
#include <limits>

#include "data/manifest.h"
#include "util/error.h"
#include "util/json.h"

using keel::json_int;
using keel::json_int_or;
using json = nlohmann::json;

TEST(JsonInt, TakesIntegersAndIntegralFloatsThatFit) {
  EXPECT_EQ(json_int<int64_t>(json(-5)), -5);
  EXPECT_EQ(json_int<int64_t>(json(3.0)), 3);
  EXPECT_EQ(json_int<uint64_t>(json(std::numeric_limits<uint64_t>::max())), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(json_int<int>(json(std::numeric_limits<int>::min())), std::numeric_limits<int>::min());
  EXPECT_EQ(json_int<int64_t>(json(-9223372036854775808.0)), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(json_int_or<int64_t>(json::object(), "steps", int64_t{-1}), -1);
  EXPECT_EQ(json_int_or<int64_t>(json{{"steps", 7}}, "steps", int64_t{-1}), 7);
}

TEST(JsonInt, RefusesWhatACastWouldBreak) {
  // Each of these was a plain cast before: undefined behaviour for the floats, a silent wrap for the integers.
  EXPECT_THROW(json_int<int64_t>(json(1e308)), json::out_of_range);
  EXPECT_THROW(json_int<int64_t>(json(9223372036854775808.0)), json::out_of_range);  // 2^63
  EXPECT_THROW(json_int<int64_t>(json(std::numeric_limits<uint64_t>::max())), json::out_of_range);
  EXPECT_THROW(json_int<int64_t>(json(2.5)), json::out_of_range);
  EXPECT_THROW(json_int<int64_t>(json(std::nan(""))), json::out_of_range);
  EXPECT_THROW(json_int<int>(json(int64_t{1} << 40)), json::out_of_range);
  EXPECT_THROW(json_int<int>(json(3e9)), json::out_of_range);
  EXPECT_THROW(json_int<uint64_t>(json(-1)), json::out_of_range);
  EXPECT_THROW(json_int<uint64_t>(json(-1.0)), json::out_of_range);
  EXPECT_THROW(json_int<int64_t>(json("12")), json::type_error);
  EXPECT_THROW(json_int_or<int64_t>(json{{"steps", 1e300}}, "steps", int64_t{0}), json::out_of_range);
}

TEST(JsonInt, ADataManifestWithAHugeCountIsABadFileNotACrash) {
  try {
    keel::data_manifest_from_json(json{{"format", "keel-tokens"}, {"version", 1e308}}, "data/manifest.json");
    FAIL() << "a version of 1e308 was accepted";
  } catch (const keel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("data/manifest.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1e+308"), std::string::npos) << e.what();
  }
}
