#include "data/tokenizer_train.h"

#include <sentencepiece_trainer.h>

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "data/corpus_reader.h"
#include "data/split.h"
#include "util/error.h"
#include "util/hashing.h"
#include "util/stop_signal.h"

namespace keel {

namespace {

constexpr size_t kMaxSentenceBytes = 8192;  // passed to the trainer as max_sentence_length
constexpr int kTrainerThreads = 4;           // fixed: see the header
constexpr unsigned kTrainerSeed = 20240611;
constexpr uint64_t kSampleHashSeed = 0x6b65656c73616d70ULL;  // independent of the split hash

// Appends `line` as one or more sentences of at most kMaxSentenceBytes,
// cutting at the last space (else any UTF-8 boundary) before the limit.
void add_sentences(std::string_view line, TokenizerSample& out) {
  while (!line.empty()) {
    size_t n = line.size();
    if (n > kMaxSentenceBytes) {
      n = kMaxSentenceBytes;
      size_t space = line.rfind(' ', n - 1);
      if (space != std::string_view::npos && space > n / 2) {
        n = space;
      } else {
        while (n > 0 && (static_cast<unsigned char>(line[n]) & 0xC0) == 0x80) --n;  // continuation byte
      }
    }
    out.sentences.emplace_back(line.substr(0, n));
    out.bytes += static_cast<int64_t>(n);
    line.remove_prefix(n);
  }
}

class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorIterator(const std::vector<std::string>& v) : v_(v) {}
  bool done() const override { return i_ >= v_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return v_[i_]; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

 private:
  const std::vector<std::string>& v_;
  size_t i_ = 0;
};

// One pass over the files, looking at the share `rate` of the documents,
// until the budget is met.
TokenizerSample sample_at_rate(const std::vector<SourceFile>& files, const TokenizerTrainOptions& o, double rate) {
  TokenizerSample out;
  out.rate = rate;
  for (size_t i = 0; i < files.size() && out.bytes < o.sample_bytes; ++i) {
    read_records(files[i], static_cast<int32_t>(i), o.separator, [&](Record&& r) {
      ++out.records_read;
      if (rate < 1.0 && unit_interval(mix64(fnv1a64(r.bytes, kSampleHashSeed))) >= rate) return !stop_requested();
      if (!decode_record(r, files[i])) {
        ++out.empty;
        return true;
      }
      if (is_validation_document(r.bytes, o.val_fraction)) {
        ++out.held_out;
        return true;
      }
      ++out.documents;
      std::string_view doc(r.bytes);
      while (!doc.empty()) {
        size_t nl = doc.find('\n');
        std::string_view line = doc.substr(0, nl);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        add_sentences(line, out);
        doc.remove_prefix(nl == std::string_view::npos ? doc.size() : nl + 1);
      }
      return out.bytes < o.sample_bytes && !stop_requested();
    });
  }
  return out;
}

// Why a sample holds no text, from the counts of the pass that made it.
std::string why_no_text(const TokenizerSample& s) {
  if (s.records_read == 0) return "no document was read (the files hold none)";
  return std::to_string(s.records_read) + " document(s) read: " + std::to_string(s.empty) + " empty, " +
         std::to_string(s.held_out) + " held out for validation (data.val_fraction), " +
         std::to_string(s.documents) + " with nothing but line breaks";
}

}  // namespace

TokenizerSample sample_for_tokenizer(const std::vector<SourceFile>& files, const TokenizerTrainOptions& o) {
  int64_t estimate = 0;
  for (const auto& f : files) estimate += estimated_text_bytes(f);
  double train_share = std::max(1e-9, 1.0 - o.val_fraction);
  double rate = std::min(1.0, static_cast<double>(o.sample_bytes) / std::max(1.0, estimate * train_share));
  TokenizerSample out = sample_at_rate(files, o, rate);
  if (out.sentences.empty() && rate < 1.0 && !stop_requested()) out = sample_at_rate(files, o, 1.0);
  throw_if_stop_requested("reading text for the tokenizer", "nothing was written");
  return out;
}

std::string train_tokenizer(const TokenizerSample& sample, const TokenizerTrainOptions& o, const std::string& what) {
  if (sample.sentences.empty())
    throw DataError(what + ": no text to train the tokenizer on: " + why_no_text(sample));
  if (o.vocab_size <= kReservedPieces)
    throw DataError(what + ": model.vocab_size = " + std::to_string(o.vocab_size) +
                    " leaves no room for text pieces; a byte-fallback tokenizer reserves " +
                    std::to_string(kReservedPieces) + " (4 special + 256 bytes)");
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", o.type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"byte_fallback", "true"},  // no input is unrepresentable
      {"pad_id", std::to_string(kPadId)},
      {"bos_id", std::to_string(kBosId)},
      {"eos_id", std::to_string(kEosId)},
      {"unk_id", std::to_string(kUnkId)},
      // Lossless: no NFKC, no whitespace folding, no dummy prefix.
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      {"character_coverage", "0.9995"},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes)},
      {"shuffle_input_sentence", "false"},
      {"input_sentence_size", "0"},
      {"num_threads", std::to_string(kTrainerThreads)},
      {"minloglevel", "2"},  // SentencePiece's INFO log is hundreds of lines
  };
  sentencepiece::SetRandomGeneratorSeed(kTrainerSeed);
  VectorIterator it(sample.sentences);
  std::string proto;
  auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &proto);
  if (!status.ok()) {
    std::string msg = status.ToString(), hint;
    if (msg.find("too high") != std::string::npos)
      hint = "; the sampled text is too small for this many pieces: lower model.vocab_size or add text";
    else if (msg.find("required_chars") != std::string::npos)
      hint = "; raise model.vocab_size (the corpus has many distinct characters)";
    throw DataError(what + ": cannot train a " + o.type + " tokenizer with model.vocab_size = " +
                    std::to_string(o.vocab_size) + " on " + std::to_string(sample.bytes) + " bytes (" +
                    std::to_string(sample.sentences.size()) + " lines): SentencePiece: " + msg + hint);
  }
  return proto;
}

}  // namespace keel
