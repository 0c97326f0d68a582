// `keel prepare`: turns data.sources into a prepared data directory
// (data.dir) holding tokenizer.model, train_*.bin / val_*.bin token shards
// (shard.h) and manifest.json (manifest.h).
//
// Steps: expand the sources (sources.h); train a tokenizer on a sample
// (tokenizer_train.h) or copy data.tokenizer; encode everything in parallel
// (encode.h); write the manifest last.
//
// Safety (staging.h): everything is written to a fresh "<dir>.tmp-XXXXXX"
// beside data.dir and renamed into place at the end, so an interrupted or
// failed run never leaves a directory that looks complete. Runs on the same
// data.dir are serialized by an flock on "<dir>.lock", so ranks that all call
// ensure_prepared() prepare once.
//
// Idempotence (prepare_settings.h): the manifest records the settings the
// output depends on. With the same settings a run does nothing; with
// different ones it refuses unless forced.
#pragma once

#include <cstdint>
#include <string>

#include "data/manifest.h"

namespace keel {

struct Config;

struct PrepareOptions {
  bool force = false;    // rebuild even when data.dir exists (same or different settings)
  bool quiet = false;    // no progress or status lines on stderr
};

struct PrepareResult {
  DataManifest manifest;
  bool built = false;    // false: data.dir was already prepared with these settings
};

// Throws DataError for bad input or an existing data.dir that would be
// replaced without `force`.
PrepareResult prepare_data(const Config& config, const PrepareOptions& options = {});

// For the trainer: prepares data.dir if it has no manifest, and otherwise
// checks it against the config: the tokenizer's vocab size must equal
// model.vocab_size, data.tokenizer (if set) must be the tokenizer the shards
// were made with, the settings must match (when the sources can still be
// found), and the shard files must have their recorded sizes. Throws
// DataError on any mismatch. Returns the manifest.
DataManifest ensure_prepared(const Config& config, const PrepareOptions& options = {});

// Reads every shard of `dir`: header, size and checksum against the manifest,
// ids below the vocab size. Throws DataError naming the first bad file.
void verify_prepared(const std::string& dir);

// A few lines for humans: documents, tokens per split, bytes/token, timings.
std::string prepare_summary(const DataManifest& m, const std::string& dir);

}  // namespace keel
