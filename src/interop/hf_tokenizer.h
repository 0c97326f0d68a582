// keel's SentencePiece tokenizer as Hugging Face `tokenizers` / transformers
// files: tokenizer.json (loaded by AutoTokenizer as a fast tokenizer, no
// conversion, no custom code) and tokenizer_config.json.
//
// Why not just tokenizer.model: transformers builds a fast tokenizer from a
// SentencePiece model with a per-class converter (LlamaConverter), which
// hard-codes Llama's special-token layout (<unk>=0, <s>=1, </s>=2) and a
// dummy-prefix normalizer; keel's models have <pad>=0, <s>=1, </s>=2, <unk>=3
// and no dummy prefix, so the converted tokenizer gives other ids. Writing
// tokenizer.json directly describes the model exactly:
//   normalizer  Replace(" " -> "▁") (SentencePiece's whitespace escaping), preceded
//               by Prepend("▁") when the model adds a dummy prefix
//   model       BPE with byte fallback: the vocabulary by id, and merges
//               (left, right) for every split of a piece into two pieces,
//               ranked by the merged piece's id (SentencePiece BPE merges the
//               adjacent pair whose result scores highest; its scores are
//               -id), as the `tokenizers` SentencePiece extractor does; or
//               Unigram with the pieces' scores
//   specials    control and unknown pieces as special added tokens
//   decoder     Replace("▁" -> " "), ByteFallback, Fuse (and Strip of the dummy prefix)
// Normalization rules other than identity (a precompiled NFKC map) and
// remove_extra_whitespaces are refused (keel never trains them).
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace keel {

// The parts of a serialized SentencePiece ModelProto that the conversion needs,
// read with a minimal protobuf wire-format parser (the Debian package ships
// no sentencepiece_model.pb.h). Field numbers from sentencepiece_model.proto.
struct SpmPiece {
  enum Type { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };
  std::string piece;
  float score = 0;
  int type = normal;
};

struct SpmModel {
  enum ModelType { unigram = 1, bpe = 2, word = 3, character = 4 };
  std::vector<SpmPiece> pieces;
  int model_type = unigram;              // proto2 default
  std::string normalizer_name;
  bool has_precompiled_charsmap = false;
  bool add_dummy_prefix = true;          // proto2 defaults
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

// Throws InteropError naming `what` when the bytes are not a ModelProto.
SpmModel parse_spm_model(const std::string& proto, const std::string& what);

// tokenizer.json. Throws InteropError for what it cannot express.
nlohmann::ordered_json hf_tokenizer_json(const SpmModel& model, const std::string& what);

// tokenizer_config.json: the generic fast-tokenizer class and the special
// tokens; no BOS/EOS added (keel's encode adds none).
nlohmann::ordered_json hf_tokenizer_config_json(const SpmModel& model, int64_t bos, int64_t eos, int64_t pad,
                                                int64_t unk, int64_t model_max_length);
nlohmann::ordered_json hf_special_tokens_map_json(const SpmModel& model, int64_t bos, int64_t eos, int64_t pad,
                                                  int64_t unk);

// The same for any tokenizer (a reused tokenizer.json, whose file is exported
// unchanged): token_of(id) names the special tokens. The SpmModel overloads
// call these.
using TokenOf = std::function<std::string(int64_t)>;
nlohmann::ordered_json hf_tokenizer_config_json(const TokenOf& token_of, int64_t bos, int64_t eos, int64_t pad,
                                                int64_t unk, int64_t model_max_length);
nlohmann::ordered_json hf_special_tokens_map_json(const TokenOf& token_of, int64_t bos, int64_t eos, int64_t pad,
                                                  int64_t unk);

}  // namespace keel
