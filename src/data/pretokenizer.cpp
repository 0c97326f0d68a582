#include "data/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "util/error.h"
#include "util/json.h"

namespace keel {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string translate_pattern(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (e == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {  // \S inside a class has no exact translation; it stays PCRE2's
        out += c;
        out += e;
      }
      continue;
    }
    out += c;
    if (!in_class && c == '[') {
      in_class = true;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ']' is literal
    } else if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      size_t end = p.find(":]", i + 2);  // POSIX class [:alpha:] inside a class
      if (end != std::string::npos) {
        out.append(p, i + 1, end + 2 - (i + 1));
        i = end + 1;
      }
    } else if (in_class && c == ']') {
      in_class = false;
    }
  }
  return out;
}

struct Regex::Impl {
  pcre2_code* code = nullptr;
  std::string where;
};

Regex::Regex(const std::string& onig_pattern, const std::string& where) : impl_(std::make_unique<Impl>()) {
  impl_->where = where;
  const std::string pattern = translate_pattern(onig_pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                              &err, &offset, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw DataError(where + ": regex " + json_excerpt(nlohmann::json(onig_pattern)) + " does not compile at offset " +
                    std::to_string(offset) + ": " + reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // when JIT is unavailable, the interpreter runs
}

Regex::~Regex() {
  if (impl_ && impl_->code) pcre2_code_free(impl_->code);
}

void Regex::for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& f) const {
  struct MatchData {  // freed on every exit, exceptions from f included
    pcre2_match_data* md;
    ~MatchData() { pcre2_match_data_free(md); }
  } data{pcre2_match_data_create_from_pattern(impl_->code, nullptr)};
  if (!data.md) throw std::bad_alloc();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    // The caller guarantees valid UTF-8 (Tokenizer::encode checks it).
    int rc = pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data.md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw DataError(impl_->where + ": regex matching failed at byte " + std::to_string(pos) + ": " +
                      reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    size_t b = ov[0], e = ov[1];
    if (e > b) {
      f(b, e);
      pos = e;
    } else {  // an empty match: step over one character
      pos = b + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
}

namespace {

enum class Behavior { isolated, removed, merged_with_previous, merged_with_next, contiguous };

// Split with a regex, as `tokenizers`' Split does: the text is cut into
// matches and the gaps between them, then the behavior says what to keep and
// what to join.
class RegexSplit : public PreTokenizer {
 public:
  RegexSplit(const std::string& pattern, Behavior b, bool invert, const std::string& where)
      : regex_(pattern, where), behavior_(b), invert_(invert) {}

  void split(std::string_view text, const PieceFn& emit) const override {
    if (behavior_ == Behavior::isolated && !invert_) {  // the common case, without the segment list
      size_t last = 0;
      regex_.for_each_match(text, [&](size_t b, size_t e) {
        if (b > last) emit(text.substr(last, b - last));
        emit(text.substr(b, e - b));
        last = e;
      });
      if (last < text.size()) emit(text.substr(last));
      return;
    }
    struct Segment {
      size_t b, e;
      bool match;
    };
    std::vector<Segment> segs;
    size_t last = 0;
    regex_.for_each_match(text, [&](size_t b, size_t e) {
      if (b > last) segs.push_back({last, b, invert_});
      segs.push_back({b, e, !invert_});
      last = e;
    });
    if (last < text.size()) segs.push_back({last, text.size(), invert_});
    std::vector<std::pair<size_t, size_t>> out;
    switch (behavior_) {
      case Behavior::isolated:
        for (const auto& s : segs) out.push_back({s.b, s.e});
        break;
      case Behavior::removed:
        for (const auto& s : segs)
          if (!s.match) out.push_back({s.b, s.e});
        break;
      case Behavior::merged_with_previous: {
        bool previous_match = false;
        for (const auto& s : segs) {
          if (s.match && !previous_match && !out.empty()) out.back().second = s.e;
          else out.push_back({s.b, s.e});
          previous_match = s.match;
        }
        break;
      }
      case Behavior::merged_with_next: {
        bool previous_match = false;
        for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
          if (it->match && !previous_match && !out.empty()) out.back().first = it->b;
          else out.push_back({it->b, it->e});
          previous_match = it->match;
        }
        std::reverse(out.begin(), out.end());
        break;
      }
      case Behavior::contiguous: {
        bool previous_match = false;
        for (const auto& s : segs) {
          if (s.match && previous_match) out.back().second = s.e;
          else out.push_back({s.b, s.e});
          previous_match = s.match;
        }
        break;
      }
    }
    for (const auto& [b, e] : out)
      if (e > b) emit(text.substr(b, e - b));
  }

 private:
  Regex regex_;
  Behavior behavior_;
  bool invert_;
};

// ByteLevel: the byte-to-character mapping itself happens in the BPE model;
// here only the optional prefix space and GPT-2's regex split.
class ByteLevelSplit : public PreTokenizer {
 public:
  ByteLevelSplit(bool add_prefix_space, bool use_regex, const std::string& where) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<RegexSplit>(kGpt2Pattern, Behavior::isolated, false, where);
  }
  void split(std::string_view text, const PieceFn& emit) const override {
    std::string spaced;
    if (add_prefix_space_ && (text.empty() || text.front() != ' ')) {
      spaced = " " + std::string(text);
      text = spaced;
    }
    if (regex_) regex_->split(text, emit);
    else if (!text.empty()) emit(text);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<RegexSplit> regex_;
};

std::string escape_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}


bool flag(const nlohmann::json& j, const char* key, bool fallback, const std::string& path, const std::string& where) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  if (!j.at(key).is_boolean()) throw DataError(where + ": " + path + "." + key + " must be true or false");
  return j.at(key).get<bool>();
}

std::string type_of(const nlohmann::json& j, const std::string& path, const std::string& where) {
  const auto& t = json_member(j, "type", path, where);
  if (!t.is_string()) throw DataError(where + ": " + path + ".type must be a string");
  return t.get<std::string>();
}

void add_pre_tokenizer(TextPipeline& p, const nlohmann::json& j, const std::string& path, const std::string& where,
                       int depth) {
  if (depth > 4) throw DataError(where + ": " + path + ": pre-tokenizer Sequences nest too deeply");
  const std::string type = type_of(j, path, where);
  if (type == "Sequence") {
    const auto& list = json_member(j, "pretokenizers", path, where);
    if (!list.is_array()) throw DataError(where + ": " + path + ".pretokenizers must be a list");
    for (size_t i = 0; i < list.size(); ++i)
      add_pre_tokenizer(p, list[i], path + ".pretokenizers[" + std::to_string(i) + "]", where, depth + 1);
  } else if (type == "ByteLevel") {
    p.steps.push_back(std::make_unique<ByteLevelSplit>(flag(j, "add_prefix_space", true, path, where),
                                                       flag(j, "use_regex", true, path, where), where + ": " + path));
    p.byte_level = true;
  } else if (type == "Split") {
    const auto& pat = json_member(j, "pattern", path, where);
    std::string regex;
    if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string()) regex = pat["Regex"].get<std::string>();
    else if (pat.is_object() && pat.contains("String") && pat["String"].is_string())
      regex = escape_literal(pat["String"].get<std::string>());
    else throw DataError(where + ": " + path + ".pattern must be {\"Regex\": ...} or {\"String\": ...}");
    const auto& b = json_member(j, "behavior", path, where);
    const std::string name = b.is_string() ? b.get<std::string>() : "";
    Behavior behavior;
    if (name == "Isolated") behavior = Behavior::isolated;
    else if (name == "Removed") behavior = Behavior::removed;
    else if (name == "MergedWithPrevious") behavior = Behavior::merged_with_previous;
    else if (name == "MergedWithNext") behavior = Behavior::merged_with_next;
    else if (name == "Contiguous") behavior = Behavior::contiguous;
    else throw DataError(where + ": " + path + ".behavior " + json_excerpt(b) +
                         " is not one of Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous");
    p.steps.push_back(std::make_unique<RegexSplit>(regex, behavior, flag(j, "invert", false, path, where),
                                                   where + ": " + path + ".pattern"));
  } else {
    throw DataError(where + ": " + path + ".type \"" + type +
                    "\" is not supported (keel reads byte-level BPE tokenizers: Split, ByteLevel and Sequence)");
  }
}

void add_normalizer(TextPipeline& p, const nlohmann::json& j, const std::string& path, const std::string& where,
                    int depth) {
  if (j.is_null()) return;
  if (depth > 4) throw DataError(where + ": " + path + ": normalizer Sequences nest too deeply");
  const std::string type = type_of(j, path, where);
  if (type == "Sequence") {
    const auto& list = json_member(j, "normalizers", path, where);
    if (!list.is_array()) throw DataError(where + ": " + path + ".normalizers must be a list");
    for (size_t i = 0; i < list.size(); ++i)
      add_normalizer(p, list[i], path + ".normalizers[" + std::to_string(i) + "]", where, depth + 1);
  } else if (type == "NFC") {
    p.nfc = true;
  } else {
    throw DataError(where + ": " + path + ".type \"" + type + "\" is not supported (keel applies NFC or nothing)");
  }
}

}  // namespace

const nlohmann::json& json_member(const nlohmann::json& j, const char* key, const std::string& path,
                                  const std::string& where) {
  if (!j.is_object() || !j.contains(key))
    throw DataError(where + ": " + (path.empty() ? std::string(key) : path + "." + key) + " is missing");
  return j.at(key);
}

std::string_view TextPipeline::normalize(std::string_view text, std::string& scratch) const {
  if (!nfc) return text;
  bool ascii = true;
  for (char c : text)
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  if (ascii) return text;  // ASCII is its own NFC form
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                    static_cast<utf8proc_ssize_t>(text.size()), &out,
                                    static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) throw DataError(std::string("NFC normalization failed: ") + utf8proc_errmsg(n));
  scratch.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return scratch;
}

void TextPipeline::pre_tokenize(std::string_view text, const PieceFn& emit) const {
  // Each step cuts the pieces of the one before it.
  std::function<void(size_t, std::string_view)> run = [&](size_t k, std::string_view piece) {
    if (k == steps.size()) {
      emit(piece);
      return;
    }
    steps[k]->split(piece, [&](std::string_view sub) { run(k + 1, sub); });
  };
  if (!text.empty()) run(0, text);
}

TextPipeline read_text_pipeline(const nlohmann::json& normalizer, const nlohmann::json& pre_tokenizer,
                                const std::string& where) {
  TextPipeline p;
  add_normalizer(p, normalizer, "normalizer", where, 0);
  if (pre_tokenizer.is_null())
    throw DataError(where + ": pre_tokenizer is null; keel reads byte-level BPE tokenizers (a ByteLevel pre-tokenizer)");
  add_pre_tokenizer(p, pre_tokenizer, "pre_tokenizer", where, 0);
  if (!p.byte_level)
    throw DataError(where + ": pre_tokenizer has no ByteLevel step; keel reads byte-level BPE tokenizers only");
  return p;
}

}  // namespace keel
