#include "data/manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

namespace keel {

namespace {

std::string hex32(uint32_t v) {
  char b[9];
  std::snprintf(b, sizeof b, "%08x", v);
  return b;
}

nlohmann::json split_json(const SplitStats& s) {
  return {{"documents", s.documents}, {"tokens", s.tokens}, {"text_bytes", s.text_bytes}};
}

SplitStats split_from(const nlohmann::json& j) {
  return {json_int<int64_t>(j.at("documents")), json_int<int64_t>(j.at("tokens")), json_int<int64_t>(j.at("text_bytes"))};
}

}  // namespace

nlohmann::json data_manifest_to_json(const DataManifest& m) {
  nlohmann::json j;
  j["format"] = "keel-tokens";
  j["version"] = m.version;
  j["fingerprint"] = m.fingerprint;
  j["created"] = m.created;
  j["keel_version"] = m.keel_version;
  const auto& t = m.tokenizer;
  j["tokenizer"] = {{"file", t.file},       {"sha256", t.sha256},       {"origin", t.origin},
                    {"type", t.type},       {"vocab_size", t.vocab_size},
                    {"special_ids", {{"pad", t.pad_id}, {"bos", t.bos_id}, {"eos", t.eos_id}, {"unk", t.unk_id}}},
                    {"byte_fallback", t.byte_fallback}, {"sample_bytes", t.sample_bytes}, {"seconds", t.seconds}};
  j["dtype"] = m.dtype;
  j["splits"] = {{"train", split_json(m.train)}, {"val", split_json(m.val)}};
  j["documents"] = m.train.documents + m.val.documents;
  j["tokens"] = m.train.tokens + m.val.tokens;
  j["text_bytes"] = m.train.text_bytes + m.val.text_bytes;
  j["bytes_per_token"] = m.bytes_per_token;
  j["seconds"] = {{"total", m.seconds}, {"tokenizer", m.tokenizer_seconds}, {"encode", m.encode_seconds}};
  j["threads"] = m.threads;
  j["shards"] = nlohmann::json::array();
  for (const auto& s : m.shards)
    j["shards"].push_back({{"file", s.file}, {"split", s.split}, {"tokens", s.tokens}, {"crc32", hex32(s.crc32)}});
  j["sources"] = nlohmann::json::array();
  for (const auto& s : m.sources)
    j["sources"].push_back({{"path", s.path}, {"format", s.format}, {"compression", s.compression}, {"bytes", s.bytes},
                            {"text_bytes", s.text_bytes}, {"documents", s.documents},
                            {"train_tokens", s.train_tokens}, {"entry", s.entry}});
  j["settings"] = m.settings;
  return j;
}

DataManifest data_manifest_from_json(const nlohmann::json& j, const std::string& where) {
  DataManifest m;
  try {
    if (j.at("format").get<std::string>() != "keel-tokens") throw DataError(where + ": not a keel token manifest");
    m.version = json_int<int>(j.at("version"));
    if (m.version != kDataManifestVersion)
      throw DataError(where + ": manifest version " + std::to_string(m.version) + "; this keel reads version " +
                      std::to_string(kDataManifestVersion) + " (re-run keel prepare --force)");
    m.fingerprint = j.at("fingerprint").get<std::string>();
    m.created = j.at("created").get<std::string>();
    m.keel_version = j.at("keel_version").get<std::string>();
    const auto& t = j.at("tokenizer");
    auto& ti = m.tokenizer;
    ti.file = t.at("file").get<std::string>();
    if (ti.file != "tokenizer.model" && ti.file != "tokenizer.json")
      throw DataError(where + ": tokenizer file '" + ti.file + "' must be tokenizer.model or tokenizer.json");
    ti.sha256 = t.at("sha256").get<std::string>();
    ti.origin = t.at("origin").get<std::string>();
    ti.type = t.at("type").get<std::string>();
    ti.vocab_size = json_int<int64_t>(t.at("vocab_size"));
    const auto& ids = t.at("special_ids");
    ti.pad_id = json_int<int32_t>(ids.at("pad"));
    ti.bos_id = json_int<int32_t>(ids.at("bos"));
    ti.eos_id = json_int<int32_t>(ids.at("eos"));
    ti.unk_id = json_int<int32_t>(ids.at("unk"));
    ti.byte_fallback = t.at("byte_fallback").get<bool>();
    ti.sample_bytes = json_int<int64_t>(t.at("sample_bytes"));
    ti.seconds = t.at("seconds").get<double>();
    m.dtype = j.at("dtype").get<std::string>();
    m.train = split_from(j.at("splits").at("train"));
    m.val = split_from(j.at("splits").at("val"));
    m.bytes_per_token = j.at("bytes_per_token").get<double>();
    m.seconds = j.at("seconds").at("total").get<double>();
    m.tokenizer_seconds = j.at("seconds").at("tokenizer").get<double>();
    m.encode_seconds = j.at("seconds").at("encode").get<double>();
    m.threads = json_int<int64_t>(j.at("threads"));
    for (const auto& s : j.at("shards")) {
      ShardEntry e;
      e.file = s.at("file").get<std::string>();
      e.split = s.at("split").get<std::string>();
      e.tokens = json_int<int64_t>(s.at("tokens"));
      e.crc32 = static_cast<uint32_t>(std::stoul(s.at("crc32").get<std::string>(), nullptr, 16));
      if (e.split != "train" && e.split != "val") throw DataError(where + ": shard " + e.file + " has unknown split '" + e.split + "'");
      if (e.file.find('/') != std::string::npos) throw DataError(where + ": shard file '" + e.file + "' must be a plain name");
      m.shards.push_back(e);
    }
    for (const auto& s : j.at("sources")) {
      const std::string compression = s.contains("compression") ? s.at("compression").get<std::string>()
                                      : s.at("gzip").get<bool>() ? "gzip" : "none";
      if (compression != "none" && compression != "gzip" && compression != "zstd")
        throw DataError(where + ": source " + s.at("path").get<std::string>() + " has unknown compression '" +
                        compression + "'");
      m.sources.push_back({s.at("path").get<std::string>(), s.at("format").get<std::string>(), compression,
                           json_int<int64_t>(s.at("bytes")), json_int<int64_t>(s.at("text_bytes")),
                           json_int<int64_t>(s.at("documents"))});
      m.sources.back().train_tokens = json_int_or<int64_t>(s, "train_tokens", int64_t{-1});
      m.sources.back().entry = json_int_or<int64_t>(s, "entry", int64_t{-1});
    }
    m.settings = j.at("settings");
  } catch (const nlohmann::json::exception& e) {
    throw DataError(where + ": malformed manifest: " + e.what());
  } catch (const std::logic_error& e) {  // stoul
    throw DataError(where + ": malformed manifest: " + e.what());
  }
  if (m.dtype != "uint16" && m.dtype != "uint32") throw DataError(where + ": unknown dtype '" + m.dtype + "'");
  if (m.tokenizer.vocab_size <= 0) throw DataError(where + ": tokenizer vocab_size must be positive");
  return m;
}

bool has_data_manifest(const std::string& dir) {
  return path_kind(dir + "/" + kDataManifestFile) == PathKind::file;
}

DataManifest read_data_manifest(const std::string& dir) {
  const std::string path = dir + "/" + kDataManifestFile;
  if (!path_exists(path))
    throw data_error(path, "cannot open (is " + dir + " a prepared data directory? run keel prepare)");
  nlohmann::json j;
  try {
    j = parse_json_bounded(read_small_file(path), path);
  } catch (const JsonError& e) {
    throw DataError(e.what());
  }
  return data_manifest_from_json(j, path);
}

void write_data_manifest(const DataManifest& m, const std::string& dir) {
  const std::string path = dir + "/" + kDataManifestFile, tmp = path + ".tmp";
  const std::string text = data_manifest_to_json(m).dump(2) + "\n";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw data_error(tmp, std::string("cannot create: ") + std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      throw data_error(tmp, std::string("write error: ") + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) throw data_error(tmp, std::string("cannot sync: ") + std::strerror(errno));
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw data_error(path, std::string("cannot rename into place: ") + std::strerror(errno));
}

}  // namespace keel
