// A Hugging Face byte-level BPE tokenizer read from its tokenizer.json
// (GPT-2, Llama 3, Qwen 2/3, OLMo 2), encoding as the `tokenizers` library's
// Tokenizer.encode(text, add_special_tokens=False) does:
//
//   1. added tokens: the text is cut at every occurrence of an added token's
//      content (leftmost, longest first), each giving its own id;
//   2. the normalizer (NFC or none) and the pre-tokenizers (pretokenizer.h)
//      cut the rest into words;
//   3. each word's bytes become GPT-2's byte-level symbols, and BPE applies the
//      merges, lowest rank first and leftmost among equals; with
//      model.ignore_merges (Llama 3) a word that is itself in the vocabulary
//      is one token.
//
// The post-processor (Llama 3's BOS) is not applied: keel puts one EOS
// between documents itself. Special ids are found by name among the added
// tokens: EOS <|endoftext|>, <|end_of_text|>, </s>, <eos>; BOS
// <|begin_of_text|>, <s>, <bos>; PAD <|pad|>, <pad>, <|padding|>.
//
// Refused, with the key path: a model other than BPE, a
// continuing_subword_prefix or end_of_word_suffix, dropout, a vocabulary
// without all 256 byte symbols, a merge of unknown tokens, added tokens with
// lstrip/rstrip/single_word, and normalizers or pre-tokenizers outside
// pretokenizer.h's set.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/pretokenizer.h"

namespace keel {

class BpeTokenizer {
 public:
  // Throws DataError "<where>: <key path> ..." for a file it cannot read exactly.
  BpeTokenizer(const std::string& json_text, const std::string& where);

  // Appends the ids of `text` (valid UTF-8; DataError naming the byte otherwise).
  void encode(std::string_view text, std::vector<int32_t>& out) const;
  // Special added tokens decode to "" (like SentencePiece's control pieces).
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string piece(int32_t id) const;  // the vocabulary's string: "Ġthe", "<|endoftext|>"

  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  int32_t pad_id() const { return pad_; }
  int32_t unk_id() const { return unk_; }
  int64_t merges() const { return static_cast<int64_t>(merges_.size()); }

 private:
  struct Token {
    std::string text;    // as in the file (byte-level symbols, or an added token's content)
    std::string bytes;   // what it decodes to
    bool special = false;
    bool present = false;  // some id in [0, vocab_size) may be unused
  };
  struct Merge {
    int32_t rank, id;
  };
  struct Added {
    std::string content;
    int32_t id;
  };
  struct AddedSet {
    std::vector<Added> tokens;                      // longest first
    std::vector<std::vector<uint32_t>> by_first;    // [first byte] -> indices into tokens, longest first
    void index();
  };

  void load(const nlohmann::json& file);
  void read_model(const nlohmann::json& model);
  void read_added_tokens(const nlohmann::json& added);
  // Cuts text at added tokens of the given set: literal pieces go to `text_fn`, added ids to out.
  template <typename TextFn>
  void split_added(std::string_view text, const AddedSet& set, std::vector<int32_t>& out,
                   TextFn&& text_fn) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  std::string where_;
  size_t id_bound_ = 0;  // vocab entries + added tokens: no id reaches it
  TextPipeline text_;
  std::vector<Token> tokens_;                          // by id
  std::unordered_map<std::string, int32_t> by_bytes_;  // decoded bytes -> id, for byte-level tokens
  int32_t byte_id_[256];                               // the id of each single byte's symbol
  std::unordered_map<uint64_t, Merge> merges_;         // (left id, right id) -> rank, merged id
  bool ignore_merges_ = false;
  AddedSet raw_added_, normalized_added_;  // matched before / after normalization
  int32_t bos_ = -1, eos_ = -1, pad_ = -1, unk_ = -1;

  // Words seen before and their ids: BPE is the costly part and natural text
  // repeats its words. Bounded; each thread has its own tokenizer in prepare.
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

// GPT-2's mapping of the 256 bytes to printable characters (UTF-8 of each).
const std::vector<std::string>& byte_level_alphabet();

}  // namespace keel
