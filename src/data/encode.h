// Encodes the corpus into token shards, in parallel, with output that does
// not depend on the number of threads.
//
// One reader thread cuts the source files into chunks of documents; worker
// threads decode (JSON, UTF-8 check), split (split.h) and tokenize them; the
// calling thread writes the chunks' tokens in chunk order to the train and
// val shard streams, appending EOS after every document. The first error in
// stream order wins, so even the error reported is deterministic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/manifest.h"
#include "data/sources.h"

namespace keel {

struct EncodeOptions {
  std::string separator;     // data.doc_separator
  double val_fraction = 0;
  int64_t shard_tokens = int64_t{1} << 24;
  int64_t threads = 1;       // tokenizing workers
  bool progress = true;
};

struct EncodeResult {
  SplitStats train, val;
  std::vector<SourceStats> sources;  // one per input file, in order
  std::vector<ShardEntry> shards;
  double seconds = 0;
};

// Writes out_dir/{train,val}_NNNNNN.bin. Throws DataError (bad input, I/O).
EncodeResult encode_corpus(const std::vector<SourceFile>& files, const std::string& tokenizer_proto,
                           const std::string& out_dir, const EncodeOptions& options);

}  // namespace keel
