#include "data/prepare.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "config/config.h"
#include "data/encode.h"
#include "data/prepare_settings.h"
#include "data/shard.h"
#include "data/sources.h"
#include "data/staging.h"
#include "data/token_stream.h"
#include "data/tokenizer.h"
#include "data/tokenizer_train.h"
#include "util/error.h"
#include "util/dir_lock.h"
#include "util/fs.h"
#include "util/hashing.h"
#include "util/text.h"

namespace keel {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void say(const PrepareOptions& o, const std::string& line) {
  if (!o.quiet) std::cerr << "keel prepare: " << line << std::endl;
}

std::string strip_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}


// Cheap checks that the files the manifest lists are present and whole.
void check_files(const std::string& dir, const DataManifest& m) {
  const int64_t width = m.dtype == "uint16" ? 2 : 4;
  for (const auto& s : m.shards) {
    std::string path = dir + "/" + s.file;
    if (path_kind(path) != PathKind::file) throw data_error(path, "listed in the manifest but missing");
    int64_t size = static_cast<int64_t>(file_size(path));
    int64_t want = kShardHeaderBytes + s.tokens * width;
    if (size != want)
      throw data_error(path, "size mismatch: " + std::to_string(size) + " bytes, the manifest implies " +
                                 std::to_string(want) + " (truncated or corrupted; re-run keel prepare --force)");
  }
  std::string tok = dir + "/" + m.tokenizer.file;
  if (sha256_file(tok) != m.tokenizer.sha256)
    throw data_error(tok, "sha256 differs from the manifest's (the tokenizer was replaced after prepare)");
}

void check_vocab(const Config& c, const DataManifest& m, const std::string& dir) {
  if (m.tokenizer.vocab_size != c.model.vocab_size)
    throw DataError(dir + ": prepared with a tokenizer of " + std::to_string(m.tokenizer.vocab_size) +
                    " pieces but model.vocab_size = " + std::to_string(c.model.vocab_size) +
                    "; set model.vocab_size: " + std::to_string(m.tokenizer.vocab_size) +
                    ", or re-run keel prepare --force to train a new tokenizer (or use another data.dir)");
}

void check_named_tokenizer(const Config& c, const DataManifest& m, const std::string& dir) {
  if (c.data.tokenizer.empty()) return;
  std::string sha = sha256_file(c.data.tokenizer);
  if (sha != m.tokenizer.sha256)
    throw DataError(dir + ": shards were made with a different tokenizer than data.tokenizer = " + c.data.tokenizer +
                    " names (sha256 " + m.tokenizer.sha256.substr(0, 12) + "... vs " + sha.substr(0, 12) +
                    "...); re-run keel prepare --force, or point data.dir elsewhere");
}

int64_t thread_count(const Config& c) {
  if (c.data.threads > 0) return c.data.threads;
  unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? n : 1;
}

// The tokenizer proto and its manifest entry (without sha256).
std::string make_tokenizer(const Config& c, const std::vector<SourceFile>& files, TokenizerInfo& info,
                           const PrepareOptions& o) {
  auto t0 = Clock::now();
  std::string proto;
  if (c.data.tokenizer.empty()) {
    TokenizerTrainOptions to;
    to.type = name_of(c.data.tokenizer_type);
    to.vocab_size = c.model.vocab_size;
    to.sample_bytes = c.data.tokenizer_sample_mb << 20;
    to.separator = c.data.doc_separator;
    to.val_fraction = c.data.val_fraction;
    TokenizerSample sample = sample_for_tokenizer(files, to);
    say(o, "training a " + to.type + " tokenizer with " + std::to_string(to.vocab_size) + " pieces on " +
               std::to_string(sample.bytes / 1000) + " kB of text (" + std::to_string(sample.documents) +
               " documents)");
    std::string what = "data.sources (" + files.front().path + (files.size() > 1 ? ", ..." : "") + ")";
    proto = train_tokenizer(sample, to, what);
    info.origin = "trained";
    info.type = to.type;
    info.sample_bytes = sample.bytes;
  } else {
    proto = read_tokenizer_file(c.data.tokenizer);
    Tokenizer t = Tokenizer::from_serialized(proto, c.data.tokenizer);  // validates the bytes we copy
    if (t.vocab_size() != c.model.vocab_size)
      throw data_error(c.data.tokenizer, "has " + std::to_string(t.vocab_size()) + " pieces but model.vocab_size = " +
                                             std::to_string(c.model.vocab_size) + "; they must be equal");
    if (t.eos_id() < 0)
      throw data_error(c.data.tokenizer, t.is_sentencepiece()
                                             ? "has no EOS piece; keel needs one between documents"
                                             : "has no EOS among its added tokens (<|endoftext|>, <|end_of_text|>, "
                                               "</s> or <eos>); keel needs one between documents");
    info.origin = c.data.tokenizer;
    info.type = t.is_sentencepiece() ? "reused" : "reused byte-level BPE";
  }
  Tokenizer t = Tokenizer::from_serialized(proto, "tokenizer");
  info.file = t.file_name();
  info.vocab_size = t.vocab_size();
  info.pad_id = t.pad_id();
  info.bos_id = t.bos_id();
  info.eos_id = t.eos_id();
  info.unk_id = t.unk_id();
  info.byte_fallback = t.byte_fallback();
  info.seconds = seconds_since(t0);
  return proto;
}

PrepareResult prepare_locked(const Config& c, const PrepareOptions& o, const std::string& dir) {
  const auto t0 = Clock::now();
  std::vector<SourceFile> files = expand_sources(c.data.sources, c.data.text_field);
  const std::string named_sha = c.data.tokenizer.empty() ? "" : sha256_file(c.data.tokenizer);
  nlohmann::json settings = prepare_settings(c, files, named_sha);
  const std::string fingerprint = settings_fingerprint(settings);

  if (const PathKind kind = path_kind(dir); kind != PathKind::missing) {
    if (kind != PathKind::directory)
      throw DataError(dir + " exists but is not a directory; choose another data.dir");
    if (!has_data_manifest(dir)) {
      // --force rebuilds what keel prepared and nothing else: a directory
      // without the manifest holds someone's files (an empty one is filled).
      if (!list_directory(dir).empty())
        throw DataError(dir + " exists but holds no " + kDataManifestFile + " (not a prepared data directory)" +
                        (o.force ? ", and --force replaces only a directory keel prepared" : "") +
                        "; move or remove it yourself, or choose another data.dir");
    } else if (!o.force) {
      DataManifest m = read_data_manifest(dir);
      if (m.fingerprint != fingerprint)
        throw DataError(dir + " was prepared with different settings: " + describe_settings_change(m.settings, settings) +
                        "; use --force to rebuild it, or choose another data.dir");
      check_files(dir, m);
      return {m, false};
    }
  }
  remove_stale_staging(dir);
  StagingDir tmp(dir);

  DataManifest m;
  m.settings = settings;
  m.fingerprint = fingerprint;
  m.created = utc_now();
  m.keel_version = KEEL_VERSION;
  const std::string proto = make_tokenizer(c, files, m.tokenizer, o);
  write_file_durably(tmp.path() + "/" + m.tokenizer.file, proto);  // fsynced like the shards before the rename
  m.tokenizer.sha256 = sha256_hex(proto);
  m.tokenizer_seconds = m.tokenizer.seconds;
  m.dtype = token_bytes_for_vocab(m.tokenizer.vocab_size) == 2 ? "uint16" : "uint32";

  EncodeOptions eo;
  eo.separator = c.data.doc_separator;
  eo.val_fraction = c.data.val_fraction;
  eo.shard_tokens = c.data.shard_tokens;
  eo.threads = thread_count(c);
  eo.progress = !o.quiet;
  say(o, "encoding " + std::to_string(files.size()) + " file(s) on " + std::to_string(eo.threads) + " thread(s)");
  EncodeResult r = encode_corpus(files, proto, tmp.path(), eo);
  if (r.train.documents + r.val.documents == 0)
    throw DataError("data.sources (" + files.front().path + (files.size() > 1 ? ", ..." : "") +
                    ") holds no non-empty documents: the corpus is empty");
  if (r.train.documents == 0)
    throw DataError("every document fell in the validation split (data.val_fraction = " +
                    std::to_string(c.data.val_fraction) + "); lower it or add text");
  if (r.val.documents == 0 && c.data.val_fraction > 0)
    say(o, "warning: no document fell in the validation split; validation will be unavailable");
  m.train = r.train;
  m.val = r.val;
  m.sources = r.sources;
  m.shards = r.shards;
  const int64_t docs = r.train.documents + r.val.documents;
  const int64_t text_tokens = r.train.tokens + r.val.tokens - docs;  // EOS excluded
  m.bytes_per_token = text_tokens > 0 ? double(r.train.text_bytes + r.val.text_bytes) / text_tokens : 0;
  m.encode_seconds = r.seconds;
  m.threads = eo.threads;
  m.seconds = seconds_since(t0);
  write_data_manifest(m, tmp.path());
  tmp.commit();
  return {m, true};
}

}  // namespace

PrepareResult prepare_data(const Config& c, const PrepareOptions& o) {
  const std::string dir = strip_slashes(c.data.dir);
  ensure_directory(dir_name(dir));
  DirLock lock(dir + ".lock", WaitForLock{[&](const std::string& line) { say(o, line); }});
  return prepare_locked(c, o, dir);
}

DataManifest ensure_prepared(const Config& c, const PrepareOptions& o) {
  const std::string dir = strip_slashes(c.data.dir);
  if (!has_data_manifest(dir)) {
    say(o, dir + " is not prepared yet; preparing it from data.sources");
    PrepareOptions no_force = o;
    no_force.force = false;
    DataManifest m = prepare_data(c, no_force).manifest;
    check_vocab(c, m, dir);
    return m;
  }
  DataManifest m = read_data_manifest(dir);
  check_vocab(c, m, dir);
  check_named_tokenizer(c, m, dir);
  std::vector<SourceFile> files;
  try {
    files = expand_sources(c.data.sources, c.data.text_field);
  } catch (const Error& e) {  // DataError or FileError
    // Prepared data may travel without its raw sources (e.g. to a GPU box).
    say(o, std::string("warning: cannot check data.sources against ") + dir + " (" + e.what() +
               "); using the prepared data as it is");
  }
  if (!files.empty()) {
    nlohmann::json settings = prepare_settings(c, files, c.data.tokenizer.empty() ? "" : m.tokenizer.sha256);
    if (settings_fingerprint(settings) != m.fingerprint)
      throw DataError(dir + " was prepared with different settings than this config: " +
                      describe_settings_change(m.settings, settings) +
                      "; run keel prepare CONFIG --force to rebuild it, or choose another data.dir");
  }
  check_files(dir, m);
  return m;
}

void verify_prepared(const std::string& dir_in) {
  const std::string dir = strip_slashes(dir_in);
  DataManifest m = read_data_manifest(dir);
  check_files(dir, m);
  for (const auto& e : m.shards) open_checked_shard(dir, e, m, /*deep=*/true);
}

std::string prepare_summary(const DataManifest& m, const std::string& dir) {
  char b[1024];
  const auto& t = m.tokenizer;
  const double text_mb = (m.train.text_bytes + m.val.text_bytes) / 1e6;
  std::snprintf(b, sizeof b,
                "data       %s\n"
                "documents  %lld (train %lld, val %lld)\n"
                "tokens     %lld (train %lld, val %lld; one EOS per document), %s shards: %zu\n"
                "text       %.2f MB, %.3f bytes/token (EOS excluded)\n"
                "tokenizer  %s, %lld pieces, %s; pad %d bos %d eos %d unk %d%s\n"
                "time       %.1f s (tokenizer %.1f s, encode %.1f s on %lld threads)\n"
                "speed      %.2f MB/s, %.0f tokens/s (encode: read, decode, tokenize, write)\n",
                dir.c_str(), (long long)(m.train.documents + m.val.documents), (long long)m.train.documents,
                (long long)m.val.documents, (long long)(m.train.tokens + m.val.tokens), (long long)m.train.tokens,
                (long long)m.val.tokens, m.dtype.c_str(), m.shards.size(),
                (m.train.text_bytes + m.val.text_bytes) / 1e6, m.bytes_per_token, t.type.c_str(),
                (long long)t.vocab_size, t.origin == "trained" ? "trained here" : t.origin.c_str(), t.pad_id, t.bos_id,
                t.eos_id, t.unk_id, t.byte_fallback ? ", byte fallback" : "", m.seconds, m.tokenizer_seconds,
                m.encode_seconds, (long long)m.threads, m.encode_seconds > 0 ? text_mb / m.encode_seconds : 0.0,
                m.encode_seconds > 0 ? double(m.train.tokens + m.val.tokens) / m.encode_seconds : 0.0);
  return b;
}

}  // namespace keel
