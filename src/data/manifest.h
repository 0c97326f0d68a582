// manifest.json: the description of a prepared data directory, written last
// (a directory without it is incomplete). Holds what the loader needs (shards
// with token counts and checksums, the tokenizer and its special ids) and
// what a researcher wants recorded (sources, documents, bytes per token,
// timings), plus the settings fingerprint that makes `keel prepare`
// idempotent.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace keel {

constexpr int kDataManifestVersion = 1;
constexpr const char* kDataManifestFile = "manifest.json";
constexpr const char* kTokenizerFile = "tokenizer.model";

struct ShardEntry {
  std::string file;   // relative to the data directory
  std::string split;  // train | val
  int64_t tokens = 0;
  uint32_t crc32 = 0;
};

struct SplitStats {
  int64_t documents = 0;
  int64_t tokens = 0;       // including one EOS per document
  int64_t text_bytes = 0;   // UTF-8 bytes of the documents
};

struct SourceStats {
  std::string path;
  std::string format;       // text | jsonl
  std::string compression = "none";  // none | gzip | zstd (manifests before zstd: a "gzip" flag)
  int64_t bytes = 0;        // on disk
  int64_t text_bytes = 0;   // of its non-empty documents
  int64_t documents = 0;
  // Where its documents went, for mixtures (mixture.h): train-split tokens
  // (EOS included) and the data.sources entry it came from. -1: a manifest
  // written before keel recorded them.
  int64_t train_tokens = -1;
  int64_t entry = -1;
};

struct TokenizerInfo {
  std::string file = kTokenizerFile;
  std::string sha256;
  std::string origin;       // "trained" or the path of the reused .model
  std::string type;         // bpe | unigram | (reused: as recorded in the model)
  int64_t vocab_size = 0;
  int32_t pad_id = -1, bos_id = -1, eos_id = -1, unk_id = -1;
  bool byte_fallback = false;
  int64_t sample_bytes = 0; // text it was trained on (0 when reused)
  double seconds = 0;
};

struct DataManifest {
  int version = kDataManifestVersion;
  std::string fingerprint;  // sha256 of settings.dump()
  nlohmann::json settings;  // everything the output depends on (see prepare.cpp)
  std::string created;      // UTC, ISO 8601
  std::string keel_version;
  TokenizerInfo tokenizer;
  std::string dtype;        // uint16 | uint32
  std::vector<SourceStats> sources;
  SplitStats train, val;
  std::vector<ShardEntry> shards;
  double bytes_per_token = 0;  // text bytes / tokens, EOS excluded: the tokenizer's compression
  double seconds = 0, tokenizer_seconds = 0, encode_seconds = 0;
  int64_t threads = 0;

  const SplitStats& split(const std::string& name) const { return name == "val" ? val : train; }
};

nlohmann::json data_manifest_to_json(const DataManifest& m);
// Throws DataError naming `where` when a field is missing or has the wrong type.
DataManifest data_manifest_from_json(const nlohmann::json& j, const std::string& where);

// dir/manifest.json. Throws DataError if missing, unreadable or malformed.
DataManifest read_data_manifest(const std::string& dir);
bool has_data_manifest(const std::string& dir);
// Writes dir/manifest.json via a temporary file and rename, then fsyncs.
void write_data_manifest(const DataManifest& m, const std::string& dir);

}  // namespace keel
