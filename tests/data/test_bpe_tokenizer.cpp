// The byte-level BPE tokenizer read from tokenizer.json (bpe_tokenizer.h,
// pretokenizer.h) on files built here: merge order, ignore_merges, added
// tokens, NFC, the pre-tokenizer's cuts, long words, and errors that name
// the key. Parity with the `tokenizers` package on real-sized files is
// tests/python/test_bpe_parity.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/bpe_tokenizer.h"
#include "data/pretokenizer.h"
#include "data/tokenizer.h"
#include "util/error.h"

using namespace keel;
using nlohmann::json;

namespace {

// A tokenizer.json with the 256 byte symbols at ids 0..255 (byte b at id b),
// then one id per merge result in order, then the added tokens.
struct Spec {
  std::vector<std::pair<std::string, std::string>> merges;  // in byte-level symbols ("Ġ" is a space)
  std::vector<std::string> extra_vocab;                     // tokens no merge makes
  std::vector<std::string> added = {"<|endoftext|>"};
  json normalizer = nullptr;
  json pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  bool ignore_merges = false;
};

json make_json(const Spec& s) {
  json vocab = json::object();
  const auto& alphabet = byte_level_alphabet();
  for (int b = 0; b < 256; ++b) vocab[alphabet[b]] = b;
  int next = 256;
  json merges = json::array();
  for (const auto& [a, b] : s.merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    merges.push_back(json::array({a, b}));
  }
  for (const auto& t : s.extra_vocab) vocab[t] = next++;
  json added = json::array();
  for (const auto& t : s.added)
    added.push_back({{"id", next++}, {"content", t}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", s.normalizer},
          {"pre_tokenizer", s.pre_tokenizer},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"ignore_merges", s.ignore_merges},
            {"vocab", vocab}, {"merges", merges}}}};
}

std::vector<int32_t> encode(const BpeTokenizer& t, const std::string& text) {
  std::vector<int32_t> out;
  t.encode(text, out);
  return out;
}

std::vector<std::string> pieces(const BpeTokenizer& t, const std::string& text) {
  std::vector<std::string> out;
  for (int32_t id : encode(t, text)) out.push_back(t.piece(id));
  return out;
}

std::string load_error(const json& j) {
  try {
    BpeTokenizer t(j.dump(), "tok.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

using Pieces = std::vector<std::string>;

}  // namespace

TEST(BpeTokenizer, MergesApplyLowestRankFirstAndLeftmostAmongEquals) {
  Spec s;
  s.merges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"a", "a"}, {"b", "c"}, {"a", "b"}};
  BpeTokenizer t(make_json(s).dump(), "tok.json");
  EXPECT_EQ(pieces(t, "hello"), (Pieces{"hello"}));
  EXPECT_EQ(pieces(t, "help"), (Pieces{"he", "l", "p"}));
  EXPECT_EQ(pieces(t, "aaa"), (Pieces{"aa", "a"}));      // leftmost of two equal candidates
  EXPECT_EQ(pieces(t, "aaaa"), (Pieces{"aa", "aa"}));
  // (b, c) ranks before (a, b): "abc" -> a + bc, although "ab" is a token.
  EXPECT_EQ(pieces(t, "abc"), (Pieces{"a", "bc"}));
  EXPECT_EQ(t.merges(), 7);
  EXPECT_EQ(t.decode(encode(t, "hello help aaa abc")), "hello help aaa abc");
}

TEST(BpeTokenizer, PreTokenizerCutsWordsSoMergesNeverCrossThem) {
  Spec s;
  s.merges = {{"o", "Ġ"}, {"Ġ", "w"}, {"Ġw", "o"}};  // "oĠ" would join two words if cuts were ignored
  BpeTokenizer t(make_json(s).dump(), "tok.json");
  // GPT-2's regex cuts "o wo" into "o" and " wo": (o, Ġ) never applies.
  EXPECT_EQ(pieces(t, "o wo"), (Pieces{"o", "Ġwo"}));
  // A run of spaces before a word: the last space joins the word (\s+(?!\S)).
  EXPECT_EQ(pieces(t, "o   wo"), (Pieces{"o", "Ġ", "Ġ", "Ġwo"}));
}

TEST(BpeTokenizer, IgnoreMergesTakesAWordThatIsInTheVocabularyWhole) {
  Spec s;
  s.merges = {{"a", "b"}};
  s.extra_vocab = {"xyz"};  // no merge makes it
  BpeTokenizer plain(make_json(s).dump(), "tok.json");
  EXPECT_EQ(pieces(plain, "xyz"), (Pieces{"x", "y", "z"}));
  s.ignore_merges = true;
  BpeTokenizer llama(make_json(s).dump(), "tok.json");
  EXPECT_EQ(pieces(llama, "xyz"), (Pieces{"xyz"}));
  EXPECT_EQ(pieces(llama, "xyzw"), (Pieces{"x", "y", "z", "w"}));
}

TEST(BpeTokenizer, AddedTokensAreCutOutOfTheTextAndDecodeToNothing) {
  Spec s;
  s.merges = {{"a", "b"}};
  s.added = {"<|endoftext|>", "<|end|>", "<|end|>x"};
  BpeTokenizer t(make_json(s).dump(), "tok.json");
  const int32_t eot = 257, end = 258, endx = 259;
  EXPECT_EQ(t.eos_id(), eot);
  EXPECT_EQ(encode(t, "ab<|endoftext|>ab"), (std::vector<int32_t>{256, eot, 256}));
  EXPECT_EQ(encode(t, "<|end|>x<|end|>"), (std::vector<int32_t>{endx, end}));  // longest at a position
  EXPECT_EQ(t.decode(encode(t, "ab<|endoftext|>ab")), "abab");
  EXPECT_EQ(t.piece(eot), "<|endoftext|>");
  for (int32_t id : encode(t, "<|endoftext")) EXPECT_LT(id, 256);  // a broken one is plain text
}

TEST(BpeTokenizer, NfcNormalizerComposesBeforeMerging) {
  Spec s;
  s.normalizer = {{"type", "NFC"}};
  BpeTokenizer t(make_json(s).dump(), "tok.json");
  EXPECT_EQ(encode(t, "e\u0301"), encode(t, "\u00e9"));
  EXPECT_EQ(encode(t, "e\u0301").size(), 2u);  // é is two bytes in UTF-8
  Spec raw;
  BpeTokenizer u(make_json(raw).dump(), "tok.json");
  EXPECT_EQ(encode(u, "e\u0301").size(), 3u);
}

TEST(BpeTokenizer, SplitWithTheLlama3PatternAndByteLevelWithoutRegex) {
  Spec s;
  s.pre_tokenizer = {{"type", "Sequence"},
                     {"pretokenizers",
                      {{{"type", "Split"},
                        {"pattern", {{"Regex", R"(\p{N}{1,3}|\s+|[^\s\p{N}]+)"}}},
                        {"behavior", "Isolated"},
                        {"invert", false}},
                       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  s.merges = {{"1", "2"}, {"12", "3"}, {"3", "4"}};
  BpeTokenizer t(make_json(s).dump(), "tok.json");
  EXPECT_EQ(pieces(t, "1234"), (Pieces{"123", "4"}));  // digits cut in threes before merging
  EXPECT_EQ(pieces(t, "34"), (Pieces{"34"}));
}

TEST(BpeTokenizer, WhitespaceIncludesNextLineAsInOniguruma) {
  Regex r(R"(\s+)", "test");
  std::vector<std::pair<size_t, size_t>> hits;
  r.for_each_match("a\u0085\u0085b", [&](size_t b, size_t e) { hits.push_back({b, e}); });
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0], (std::pair<size_t, size_t>{1, 5}));
  EXPECT_EQ(translate_pattern(R"([^\s\p{L}]+|\S)"), R"([^\s\x{85}\p{L}]+|[^\s\x{85}])");
  EXPECT_EQ(translate_pattern(R"([]\s]|\\s)"), R"([]\s\x{85}]|\\s)");
}

TEST(BpeTokenizer, APathologicalPatternIsAnErrorNotAHang) {
  // A tokenizer.json may carry any regex; (a+)+$ backtracks exponentially on
  // a run of a's that does not end the text. PCRE2's match limit stops it.
  Regex r("(a+)+$", "tok.json: pre_tokenizer.pattern");
  try {
    r.for_each_match(std::string(40, 'a') + "!", [](size_t, size_t) {});
    ADD_FAILURE() << "the match was expected to hit the limit";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("tok.json: pre_tokenizer.pattern: regex matching failed at byte 0"),
              std::string::npos)
        << e.what();
  }
}

TEST(BpeTokenizer, AWordOfAMillionBytesMergesInLinearithmicTime) {
  Spec s;
  s.merges = {{"a", "a"}, {"aa", "aa"}};
  BpeTokenizer t(make_json(s).dump(), "tok.json");
  const std::string word(1 << 20, 'a');
  auto ids = encode(t, word);
  ASSERT_EQ(ids.size(), size_t{1} << 18);
  EXPECT_EQ(t.piece(ids[0]), "aaaa");
  EXPECT_EQ(t.decode(ids), word);
}

TEST(BpeTokenizer, TokenizerFacadeKeepsTheFileAndFindsTheSpecialIds) {
  Spec s;
  s.added = {"<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"};
  const std::string text = make_json(s).dump(1);
  Tokenizer t = Tokenizer::from_serialized(text, "tok.json");
  EXPECT_FALSE(t.is_sentencepiece());
  EXPECT_STREQ(t.file_name(), "tokenizer.json");
  EXPECT_EQ(t.serialized(), text);  // byte for byte: export-hf writes it back unchanged
  EXPECT_EQ(t.bos_id(), 256);
  EXPECT_EQ(t.eos_id(), 257);
  EXPECT_EQ(t.pad_id(), 258);
  EXPECT_EQ(t.vocab_size(), 259);
  EXPECT_FALSE(t.byte_fallback());
  EXPECT_EQ(t.decode(t.encode("héllo 😀")), "héllo 😀");
}

TEST(BpeTokenizer, BadFilesNameTheKey) {
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos ? ::testing::AssertionSuccess()
                                                : ::testing::AssertionFailure() << "'" << msg << "' lacks '" << part << "'";
  };
  Spec s;
  s.merges = {{"a", "b"}};
  json j = make_json(s);
  {
    json k = j;
    k["model"].erase("vocab");
    EXPECT_TRUE(has(load_error(k), "tok.json: model.vocab is missing"));
  }
  {
    json k = j;
    k["model"]["merges"].push_back(json::array({"q", "nope"}));
    EXPECT_TRUE(has(load_error(k), "model.merges[1] names \"nope\""));
  }
  {
    json k = j;
    k["model"]["merges"][0] = "ab";
    EXPECT_TRUE(has(load_error(k), "model.merges[0] = \"ab\" is not \"left right\""));
  }
  {
    json k = j;
    k["model"]["vocab"].erase(byte_level_alphabet()['A']);
    EXPECT_TRUE(has(load_error(k), "lacks the byte-level symbol \"A\" (byte 0x41)"));
  }
  {
    json k = j;
    k["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "Metaspace"}}}}};
    EXPECT_TRUE(has(load_error(k), "pre_tokenizer.pretokenizers[1].type \"Metaspace\" is not supported"));
  }
  {
    json k = j;
    k["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\d+"}}}, {"behavior", "Isolated"}};
    EXPECT_TRUE(has(load_error(k), "has no ByteLevel step"));
  }
  {
    json k = j;
    k["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}},
                            {{"type", "ByteLevel"}}}}};
    EXPECT_TRUE(has(load_error(k), "pre_tokenizer.pretokenizers[0].pattern: regex \"(unclosed\" does not compile"));
  }
  {
    json k = j;
    k["normalizer"] = {{"type", "NFKC"}};
    EXPECT_TRUE(has(load_error(k), "normalizer.type \"NFKC\" is not supported"));
  }
  {
    json k = j;
    k["added_tokens"][0]["lstrip"] = true;
    EXPECT_TRUE(has(load_error(k), "added_tokens[0].lstrip is true"));
  }
  {
    json k = j;
    k["model"]["type"] = "WordPiece";
    EXPECT_TRUE(has(load_error(k), "model.type is \"WordPiece\""));
  }
  {
    json k = j;
    k["added_tokens"][0]["id"] = 300;  // the file has 258 entries
    EXPECT_TRUE(has(load_error(k), "added_tokens[0].id = 300 is beyond the 258 tokens the file has"));
  }
  {
    json k = j;  // an added token that is also in the vocabulary, and one after a gap
    k["added_tokens"][0]["id"] = 258;
    k["added_tokens"].push_back({{"id", 256}, {"content", "ab"}, {"special", false}});
    EXPECT_TRUE(has(load_error(k), "id 257 is neither in model.vocab nor in added_tokens"));
  }
  EXPECT_TRUE(has(load_error(json::array()), "not a tokenizer.json"));
  EXPECT_TRUE(has(load_error(json{{"version", "1.0"}}), "tok.json: model is missing"));
  BpeTokenizer t(j.dump(), "tok.json");
  std::vector<int32_t> out;
  try {
    t.encode(std::string("ab\xff"), out);
    ADD_FAILURE() << "invalid UTF-8 was encoded";
  } catch (const DataError& e) {
    EXPECT_TRUE(has(e.what(), "not valid UTF-8 (byte 2)"));
  }
}
