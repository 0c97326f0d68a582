// data.* keys: where the prepared token shards live and how `keel prepare`
// builds them. Owned by the data pipeline (src/data/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

class Schema;

struct DataConfig {
  std::string dir = "runs/data/default";   // prepared shards + manifest + tokenizer
  std::vector<std::string> sources = {"data/corpus.txt.gz"}; // inputs for `keel prepare`
  std::string tokenizer = "";              // existing .model to reuse; empty: train one
  std::string tokenizer_type = "bpe";      // bpe | unigram
  std::string doc_separator = "";          // text files: split documents on this line
  double val_fraction = 0.02;              // documents held out for validation (by hash)
  int64_t tokenizer_sample_mb = 16;        // MB of text used to train the tokenizer
  int64_t shard_tokens = 16777216;         // tokens per shard
  int64_t prefetch = 2;                    // batches prepared ahead on a background thread
};
void declare_data_keys(Schema& s, DataConfig& d);

}  // namespace keel
