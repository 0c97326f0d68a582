// data.* keys: where the prepared token shards live and how `keel prepare`
// builds them. Owned by the data pipeline (src/data/); the semantics of each
// key are documented where it is used (see src/data/prepare.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/choice.h"

namespace keel {

// How data/mixture.h mixes sources, which data.sources' weights are checked
// against here (the config cannot hold a mixture the loader refuses).
constexpr int64_t kMixtureBlock = 4096;
// A weight below this share could give a source a negative count in a block.
constexpr double kMinMixtureShare = 2.0 / kMixtureBlock;
// Weights are relative (3 and 1 mean 75% and 25%); bounded so that their sum
// stays finite however many sources there are (1e308 + 1e308 is infinite,
// and every share would be 0).
constexpr double kMaxMixtureWeight = 1e15;

class Schema;
struct ConfigErrors;

enum class TokenizerType { bpe, unigram };  // SentencePiece model types
KEEL_CHOICE(TokenizerType, "bpe", "unigram");
// Where training windows start (data/loader.h): anywhere on the grid, at a
// document's opening EOS, or at its first token after the EOS.
enum class WindowAlign { none, eos, bos };
KEEL_CHOICE(WindowAlign, "none", "eos", "bos");
// data.reset_positions: auto follows data.document_mask.
enum class PositionReset { automatic, on, off };
KEEL_CHOICE(PositionReset, "auto", "true", "false");

struct DataConfig {
  std::string dir = "runs/data/default";   // prepared shards + manifest + tokenizer
  std::vector<std::string> sources = {"data/corpus.txt.gz"}; // inputs for `keel prepare`
  // A mixture: one weight per source ({path, weight} entries), empty for
  // none. Applied when training draws sequences (data/mixture.h), not when
  // preparing, so changing weights re-tokenizes nothing.
  std::vector<double> source_weights;
  std::string tokenizer = "";              // existing .model to reuse; empty: train one
  TokenizerType tokenizer_type = TokenizerType::bpe;  // bpe | unigram
  int64_t tokenizer_sample_mb = 16;        // MB of text used to train the tokenizer
  std::string doc_separator = "<|endoftext|>"; // text files: a line equal to this ends a document
  std::string text_field = "text";         // JSON Lines: the string field that holds a document
  double val_fraction = 0.05;              // documents held out for validation (by hash)
  int64_t shard_tokens = 16777216;         // tokens per shard
  int64_t threads = 0;                     // encoding threads; 0: all cores
  int64_t prefetch = 2;                    // batches prepared ahead on a background thread
  bool verify = true;                      // loader checks every shard's checksum and ids on open
  std::vector<std::string> skip_batches;   // "AFTER:COUNT": batches skipped after a step (a rewound run's replay)
  bool document_mask = false;              // attend only within a document (model/documents.h)
  PositionReset reset_positions = PositionReset::automatic;  // RoPE positions restart per document; auto = with the mask
  WindowAlign align = WindowAlign::none;   // training windows start at a document boundary (data/loader.h)
  bool resets_positions() const {
    return reset_positions == PositionReset::automatic ? document_mask : reset_positions == PositionReset::on;
  }
};
void declare_data_keys(Schema& s, DataConfig& d);

// A stretch of training batches skipped: from the step after `after_step` on,
// the data order moves on by `batches` (monitor.on_spike: rewind records one
// per rewind; data.skip_batches gives them from the start).
struct SkipRange {
  int64_t after_step = 0;
  int64_t batches = 0;
  int64_t spike_step = 0;  // the spike that caused it; 0 when given in the config
};
// data.skip_batches' "AFTER:COUNT" entries (AFTER >= 0, COUNT >= 1); each
// malformed one is added to `errors`, naming its index.
// data.sources with their weights as BatchLoader takes a mixture: empty
// when no entry has a weight.
std::vector<std::pair<std::string, double>> data_mixture(const DataConfig& d);

std::vector<SkipRange> parse_skip_batches(const std::vector<std::string>& entries, ConfigErrors* errors);

}  // namespace keel
