// TensorBoard event files written directly, without TensorFlow: a file is a
// sequence of TFRecords (length, masked CRC-32C of the length, payload,
// masked CRC-32C of the payload), each payload a hand-encoded `Event`
// protobuf. The first record carries file_version "brain.Event:2"; every
// later one a step and a Summary of scalar values (simple_value).
//
// `tensorboard --logdir DIR` finds files named "*tfevents*" in DIR and its
// subdirectories; a sweep's point directories each become one run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace keel {

// CRC-32C (Castagnoli), as used by TFRecord; `crc` continues a previous value.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// TFRecord's masked CRC: rotate right by 15 and add 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);
// One TFRecord around `payload`.
std::string tfrecord_frame(const std::string& payload);

using Scalars = std::vector<std::pair<std::string, double>>;

// Event protobufs (serialized bytes).
std::string encode_file_version_event(double wall_time);
std::string encode_scalars_event(double wall_time, int64_t step, const Scalars& scalars);

// The scalars of one metrics.jsonl record. Top-level numbers become
// "train/<key>", except val_* which become "val/<rest>"; nested objects and
// arrays are flattened with '/' ("attn/0/max_logit", "output/log_z_mean",
// "layer_grad_norms/blocks/1"). "step" is the event's step, not a scalar;
// "spikes" (events with their own step, also in spikes.jsonl), strings,
// booleans and nulls (non-finite values) are left out.
Scalars metrics_to_scalars(const nlohmann::json& record);

// True for a file name TensorBoard reads as an event file.
bool is_tensorboard_event_file(const std::string& name);

class TensorBoardWriter {
 public:
  // Creates DIR/events.out.tfevents.<unix time>.<host>.<pid>.<n> and writes
  // the file_version record. Throws std::runtime_error if it cannot.
  explicit TensorBoardWriter(const std::string& dir);
  // One event with every scalar; flushed, so a crash loses at most this one.
  void add_scalars(int64_t step, const Scalars& scalars, double wall_time = -1);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& payload);
  std::string path_;
  std::ofstream out_;
};

}  // namespace keel
