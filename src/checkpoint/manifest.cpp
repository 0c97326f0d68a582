#include "checkpoint/manifest.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <set>

#include "util/error.h"
#include "util/json.h"

namespace keel {

namespace {

using ojson = nlohmann::ordered_json;

bool parse_crc32_hex(const std::string& s, uint32_t* out) {
  if (s.size() != 8) return false;
  uint32_t v = 0;
  for (char c : s) {
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v * 16 + static_cast<uint32_t>(d);
  }
  *out = v;
  return true;
}

// The structural checks, separate so that parse_manifest can turn a JSON type
// error anywhere in here into a "bad manifest" message.
template <typename Bad>
Manifest manifest_from_json(const ojson& j, const Bad& bad) {
  if (j.value("format", "") != kManifestFormat) throw bad("\"format\" is not \"" + std::string(kManifestFormat) + "\"");
  if (!j.contains("version") || !j.at("version").is_number_integer()) throw bad("missing integer \"version\"");
  if (json_int<int>(j.at("version")) != kManifestVersion)
    throw bad("version " + std::to_string(json_int<int>(j.at("version"))) + ", this build reads version " +
              std::to_string(kManifestVersion));
  if (j.value("checksum", "") != "crc32") throw bad("\"checksum\" is not \"crc32\"");
  if (!j.contains("step") || !j.at("step").is_number_integer() || json_int<int64_t>(j.at("step")) < 0)
    throw bad("missing non-negative integer \"step\"");
  if (!j.contains("files") || !j.at("files").is_array()) throw bad("missing array \"files\"");

  Manifest m;
  m.step = json_int<int64_t>(j.at("step"));
  std::set<std::string> seen;
  for (const auto& f : j.at("files")) {
    if (!f.is_object() || !f.contains("name") || !f.at("name").is_string() || !f.contains("size") ||
        !f.at("size").is_number_unsigned() || !f.contains("crc32") || !f.at("crc32").is_string())
      throw bad("each entry of \"files\" needs a string \"name\", an unsigned \"size\" and a string \"crc32\": " +
                json_excerpt(f));
    ManifestFile mf;
    mf.name = f.at("name").get<std::string>();
    if (std::string why = check_checkpoint_file_name(mf.name); !why.empty()) throw bad("'" + mf.name + "': " + why);
    if (!seen.insert(mf.name).second) throw bad("'" + mf.name + "' is listed twice");
    mf.size = json_int<uint64_t>(f.at("size"));
    if (!parse_crc32_hex(f.at("crc32").get<std::string>(), &mf.crc32))
      throw bad("'" + mf.name + "': crc32 \"" + f.at("crc32").get<std::string>() + "\" is not 8 lowercase hex digits");
    m.files.push_back(mf);
  }
  return m;
}

}  // namespace

std::string crc32_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

std::string check_checkpoint_file_name(const std::string& name) {
  if (name.empty()) return "file names must not be empty";
  if (name.find('/') != std::string::npos) return "file names must not contain '/'";
  if (name[0] == '.') return "file names must not start with '.'";
  if (name == kManifestName) return "the name is reserved for the manifest";
  return "";
}

std::string manifest_to_json(const Manifest& m) {
  ojson files = ojson::array();
  for (const auto& f : m.files) files.push_back({{"name", f.name}, {"size", f.size}, {"crc32", crc32_hex(f.crc32)}});
  ojson j = {{"format", kManifestFormat}, {"version", kManifestVersion}, {"step", m.step},
             {"checksum", "crc32"},       {"files", files}};
  return j.dump(2) + "\n";
}

Manifest parse_manifest(const std::string& text, const std::string& path) {
  auto bad = [&](const std::string& what) { return checkpoint_error(path, "bad manifest: " + what); };
  ojson j;
  try {
    j = parse_json_bounded<ojson>(text, path);
  } catch (const JsonError& e) {
    throw bad(e.what());
  }
  if (!j.is_object()) throw bad("not a JSON object");
  try {
    return manifest_from_json(j, bad);
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong type
    throw bad(e.what());
  }
}

}  // namespace keel
