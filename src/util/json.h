// JSON read from files keel may not have written intact (checkpoints,
// safetensors headers, data manifests, Hugging Face files, JSONL corpora):
// parsed with bounded nesting, so a hostile file cannot build a value so deep
// that printing it recurses off the stack, and quoted in messages only up to
// a short prefix.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "util/error.h"

namespace keel {

constexpr int kMaxJsonDepth = 64;

// A JSON text that is malformed or nested too deeply, naming where it came from.
class JsonError : public Error {
 public:
  explicit JsonError(const std::string& message) : Error(message, "invalid JSON") {}
};

// Parses `text`; throws JsonError "<where>: ..." when it is not JSON or
// nests deeper than max_depth.
template <typename Json = nlohmann::json>
Json parse_json_bounded(const std::string& text, const std::string& where, int max_depth = kMaxJsonDepth) {
  typename Json::parser_callback_t limit = [&](int depth, typename Json::parse_event_t, Json&) {
    if (depth > max_depth)
      throw JsonError(where + ": nested deeper than " + std::to_string(max_depth) + " levels");
    return true;
  };
  try {
    return Json::parse(text, limit);
  } catch (const typename Json::exception& e) {
    throw JsonError(where + ": not valid JSON: " + std::string(e.what()).substr(0, 300));
  }
}

// How deeply arrays and objects nest in `text`, found by counting brackets
// outside strings, without parsing; stops counting once past `stop_above`.
// Also defined for text that is not valid JSON, so a log line can be refused
// before a reader that recurses per level (Python's json) sees it.
inline int json_nesting_depth(std::string_view text, int stop_above = kMaxJsonDepth) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > stop_above) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// value.dump(), cut to max_chars (with "..." when cut): safe to put in a message.
template <typename Json>
std::string json_excerpt(const Json& value, size_t max_chars = 200) {
  std::string s = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  return s.size() <= max_chars ? s : s.substr(0, max_chars) + "...";
}

// An integer field of a file keel reads. nlohmann's get<int64_t>() converts
// a float with a plain cast, undefined for 1e308 (UBSan's
// float-cast-overflow, found by the fuzzer), and get<int>() truncates a
// large integer silently. This returns integers and integral floats that fit
// T, and otherwise throws nlohmann's out_of_range (or its type_error for a
// value that is no number), which readers already turn into their own error
// naming the file.
template <typename T, typename Json>
T json_int(const Json& v) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  using Limits = std::numeric_limits<T>;
  if (v.is_number_unsigned()) {
    const auto u = v.template get<uint64_t>();
    if (u <= static_cast<uint64_t>(Limits::max())) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const auto i = v.template get<int64_t>();
    if (i >= 0 ? static_cast<uint64_t>(i) <= static_cast<uint64_t>(Limits::max())
               : Limits::is_signed && i >= static_cast<int64_t>(Limits::min()))
      return static_cast<T>(i);
  } else if (v.is_number_float()) {
    const double d = v.template get<double>();
    // 2^63 and 2^64 are exact doubles: the bounds are compared as doubles.
    const double hi = Limits::is_signed ? 9223372036854775808.0 : 18446744073709551616.0;
    if (std::isfinite(d) && d == std::floor(d) && d >= static_cast<double>(Limits::min()) && d < hi &&
        (sizeof(T) == 8 || d <= static_cast<double>(Limits::max())))
      return static_cast<T>(d);
  } else {
    return v.template get<T>();  // not a number: nlohmann's type_error names the type
  }
  throw Json::out_of_range::create(406, "number " + json_excerpt(v, 40) + " is not an integer in range", &v);
}

// json_int of obj[key] where present, else `fallback` (nlohmann's value() casts like get()).
template <typename T, typename Json>
T json_int_or(const Json& obj, const char* key, T fallback) {
  const auto it = obj.find(key);
  return it == obj.end() ? fallback : json_int<T>(*it);
}

}  // namespace keel
