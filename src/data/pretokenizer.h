// The text side of a Hugging Face byte-level BPE tokenizer (tokenizer.json):
// the normalizer and the pre-tokenizers that cut text into the words BPE
// merges within, with the semantics of the `tokenizers` library.
//
//   Normalizer    NFC (Qwen 2/3), or none (GPT-2, Llama 3, OLMo 2); a
//                 Sequence of those.
//   PreTokenizer  Split{pattern, behavior: Isolated | Removed, invert: false}
//                 and ByteLevel{add_prefix_space, use_regex}, alone or in a
//                 Sequence. ByteLevel with use_regex cuts with GPT-2's
//                 pattern; Llama 3, Qwen and OLMo 2 put their own pattern in a
//                 Split before a ByteLevel without regex.
//
// Patterns are the `tokenizers` library's Oniguruma regexes, run here by
// PCRE2 (UTF + UCP, JIT). The two differ in one place that matters: \s. In
// Oniguruma it is Unicode's White_Space, which includes U+0085 (NEL); in
// PCRE2 it is the separators (Z) plus \t\n\v\f\r, which do not. Patterns are
// rewritten so \s, \S and [^\s...] include U+0085 (translate_pattern).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace keel {

// GPT-2's pre-tokenizer pattern (ByteLevel with use_regex: true).
extern const char* const kGpt2Pattern;

// The Oniguruma pattern as a PCRE2 pattern with the same meaning (see above).
std::string translate_pattern(const std::string& onig_pattern);

// A compiled regex; matching is thread-safe (match data is per call).
class Regex {
 public:
  // Throws DataError "<where>: ..." when PCRE2 cannot compile it.
  Regex(const std::string& onig_pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Calls f(begin, end) for each non-overlapping, non-empty match, left to right.
  void for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& f) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

using PieceFn = std::function<void(std::string_view)>;

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Cuts `text` into pieces, in order, calling emit for each non-empty one.
  virtual void split(std::string_view text, const PieceFn& emit) const = 0;
};

struct TextPipeline {
  bool nfc = false;                                   // normalizer
  std::vector<std::unique_ptr<PreTokenizer>> steps;   // applied in order, each to the previous one's pieces
  bool byte_level = false;                            // a ByteLevel pre-tokenizer is among the steps

  // Normalizes `text` (which must be valid UTF-8) into `scratch` if needed and
  // returns the normalized text (a view of `text` itself when unchanged).
  std::string_view normalize(std::string_view text, std::string& scratch) const;
  // Runs the pre-tokenizers over normalized text.
  void pre_tokenize(std::string_view text, const PieceFn& emit) const;
};

// j[key] of an object read from tokenizer.json; DataError "<where>:
// <path>.<key> is missing" otherwise (just <key> at the top level).
const nlohmann::json& json_member(const nlohmann::json& j, const char* key, const std::string& path,
                                  const std::string& where);

// Reads tokenizer.json's "normalizer" and "pre_tokenizer" values. Throws
// DataError naming `where` and the key path (pre_tokenizer.pretokenizers[1].type)
// for anything outside the supported set above.
TextPipeline read_text_pipeline(const nlohmann::json& normalizer, const nlohmann::json& pre_tokenizer,
                                const std::string& where);

}  // namespace keel
