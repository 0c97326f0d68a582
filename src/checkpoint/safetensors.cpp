#include "checkpoint/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <set>

#include "util/fs.h"
#include "util/json.h"

// The format stores little-endian bytes and we copy memory as is.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace keel {

namespace {

using ojson = nlohmann::ordered_json;  // keeps the header in the order tensors were given

struct DtypeInfo {
  const char* name;
  torch::ScalarType type;
  uint64_t itemsize;
};

const DtypeInfo kDtypes[] = {
    {"F64", torch::kFloat64, 8},          {"F32", torch::kFloat32, 4},
    {"F16", torch::kFloat16, 2},          {"BF16", torch::kBFloat16, 2},
    {"F8_E4M3", torch::kFloat8_e4m3fn, 1}, {"F8_E5M2", torch::kFloat8_e5m2, 1},
    {"I64", torch::kInt64, 8},            {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},            {"I8", torch::kInt8, 1},
    {"U64", torch::kUInt64, 8},           {"U32", torch::kUInt32, 4},
    {"U16", torch::kUInt16, 2},           {"U8", torch::kUInt8, 1},
    {"BOOL", torch::kBool, 1},
};

// The reference implementation refuses headers above 100 MB; so do we, so a
// garbage length cannot make us allocate gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

const DtypeInfo* find_dtype(torch::ScalarType type) {
  for (const auto& d : kDtypes)
    if (d.type == type) return &d;
  return nullptr;
}

const DtypeInfo* find_dtype(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// numel * itemsize, or throws if it does not fit in 63 bits. The product of
// the non-zero dimensions must fit too: [0, 2^62, 2^62] has no bytes, but
// LibTorch refuses to make it (as c10's own numel check does).
uint64_t byte_size(const std::vector<int64_t>& shape, uint64_t itemsize, const std::string& path,
                   const std::string& name) {
  uint64_t n = itemsize, nonzero = itemsize;
  bool overflow = false;
  for (int64_t d : shape) {
    overflow |= __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n);
    if (d != 0) overflow |= __builtin_mul_overflow(nonzero, static_cast<uint64_t>(d), &nonzero);
  }
  if (overflow || nonzero > static_cast<uint64_t>(INT64_MAX))
    throw checkpoint_error(path, "tensor '" + name + "': shape " + shape_text(shape) +
                                     " overflows 64-bit element or byte counts");
  return n;
}

// One tensor as described by the header.
struct Entry {
  std::string name;
  const DtypeInfo* dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;  // relative to the start of the data region
  size_t header_index;  // position in the JSON header, the tie-break for empty tensors
};

uint64_t read_u64_le(const unsigned char* b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

Entry parse_entry(const std::string& path, const std::string& name, const ojson& v, size_t index) {
  auto bad = [&](const std::string& what) {
    return checkpoint_error(path, "header entry for tensor '" + name + "': " + what);
  };
  if (!v.is_object()) throw bad("expected an object, got " + json_excerpt(v));
  Entry e;
  e.name = name;
  e.header_index = index;

  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) throw bad("missing string field \"dtype\"");
  e.dtype = find_dtype(dt->get<std::string>());
  if (!e.dtype) throw bad("unknown dtype \"" + dt->get<std::string>() + "\"");

  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) throw bad("missing array field \"shape\"");
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned()) throw bad("shape " + json_excerpt(*sh) + " has an entry that is not a non-negative integer");
    if (json_int<uint64_t>(d) > static_cast<uint64_t>(INT64_MAX)) throw bad("shape " + json_excerpt(*sh) + " is too large");
    e.shape.push_back(json_int<int64_t>(d));
  }

  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    throw bad("\"data_offsets\" must be [begin, end] with non-negative integers");
  e.begin = json_int<uint64_t>((*off)[0]);
  e.end = json_int<uint64_t>((*off)[1]);
  if (e.end < e.begin) throw bad("data_offsets " + json_excerpt(*off) + " end before they begin");

  uint64_t need = byte_size(e.shape, e.dtype->itemsize, path, name);
  if (e.end - e.begin != need)
    throw bad("data_offsets " + json_excerpt(*off) + " span " + std::to_string(e.end - e.begin) +
              " bytes but shape " + shape_text(e.shape) + " of " + e.dtype->name + " needs " +
              std::to_string(need));
  return e;
}

}  // namespace

std::string safetensors_dtype_name(torch::ScalarType type) {
  const DtypeInfo* d = find_dtype(type);
  if (!d) throw CheckpointError(std::string("dtype ") + c10::toString(type) + " cannot be stored in safetensors");
  return d->name;
}

// ---------------------------------------------------------------- writing

void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Build the whole header first from shapes alone; data is copied to the
  // host one tensor at a time below.
  ojson header = ojson::object();
  if (!metadata.empty()) {
    ojson meta = ojson::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  std::set<std::string> seen;
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    // A named copy: lambdas capture structured bindings only from C++20 (and Clang 14 refuses).
    const std::string& tensor_name = name;
    auto bad = [&](const std::string& what) { return checkpoint_error(path, "tensor '" + tensor_name + "': " + what); };
    if (name.empty()) throw checkpoint_error(path, "tensor names must not be empty");
    if (name == "__metadata__") throw bad("the name is reserved for the metadata block");
    if (!seen.insert(name).second) throw bad("the name appears twice");
    if (!t.defined()) throw bad("tensor is undefined");
    if (t.layout() != torch::kStrided) throw bad("only dense (strided) tensors can be stored");
    const DtypeInfo* d = find_dtype(t.scalar_type());
    if (!d) throw bad(std::string("dtype ") + c10::toString(t.scalar_type()) + " is not supported by safetensors");
    std::vector<int64_t> shape = t.sizes().vec();
    uint64_t nbytes = byte_size(shape, d->itemsize, path, name);
    header[name] = {{"dtype", d->name}, {"shape", shape}, {"data_offsets", {offset, offset + nbytes}}};
    sizes.push_back(nbytes);
    offset += nbytes;
  }

  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw checkpoint_error(path, std::string("cannot encode the header (names and metadata must be UTF-8): ") +
                                     e.what());
  }
  // Pad to 8 bytes so the data region starts aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');

  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));

  OutputFile f(path);
  f.write(len, 8);
  f.write(text);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (sizes[i] == 0) continue;
    torch::Tensor c = tensors[i].second.detach().to(torch::kCPU).contiguous();
    f.write(c.data_ptr(), sizes[i]);
  }
  f.sync();
  f.close();
}

// ---------------------------------------------------------------- reading

TensorMap read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  InputFile f(path);
  const uint64_t file_size = f.size();
  if (file_size < 8)
    throw checkpoint_error(path, "file is " + std::to_string(file_size) +
                                     " bytes, too short for the 8-byte header length (truncated or empty file)");
  unsigned char len[8];
  f.read_at(len, 8, 0);
  const uint64_t header_len = read_u64_le(len);
  if (header_len > file_size - 8)
    throw checkpoint_error(path, "header length " + std::to_string(header_len) + " (bytes 0-7) exceeds the " +
                                     std::to_string(file_size - 8) +
                                     " bytes after it (truncated file, or not a safetensors file)");
  if (header_len > kMaxHeaderBytes)
    throw checkpoint_error(path, "header length " + std::to_string(header_len) + " exceeds the 100 MB limit");

  std::string text(header_len, '\0');
  f.read_at(text.data(), header_len, 8);
  // Bounded nesting: a hostile header cannot build a value too deep to print.
  const ojson header = parse_json_bounded<ojson>(text, path + ": header (bytes 8-" + std::to_string(8 + header_len) + ")");
  if (!header.is_object()) throw checkpoint_error(path, "header is not a JSON object");

  std::vector<Entry> entries;
  std::map<std::string, std::string> meta;
  size_t index = 0;
  for (auto it = header.begin(); it != header.end(); ++it, ++index) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) throw checkpoint_error(path, "\"__metadata__\" is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          throw checkpoint_error(path, "\"__metadata__\" value for '" + m.key() + "' is not a string");
        meta[m.key()] = m->get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, it.key(), *it, index));
  }

  // The byte ranges must tile the data region: sorted by offset, each starts
  // where the previous ended, and the last ends at EOF. This is what the
  // reference implementation checks, and it catches truncation, overlap and
  // trailing garbage with a precise position.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  uint64_t expected = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    const std::string where =
        "tensor '" + e.name + "' (data bytes " + std::to_string(e.begin) + "-" + std::to_string(e.end) + ")";
    if (e.begin < expected)
      throw checkpoint_error(path, where + " overlaps tensor '" + prev->name + "' (data bytes " +
                                       std::to_string(prev->begin) + "-" + std::to_string(prev->end) + ")");
    if (e.begin > expected)
      throw checkpoint_error(path, where + " leaves a gap of " + std::to_string(e.begin - expected) +
                                       " bytes after data byte " + std::to_string(expected));
    if (e.end > data_size)
      throw checkpoint_error(path, where + " ends at file byte " + std::to_string(data_start + e.end) +
                                       " but the file has " + std::to_string(file_size) + " bytes (truncated file?)");
    expected = e.end;
    prev = &e;
  }
  if (expected != data_size)
    throw checkpoint_error(path, std::to_string(data_size - expected) +
                                     " trailing bytes after the last tensor (file byte " +
                                     std::to_string(data_start + expected) + " onward)");

  TensorMap out;
  out.reserve(entries.size());
  for (const Entry& e : entries) {
    torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype->type));
    const uint64_t n = e.end - e.begin;
    if (n > 0) f.read_at(t.data_ptr(), n, data_start + e.begin);
    if (e.dtype->type == torch::kBool) {
      // Bytes other than 0 and 1 are undefined behaviour for a torch bool tensor.
      const auto* b = static_cast<const uint8_t*>(t.data_ptr());
      for (uint64_t i = 0; i < n; ++i)
        if (b[i] > 1)
          throw checkpoint_error(path, "tensor '" + e.name + "': BOOL byte at file byte " +
                                           std::to_string(data_start + e.begin + i) + " is " +
                                           std::to_string(b[i]) + ", not 0 or 1");
    }
    out.emplace_back(e.name, std::move(t));
  }
  if (metadata) *metadata = std::move(meta);
  return out;
}

}  // namespace keel
