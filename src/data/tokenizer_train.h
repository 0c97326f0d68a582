// Trains keel's SentencePiece tokenizer on a deterministic sample of the
// corpus.
//
// Sample: training-split documents (never held-out ones) chosen by a hash of
// their raw bytes at the rate that yields about data.tokenizer_sample_mb of
// text, read in source order until the budget is met. The rate rests on an
// estimate of the text's size (estimated_text_bytes); when it passes over
// every training document (one document larger than the budget, or a size
// estimate far too high), the documents are taken in order instead, so text
// that exists always reaches the trainer. Sentences are the
// documents' non-empty lines (over-long lines are cut at UTF-8 boundaries).
//
// Training is deterministic: same sample and options, same .model bytes. The
// trainer gets the sentences in a fixed order (shuffle off, no
// input_sentence_size sampling), a fixed random seed, and a fixed thread
// count (the unigram trainer's result depends on how work is split).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/sources.h"

namespace keel {

struct TokenizerTrainOptions {
  std::string type = "bpe";       // bpe | unigram
  int64_t vocab_size = 4096;
  int64_t sample_bytes = int64_t{16} << 20;
  std::string separator;          // data.doc_separator
  double val_fraction = 0.0;      // held-out documents are left out of the sample
};

struct TokenizerSample {
  std::vector<std::string> sentences;
  int64_t bytes = 0;
  int64_t documents = 0;   // documents in the sample
  // What the pass that made it saw, for a message that says why a sample is empty.
  int64_t records_read = 0;  // documents (records) read from the files
  int64_t empty = 0;         // of those looked at: empty after decoding
  int64_t held_out = 0;      // of those looked at: validation documents
  double rate = 1.0;         // the share of documents looked at (hash-sampled)
};

// Throws DataError on unreadable or malformed input.
TokenizerSample sample_for_tokenizer(const std::vector<SourceFile>& files, const TokenizerTrainOptions& options);

// The serialized ModelProto (the content of a .model file). Throws DataError
// when SentencePiece cannot train with these settings (e.g. a vocab size the
// sample cannot support); `what` names the input in that message.
std::string train_tokenizer(const TokenizerSample& sample, const TokenizerTrainOptions& options,
                            const std::string& what);

// Special ids of every tokenizer keel trains.
constexpr int kPadId = 0, kBosId = 1, kEosId = 2, kUnkId = 3;
// 4 special pieces + 256 byte pieces: the least vocab a byte-fallback model needs.
constexpr int64_t kReservedPieces = 260;

}  // namespace keel
