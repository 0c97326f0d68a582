// The settings a prepared directory depends on, and their fingerprint.
//
// They are: the format version, the source files (paths as listed and sizes,
// so appending to a file counts as a change), the document separator, the
// JSON Lines text field (when not "text"), the validation fraction, the shard
// size, and either the tokenizer training settings (type, vocab size, sample
// size) or the reused tokenizer's sha256.
// Deliberately absent: data.threads and data.prefetch, which do not change
// the output. A manifest stores them; equal settings mean nothing to redo.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/sources.h"

namespace keel {

struct Config;

// `tokenizer_sha256`: of data.tokenizer's file when set, else ignored.
nlohmann::json prepare_settings(const Config& config, const std::vector<SourceFile>& files,
                                const std::string& tokenizer_sha256);
std::string settings_fingerprint(const nlohmann::json& settings);  // sha256 of the canonical dump
// What changed from `before` to `now`, in words: "val_fraction was 0.1, now
// 0.2; source a.txt changed size (100 -> 120 bytes)".
std::string describe_settings_change(const nlohmann::json& before, const nlohmann::json& now);

}  // namespace keel
