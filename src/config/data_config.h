// data.* keys: where the prepared token shards live and how `keel prepare`
// builds them. Owned by the data pipeline (src/data/); the semantics of each
// key are documented where it is used (see src/data/prepare.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/choice.h"

namespace keel {

class Schema;

enum class TokenizerType { bpe, unigram };  // SentencePiece model types
KEEL_CHOICE(TokenizerType, "bpe", "unigram");

struct DataConfig {
  std::string dir = "runs/data/default";   // prepared shards + manifest + tokenizer
  std::vector<std::string> sources = {"data/corpus.txt.gz"}; // inputs for `keel prepare`
  std::string tokenizer = "";              // existing .model to reuse; empty: train one
  TokenizerType tokenizer_type = TokenizerType::bpe;  // bpe | unigram
  int64_t tokenizer_sample_mb = 16;        // MB of text used to train the tokenizer
  std::string doc_separator = "<|endoftext|>"; // text files: a line equal to this ends a document
  double val_fraction = 0.05;              // documents held out for validation (by hash)
  int64_t shard_tokens = 16777216;         // tokens per shard
  int64_t threads = 0;                     // encoding threads; 0: all cores
  int64_t prefetch = 2;                    // batches prepared ahead on a background thread
  bool verify = true;                      // loader checks every shard's checksum and ids on open
};
void declare_data_keys(Schema& s, DataConfig& d);

}  // namespace keel
