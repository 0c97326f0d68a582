// Helpers shared by the data pipeline's test programs: tiny generated
// corpora and configs that prepare in well under a second.
#pragma once

#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/prepare.h"
#include "data/sources.h"
#include "data/tokenizer.h"
#include "data/tokenizer_train.h"
#include "test_util.h"
#include "util/fs.h"

namespace keel_test {

inline void write_text(const std::string& path, const std::string& content) {
  keel::ensure_directory(keel::dir_name(path));
  std::ofstream out(path, std::ios::binary);
  out << content;
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline void append_text(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out << content;
}

// Not std::filesystem: libtorch.so interposes some of it (see src/util/fs.h).
inline bool exists(const std::string& path) { return keel::path_kind(path) != keel::PathKind::missing; }
inline void truncate_file(const std::string& path, int64_t size) {
  if (::truncate(path.c_str(), size) != 0) throw std::runtime_error("truncate failed for " + path);
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_gzip(const std::string& path, const std::string& content) {
  keel::ensure_directory(keel::dir_name(path));
  gzFile f = gzopen(path.c_str(), "wb");
  if (!f || gzwrite(f, content.data(), static_cast<unsigned>(content.size())) != static_cast<int>(content.size()))
    throw std::runtime_error("gzwrite failed for " + path);
  gzclose(f);
}

// `content` as zstd with the content checksum (as the zstd tool writes it),
// split into `frames` concatenated frames (as pzstd and zstd -T write it).
inline std::string zstd_bytes(const std::string& content, int frames = 1) {
  std::string out;
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  const size_t piece = content.size() / static_cast<size_t>(frames) + 1;
  for (size_t at = 0; at < content.size() || (at == 0 && content.empty()); at += piece) {
    const size_t n = std::min(piece, content.size() - at);
    std::string buf(ZSTD_compressBound(n), '\0');
    const size_t got = ZSTD_compress2(cctx, buf.data(), buf.size(), content.data() + at, n);
    if (ZSTD_isError(got)) throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(got));
    out.append(buf.data(), got);
    if (content.empty()) break;
  }
  ZSTD_freeCCtx(cctx);
  return out;
}

inline void write_zstd(const std::string& path, const std::string& content, int frames = 1) {
  write_text(path, zstd_bytes(content, frames));
}

// Deterministic pseudo-English documents: sentences over a small word list,
// a few lines each, with some non-ASCII words so byte fallback and UTF-8
// handling are exercised.
inline std::vector<std::string> make_documents(int n, uint64_t seed) {
  static const std::vector<std::string> words = {
      "the", "a", "model", "learns", "to", "predict", "next", "token", "from", "text", "and", "loss",
      "falls", "slowly", "when", "rate", "is", "high", "training", "goes", "unstable", "attention",
      "logits", "grow", "large", "layer", "norm", "keeps", "them", "small", "data", "shard", "batch",
      "step", "café", "naïve", "über", "señor", "déjà", "vu", "of", "in", "on", "we", "see", "it"};
  std::mt19937_64 rng(seed);
  std::vector<std::string> docs;
  for (int d = 0; d < n; ++d) {
    std::string doc = "Document " + std::to_string(seed) + "-" + std::to_string(d) + "\n";
    int lines = 1 + static_cast<int>(rng() % 4);
    for (int l = 0; l < lines; ++l) {
      int sentences = 1 + static_cast<int>(rng() % 3);
      for (int s = 0; s < sentences; ++s) {
        int len = 4 + static_cast<int>(rng() % 10);
        for (int w = 0; w < len; ++w) {
          std::string word = words[rng() % words.size()];
          if (w == 0) word[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(word[0])));
          doc += word + (w + 1 < len ? " " : ". ");
        }
      }
      doc.pop_back();
      if (l + 1 < lines) doc += "\n";
    }
    docs.push_back(doc);
  }
  return docs;
}

// Documents joined with a separator line, as data.doc_separator expects.
inline std::string join_documents(const std::vector<std::string>& docs, const std::string& sep = "<|endoftext|>") {
  std::string out;
  for (size_t i = 0; i < docs.size(); ++i) out += docs[i] + "\n" + (i + 1 < docs.size() ? sep + "\n" : "");
  return out;
}

// A config for a tiny corpus: 400-piece tokenizer, 1024-token shards.
inline keel::Config tiny_config(const std::string& data_dir, const std::vector<std::string>& sources) {
  keel::Config c;
  c.model.vocab_size = 400;
  c.data.dir = data_dir;
  c.data.sources = sources;
  c.data.val_fraction = 0.1;
  c.data.shard_tokens = 1024;
  c.data.tokenizer_sample_mb = 1;
  c.data.threads = 2;
  return c;
}

inline keel::PrepareResult prepare_quietly(const keel::Config& c, bool force = false) {
  keel::PrepareOptions o;
  o.quiet = true;
  o.force = force;
  return keel::prepare_data(c, o);
}

// A 400-piece BPE tokenizer trained on make_documents(300, 7), once per
// program: for tests that need real tokens but not a particular tokenizer.
inline const keel::Tokenizer& small_tokenizer() {
  static keel::Tokenizer t = [] {
    const std::string dir = make_temp_dir("small_tok");
    write_text(dir + "/corpus.txt", join_documents(make_documents(300, 7)));
    keel::TokenizerTrainOptions o;
    o.vocab_size = 400;
    o.separator = "<|endoftext|>";
    return keel::Tokenizer::from_serialized(
        keel::train_tokenizer(keel::sample_for_tokenizer(keel::expand_sources({dir + "/corpus.txt"}), o), o,
                              dir + "/corpus.txt"),
        "small test tokenizer");
  }();
  return t;
}

}  // namespace keel_test
