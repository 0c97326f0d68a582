#include "data/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <queue>

#include "util/error.h"
#include "util/json.h"
#include "util/utf8.h"

namespace keel {

namespace {

constexpr size_t kMaxVocab = size_t{1} << 22;   // 4M tokens: far above any released tokenizer (Gemma: 262k)
constexpr size_t kCachedWordBytes = 64;          // longer words are merged every time
constexpr size_t kMaxCachedWords = size_t{1} << 19;

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Code point -> byte for the 256 symbols of byte_level_alphabet() (all below U+0144).
const std::array<int16_t, 512>& symbol_to_byte() {
  static const std::array<int16_t, 512> table = [] {
    std::array<int16_t, 512> t;
    t.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[printable ? b : 256 + n++] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return table;
}

// The bytes a byte-level token string stands for, or false when it holds a
// character outside the alphabet (an added token's content, say).
bool symbols_to_bytes(const std::string& s, std::string& out) {
  out.clear();
  const auto& table = symbol_to_byte();
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < s.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return false;  // three-byte characters are all above U+07FF: not symbols
    }
    if (cp >= table.size() || table[cp] < 0) return false;
    out += static_cast<char>(table[cp]);
  }
  return true;
}

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }


bool null_or_empty(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return true;
  return j.at(key).is_string() && j.at(key).get<std::string>().empty();
}

}  // namespace

const std::vector<std::string>& byte_level_alphabet() {
  static const std::vector<std::string> alphabet = [] {
    std::vector<std::string> a(256);
    const auto& table = symbol_to_byte();
    for (uint32_t cp = 0; cp < table.size(); ++cp)
      if (table[cp] >= 0) append_utf8(a[table[cp]], cp);
    return a;
  }();
  return alphabet;
}

BpeTokenizer::BpeTokenizer(const std::string& json_text, const std::string& where) : where_(where) {
  try {
    load(parse_json_bounded(json_text, where));
  } catch (const nlohmann::json::exception& e) {  // a value of a type the checks below did not expect
    throw DataError(where + ": unexpected content: " + std::string(e.what()).substr(0, 200));
  }
}

void BpeTokenizer::load(const nlohmann::json& j) {
  const std::string& where = where_;
  if (!j.is_object()) throw DataError(where + ": not a tokenizer.json (the top level is not an object)");
  // Ids are dense, so none can reach the number of entries: checked before
  // anything is sized by an id from the file.
  const auto& model = json_member(j, "model", "", where);
  id_bound_ = (model.is_object() && model.contains("vocab") ? model["vocab"].size() : 0) +
              (j.contains("added_tokens") && j["added_tokens"].is_array() ? j["added_tokens"].size() : 0);
  read_model(model);
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) read_added_tokens(j["added_tokens"]);
  text_ = read_text_pipeline(j.value("normalizer", nlohmann::json()), j.value("pre_tokenizer", nlohmann::json()), where);
  for (size_t id = 0; id < tokens_.size(); ++id)
    if (!tokens_[id].present)
      throw DataError(where + ": id " + std::to_string(id) + " is neither in model.vocab nor in added_tokens (ids must be 0.." +
                      std::to_string(tokens_.size() - 1) + " without gaps)");
  auto find = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      for (const auto* set : {&raw_added_, &normalized_added_})
        for (const auto& a : set->tokens)
          if (a.content == n) return a.id;
    return int32_t{-1};
  };
  eos_ = find({"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"});
  bos_ = find({"<|begin_of_text|>", "<s>", "<bos>"});
  pad_ = find({"<|pad|>", "<pad>", "<|padding|>"});
}

void BpeTokenizer::read_model(const nlohmann::json& m) {
  const std::string& w = where_;
  if (!m.is_object()) throw DataError(w + ": model must be an object");
  if (m.contains("type") && m["type"] != "BPE")
    throw DataError(w + ": model.type is " + json_excerpt(m["type"]) + "; keel reads BPE tokenizers");
  if (!null_or_empty(m, "continuing_subword_prefix") || !null_or_empty(m, "end_of_word_suffix"))
    throw DataError(w + ": model.continuing_subword_prefix / end_of_word_suffix are set; byte-level BPE has neither");
  if (m.contains("dropout") && !m["dropout"].is_null() && !(m["dropout"].is_number() && m["dropout"].get<double>() == 0))
    throw DataError(w + ": model.dropout is set; keel encodes deterministically");
  if (m.contains("ignore_merges")) {
    if (!m["ignore_merges"].is_boolean()) throw DataError(w + ": model.ignore_merges must be true or false");
    ignore_merges_ = m["ignore_merges"].get<bool>();
  }
  const auto& vocab = json_member(m, "vocab", "model", w);
  if (!vocab.is_object()) throw DataError(w + ": model.vocab must be an object of token -> id");
  if (vocab.size() > kMaxVocab) throw DataError(w + ": model.vocab has more than " + std::to_string(kMaxVocab) + " tokens");
  std::string bytes;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto& v = it.value();
    if (!v.is_number_integer() || json_int<int64_t>(v) < 0 || json_int<int64_t>(v) >= int64_t(kMaxVocab))
      throw DataError(w + ": model.vocab[" + json_excerpt(nlohmann::json(it.key()), 60) + "] = " + json_excerpt(v) +
                      " is not an id in [0, " + std::to_string(kMaxVocab) + ")");
    const auto id = static_cast<size_t>(json_int<int64_t>(v));
    if (id >= id_bound_)
      throw DataError(w + ": model.vocab[" + json_excerpt(nlohmann::json(it.key()), 60) + "] = " + std::to_string(id) +
                      " is beyond the " + std::to_string(id_bound_) + " tokens the file has (ids are 0..n-1)");
    if (id >= tokens_.size()) tokens_.resize(id + 1);
    if (tokens_[id].present)
      throw DataError(w + ": model.vocab gives id " + std::to_string(id) + " to two tokens");
    tokens_[id] = {it.key(), "", false, true};
    if (symbols_to_bytes(it.key(), bytes)) {
      tokens_[id].bytes = bytes;
      by_bytes_.emplace(bytes, static_cast<int32_t>(id));
    } else {
      tokens_[id].bytes = it.key();
    }
  }
  for (int b = 0; b < 256; ++b) {
    auto it = by_bytes_.find(std::string(1, static_cast<char>(b)));
    if (it == by_bytes_.end())
      throw DataError(w + ": model.vocab lacks the byte-level symbol \"" + byte_level_alphabet()[b] + "\" (byte 0x" +
                      "0123456789abcdef"[b >> 4] + "0123456789abcdef"[b & 15] +
                      "); a byte-level BPE vocabulary holds all 256, so that any text can be encoded");
    byte_id_[b] = it->second;
  }
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = vocab.find(m["unk_token"].get<std::string>());
    if (it != vocab.end()) unk_ = it->get<int32_t>();
  }
  const auto& merges = json_member(m, "merges", "model", w);
  if (!merges.is_array()) throw DataError(w + ": model.merges must be a list");
  merges_.reserve(merges.size());
  auto id_of = [&](const std::string& s, size_t i) {
    auto it = vocab.find(s);
    if (it == vocab.end())
      throw DataError(w + ": model.merges[" + std::to_string(i) + "] names " + json_excerpt(nlohmann::json(s), 60) +
                      ", which is not in model.vocab");
    return it->get<int32_t>();
  };
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& e = merges[i];
    std::string a, b;
    if (e.is_string()) {  // "left right" (tokenizers before 0.20)
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        throw DataError(w + ": model.merges[" + std::to_string(i) + "] = " + json_excerpt(e) +
                        " is not \"left right\"");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      throw DataError(w + ": model.merges[" + std::to_string(i) + "] = " + json_excerpt(e) +
                      " is neither \"left right\" nor [left, right]");
    }
    const int32_t left = id_of(a, i), right = id_of(b, i), merged = id_of(a + b, i);
    // A pair listed twice keeps its first (lowest) rank, as in `tokenizers`.
    merges_.emplace(pair_key(left, right), Merge{static_cast<int32_t>(i), merged});
  }
}

void BpeTokenizer::read_added_tokens(const nlohmann::json& added) {
  const std::string& w = where_;
  if (!added.is_array()) throw DataError(w + ": added_tokens must be a list");
  for (size_t i = 0; i < added.size(); ++i) {
    const auto& t = added[i];
    const std::string path = "added_tokens[" + std::to_string(i) + "]";
    const auto& id = json_member(t, "id", path, w);
    const auto& content = json_member(t, "content", path, w);
    if (!id.is_number_integer() || json_int<int64_t>(id) < 0 || json_int<int64_t>(id) >= int64_t(kMaxVocab))
      throw DataError(w + ": " + path + ".id = " + json_excerpt(id) + " is not an id");
    if (!content.is_string() || content.get<std::string>().empty())
      throw DataError(w + ": " + path + ".content must be a non-empty string");
    for (const char* flag : {"lstrip", "rstrip", "single_word"})
      if (t.contains(flag) && t[flag] == true)
        throw DataError(w + ": " + path + "." + flag + " is true; keel matches added tokens exactly as written");
    const auto n = static_cast<size_t>(json_int<int64_t>(id));
    if (n >= id_bound_)
      throw DataError(w + ": " + path + ".id = " + std::to_string(n) + " is beyond the " + std::to_string(id_bound_) +
                      " tokens the file has (ids are 0..n-1)");
    if (n >= tokens_.size()) tokens_.resize(n + 1);
    const std::string text = content.get<std::string>();
    if (tokens_[n].present && tokens_[n].text != text)
      throw DataError(w + ": " + path + " gives id " + std::to_string(n) + " to " + json_excerpt(content, 60) +
                      ", which model.vocab gives to " + json_excerpt(nlohmann::json(tokens_[n].text), 60));
    for (const char* flag : {"special", "normalized"})
      if (t.contains(flag) && !t[flag].is_boolean()) throw DataError(w + ": " + path + "." + flag + " must be true or false");
    const bool special = t.value("special", false);
    tokens_[n].text = text;
    tokens_[n].bytes = text;
    tokens_[n].special = special;
    tokens_[n].present = true;
    // `tokenizers` matches normalized added tokens in the normalized text.
    (t.value("normalized", !special) ? normalized_added_ : raw_added_).tokens.push_back({text, static_cast<int32_t>(n)});
  }
  raw_added_.index();
  normalized_added_.index();
}

void BpeTokenizer::AddedSet::index() {
  // Longest first, so that at a given position the first hit is the longest.
  std::stable_sort(tokens.begin(), tokens.end(),
                   [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });
  by_first.assign(tokens.empty() ? 0 : 256, {});
  for (size_t i = 0; i < tokens.size(); ++i)
    by_first[static_cast<unsigned char>(tokens[i].content[0])].push_back(static_cast<uint32_t>(i));
}

template <typename TextFn>
void BpeTokenizer::split_added(std::string_view text, const AddedSet& set, std::vector<int32_t>& out,
                               TextFn&& text_fn) const {
  if (set.tokens.empty()) {
    text_fn(text);
    return;
  }
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    const Added* hit = nullptr;
    for (uint32_t k : set.by_first[static_cast<unsigned char>(text[i])])
      if (text.compare(i, set.tokens[k].content.size(), set.tokens[k].content) == 0) {
        hit = &set.tokens[k];
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    if (i > start) text_fn(text.substr(start, i - start));
    out.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  if (start < text.size()) text_fn(text.substr(start));
}

void BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  const size_t bad = first_invalid_utf8(text);
  if (bad != std::string_view::npos)
    throw DataError(where_ + ": cannot encode text that is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  std::string scratch;
  split_added(text, raw_added_, out, [&](std::string_view part) {
    std::string_view normalized = text_.normalize(part, scratch);
    split_added(normalized, normalized_added_, out, [&](std::string_view rest) {
      text_.pre_tokenize(rest, [&](std::string_view word) { encode_word(word, out); });
    });
  });
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {  // a single byte is its own symbol, merged or not
    out.push_back(byte_id_[static_cast<unsigned char>(word[0])]);
    return;
  }
  std::string key(word);  // one copy serves the vocabulary lookup and the cache
  if (ignore_merges_) {
    auto it = by_bytes_.find(key);
    if (it != by_bytes_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > kCachedWordBytes) {
    merge_word(word, out);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= kMaxCachedWords) cache_.clear();
  cache_.emplace(std::move(key), std::move(ids));
}

// BPE over one word: symbols in a linked list, candidate merges in a heap by
// (rank, position), so a long word costs O(n log n), not O(n^2). A popped
// candidate whose symbols have changed since it was pushed is skipped; this is
// `tokenizers`' Word::merge_all.
void BpeTokenizer::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  const int n = static_cast<int>(word.size());
  struct Symbol {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> sym(n);
  for (int i = 0; i < n; ++i) sym[i] = {byte_id_[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1, true};
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto consider = [&](int left) {
    if (left < 0 || sym[left].next < 0) return;
    auto it = merges_.find(pair_key(sym[left].id, sym[sym[left].next].id));
    if (it != merges_.end()) heap.push({it->second.rank, left, it->second.id});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& left = sym[c.pos];
    if (!left.alive || left.next < 0) continue;
    auto it = merges_.find(pair_key(left.id, sym[left.next].id));
    if (it == merges_.end() || it->second.id != c.id) continue;  // stale
    Symbol& right = sym[left.next];
    left.id = c.id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) sym[left.next].prev = c.pos;
    consider(left.prev);
    consider(c.pos);
  }
  for (int i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= static_cast<int32_t>(tokens_.size()))
      throw DataError("tokenizer " + where_ + ": cannot decode id " + std::to_string(id) + " (vocab size " +
                      std::to_string(tokens_.size()) + ")");
    if (!tokens_[id].special) out += tokens_[id].bytes;
  }
  return out;
}

std::string BpeTokenizer::piece(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(tokens_.size()))
    throw DataError("tokenizer " + where_ + ": no piece with id " + std::to_string(id));
  return tokens_[id].text;
}

}  // namespace keel
