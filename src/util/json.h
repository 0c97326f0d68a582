// JSON read from files keel may not have written intact (checkpoints,
// safetensors headers, data manifests, Hugging Face files, JSONL corpora):
// parsed with bounded nesting, so a hostile file cannot build a value so deep
// that printing it recurses off the stack, and quoted in messages only up to
// a short prefix.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <string_view>

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

}  // namespace keel
