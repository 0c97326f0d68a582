#include "monitor/tensorboard_writer.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace keel {

namespace {

// Table for the reflected Castagnoli polynomial 0x82F63B78.
const std::array<uint32_t, 256>& crc32c_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// Protobuf wire format: varints, tags, little-endian fixed-width values.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_tag(std::string& out, int field, int wire_type) { put_varint(out, (static_cast<uint64_t>(field) << 3) | wire_type); }

template <typename T>
void put_fixed(std::string& out, T value) {  // x86/ARM are little-endian, as the wire format is
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void put_bytes_field(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event fields: wall_time = 1 (double), step = 2 (int64), file_version = 3
// (string), summary = 5 (Summary). Summary: value = 1 (repeated Value).
// Value: tag = 1 (string), simple_value = 2 (float).
std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_tag(e, 1, 1);
  put_fixed<double>(e, wall_time);
  if (step != 0) {
    put_tag(e, 2, 0);
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void flatten(const nlohmann::json& v, const std::string& tag, Scalars& out) {
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) flatten(it.value(), tag + "/" + it.key(), out);
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) flatten(v[i], tag + "/" + std::to_string(i), out);
  } else if (v.is_number() && std::isfinite(v.get<double>())) {
    out.emplace_back(tag, v.get<double>());
  }
}

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  const auto& table = crc32c_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord_frame(const std::string& payload) {
  std::string out;
  const uint64_t length = payload.size();
  put_fixed<uint64_t>(out, length);
  put_fixed<uint32_t>(out, masked_crc32c(out.data(), 8));
  out += payload;
  put_fixed<uint32_t>(out, masked_crc32c(payload.data(), payload.size()));
  return out;
}

std::string encode_file_version_event(double wall_time) {
  std::string e = event_header(wall_time, 0);
  put_bytes_field(e, 3, "brain.Event:2");
  return e;
}

std::string encode_scalars_event(double wall_time, int64_t step, const Scalars& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes_field(v, 1, tag);
    put_tag(v, 2, 5);
    put_fixed<float>(v, static_cast<float>(value));
    put_bytes_field(summary, 1, v);
  }
  std::string e = event_header(wall_time, step);
  put_bytes_field(e, 5, summary);
  return e;
}

Scalars metrics_to_scalars(const nlohmann::json& record) {
  Scalars out;
  for (auto it = record.begin(); it != record.end(); ++it) {
    const std::string& key = it.key();
    if (key == "step" || key == "spikes") continue;
    if (it.value().is_structured()) flatten(it.value(), key, out);
    else if (key.rfind("val_", 0) == 0) flatten(it.value(), "val/" + key.substr(4), out);
    else flatten(it.value(), "train/" + key, out);
  }
  return out;
}

bool is_tensorboard_event_file(const std::string& name) { return name.find("tfevents") != std::string::npos; }

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  static std::atomic<int> counter{0};
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const double now = now_seconds();
  path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host + "." +
          std::to_string(getpid()) + "." + std::to_string(counter++);
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) throw std::runtime_error("cannot create TensorBoard event file " + path_);
  write_record(encode_file_version_event(now));
}

void TensorBoardWriter::add_scalars(int64_t step, const Scalars& scalars, double wall_time) {
  if (scalars.empty()) return;
  write_record(encode_scalars_event(wall_time >= 0 ? wall_time : now_seconds(), step, scalars));
}

void TensorBoardWriter::write_record(const std::string& payload) {
  out_ << tfrecord_frame(payload);
  out_.flush();
  if (!out_) throw std::runtime_error("cannot write TensorBoard event file " + path_);
}

}  // namespace keel
