// The manifest of a checkpoint: manifest.json, the last file written into a
// checkpoint directory and the first one deleted (docs/papers.md#checkpoint-and-resume). Its
// presence is what makes a directory a checkpoint; its contents let a reader
// verify every other file without trusting it:
//
//   {"format": "keel-checkpoint", "version": 1, "step": 1200,
//    "checksum": "crc32",
//    "files": [{"name": "model.safetensors", "size": 123456, "crc32": "0a1b2c3d"}, ...]}
//
// The checksum is zlib's CRC-32 of the whole file (hex): it catches torn
// writes, truncation and flipped bits, which is the threat here; it is not a
// defence against deliberate tampering.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

constexpr const char* kManifestName = "manifest.json";
constexpr const char* kManifestFormat = "keel-checkpoint";
constexpr int kManifestVersion = 1;

struct ManifestFile {
  std::string name;
  uint64_t size = 0;
  uint32_t crc32 = 0;
};

struct Manifest {
  int64_t step = 0;
  std::vector<ManifestFile> files;
};

std::string manifest_to_json(const Manifest& m);
// Parses and checks the structure (format, version, field types, plain and
// unique file names); throws CheckpointError naming `path`.
Manifest parse_manifest(const std::string& text, const std::string& path);
// "0a1b2c3d": how the manifest writes a CRC-32.
std::string crc32_hex(uint32_t crc);
// A file name a checkpoint may hold: non-empty, no '/', not starting with '.',
// not the manifest itself. Returns the reason it is not, or "" if it is fine.
std::string check_checkpoint_file_name(const std::string& name);

}  // namespace keel
