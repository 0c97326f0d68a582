// JSON read from files keel may not have written intact (checkpoints,
// safetensors headers, data manifests, Hugging Face files, JSONL corpora):
// parsed with bounded nesting, so a hostile file cannot build a value so deep
// that printing it recurses off the stack, and quoted in messages only up to
// a short prefix.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

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

// value.dump(), cut to max_chars (with "..." when cut): safe to put in a message.
template <typename Json>
std::string json_excerpt(const Json& value, size_t max_chars = 200) {
  std::string s = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  return s.size() <= max_chars ? s : s.substr(0, max_chars) + "...";
}

}  // namespace keel
