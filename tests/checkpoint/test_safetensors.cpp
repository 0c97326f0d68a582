// safetensors I/O: bit-exact round trips for every dtype, the exact bytes of
// a small file, rejection of damaged files with a message naming the file,
// and the files the Python interop test (tests/python) exchanges.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>

#include "checkpoint/safetensors.h"
#include "checkpoint_test_util.h"
#include "test_util.h"
#include "util/fs.h"

namespace {

using keel::CheckpointError;
using keel::TensorMap;

using keel_test::read_file;
using keel_test::write_file;

// A file made by hand: 8-byte length, `header` as given (not padded), `data`.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}


// Same bytes, same dtype, same shape. NaN payloads and -0.0 included.
void expect_bit_equal(const torch::Tensor& a, const torch::Tensor& b, const std::string& name) {
  ASSERT_EQ(a.scalar_type(), b.scalar_type()) << name;
  ASSERT_EQ(a.sizes(), b.sizes()) << name;
  auto ac = a.contiguous(), bc = b.contiguous();
  if (ac.numel() == 0) return;  // no bytes, and no data pointer to hand memcmp (UBSan)
  ASSERT_EQ(0, std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.numel() * ac.element_size())) << name;
}

// Random bytes reinterpreted as `dtype` (so floats include NaNs, infinities,
// subnormals); bool gets random 0/1.
torch::Tensor random_tensor(torch::ScalarType dtype, std::vector<int64_t> shape) {
  int64_t numel = 1;
  for (auto d : shape) numel *= d;
  if (dtype == torch::kBool) return torch::randint(0, 2, shape).to(torch::kBool);
  const int64_t itemsize = c10::elementSize(dtype);
  auto bytes = torch::randint(0, 256, {numel * itemsize}, torch::kUInt8);
  return bytes.view(dtype).reshape(shape).clone();
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(1234);
    dir_ = keel_test::make_temp_dir("safetensors");
  }
  void TearDown() override {
    if (!HasFailure()) keel::remove_tree(dir_);
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string dir_;
};

TEST_F(SafetensorsTest, RoundTripEveryDtypeBitExact) {
  const std::vector<torch::ScalarType> dtypes = {
      torch::kFloat64, torch::kFloat32,       torch::kFloat16,     torch::kBFloat16, torch::kFloat8_e4m3fn,
      torch::kFloat8_e5m2, torch::kInt64,     torch::kInt32,       torch::kInt16,    torch::kInt8,
      torch::kUInt64,  torch::kUInt32,        torch::kUInt16,      torch::kUInt8,    torch::kBool};
  TensorMap in;
  for (auto dt : dtypes) {
    std::string tag = keel::safetensors_dtype_name(dt);
    in.emplace_back("w." + tag, random_tensor(dt, {3, 5, 2}));
    in.emplace_back("scalar." + tag, random_tensor(dt, {}));
    in.emplace_back("empty." + tag, random_tensor(dt, {0, 4}));
  }
  // Special float values survive untouched.
  in.emplace_back("specials", torch::tensor({0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f}));
  // Names out of alphabetical order: the file keeps the given order.
  in.emplace_back("a.last", torch::arange(7, torch::kInt64));
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "42"}, {"note", "ünïcode ✓"}};

  keel::write_safetensors(path("all.safetensors"), in, meta);
  std::map<std::string, std::string> meta_out;
  TensorMap out = keel::read_safetensors(path("all.safetensors"), &meta_out);

  EXPECT_EQ(meta_out, meta);
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].first, in[i].first) << "order differs at " << i;
    expect_bit_equal(out[i].second, in[i].second, in[i].first);
    EXPECT_TRUE(out[i].second.device().is_cpu());
  }
}

TEST_F(SafetensorsTest, NonContiguousAndViewsAreWrittenByValue) {
  auto base = torch::arange(24, torch::kFloat32).reshape({4, 6});
  TensorMap in = {{"t", base.t()},
                  {"slice", base.index({torch::indexing::Slice(), 2})},
                  {"expanded", torch::ones({1}).expand({5})}};
  keel::write_safetensors(path("v.safetensors"), in);
  TensorMap out = keel::read_safetensors(path("v.safetensors"));
  ASSERT_EQ(out.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(out[i].second, in[i].second)) << in[i].first;
  EXPECT_TRUE(out[0].second.is_contiguous());
}

// The exact bytes, checked without our reader, so a symmetric mistake in
// reader and writer cannot hide.
TEST_F(SafetensorsTest, FileLayoutMatchesTheSpec) {
  keel::write_safetensors(path("l.safetensors"),
                          {{"b", torch::tensor({1.0f, -2.0f})}, {"a", torch::tensor({7}, torch::kInt16)}},
                          {{"k", "v"}});
  std::string bytes = read_file(path("l.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u) << "header must be padded to 8 bytes";
  ASSERT_EQ(bytes.size(), 8 + n + 8 + 2);
  std::string header = bytes.substr(8, n);
  // Tensors in the given order (not sorted), the metadata first, spaces as padding.
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            R"({"__metadata__":{"k":"v"},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("a":{"dtype":"I16","shape":[1],"data_offsets":[8,10]}})");
  EXPECT_LT(header.size() - (header.find_last_not_of(' ') + 1), 8u);
  const unsigned char expected_data[] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0, 7, 0};  // 1.0f, -2.0f, int16 7
  EXPECT_EQ(bytes.substr(8 + n), std::string(reinterpret_cast<const char*>(expected_data), 10));
}

TEST_F(SafetensorsTest, EmptyFileHasOnlyAHeader) {
  keel::write_safetensors(path("e.safetensors"), {});
  std::map<std::string, std::string> meta = {{"x", "y"}};
  EXPECT_TRUE(keel::read_safetensors(path("e.safetensors"), &meta).empty());
  EXPECT_TRUE(meta.empty());
}

// ------------------------------------------------------------ writer errors

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  const std::string p = path("bad.safetensors");
  expect_error([&] { keel::write_safetensors(p, {{"x", torch::zeros({2})}, {"x", torch::zeros({1})}}); },
               {p, "'x'", "twice"});
  expect_error([&] { keel::write_safetensors(p, {{"", torch::zeros({2})}}); }, {p, "empty"});
  expect_error([&] { keel::write_safetensors(p, {{"__metadata__", torch::zeros({2})}}); }, {p, "reserved"});
  expect_error([&] { keel::write_safetensors(p, {{"c", torch::zeros({2}, torch::kComplexFloat)}}); },
               {p, "'c'", "not supported"});
  expect_error([&] { keel::write_safetensors(p, {{"u", torch::Tensor()}}); }, {p, "'u'", "undefined"});
}

TEST_F(SafetensorsTest, WriterReportsSystemErrors) {
  // A path below a regular file: ENOTDIR.
  write_file(path("plain"), "x");
  const std::string under_file = path("plain") + "/m.safetensors";
  expect_error([&] { keel::write_safetensors(under_file, {{"x", torch::zeros({2})}}); },
               {under_file, "cannot create", "Not a directory", "errno"});
  // /dev/full fails every write with ENOSPC: the disk-full message and hint.
  if (access("/dev/full", W_OK) == 0)
    expect_error([&] { keel::write_safetensors("/dev/full", {{"x", torch::zeros({1000})}}); },
                 {"/dev/full", "write failed", "No space left on device", "disk is full"});
}

// ------------------------------------------------------------ reader errors

TEST_F(SafetensorsTest, ReaderRejectsTruncatedFiles) {
  const std::string good = path("good.safetensors");
  keel::write_safetensors(good, {{"a", torch::ones({16})}, {"b", torch::ones({4}, torch::kInt64)}});
  const std::string bytes = read_file(good);
  const std::string p = path("cut.safetensors");

  write_file(p, bytes.substr(0, bytes.size() - 1));  // last data byte missing
  expect_error([&] { keel::read_safetensors(p); }, {p, "tensor 'b'", "truncated"});
  write_file(p, bytes.substr(0, 20));  // inside the header
  expect_error([&] { keel::read_safetensors(p); }, {p, "header length", "exceeds"});
  write_file(p, bytes.substr(0, 5));  // inside the length
  expect_error([&] { keel::read_safetensors(p); }, {p, "5 bytes", "too short"});
  write_file(p, "");
  expect_error([&] { keel::read_safetensors(p); }, {p, "0 bytes"});
  expect_error([&] { keel::read_safetensors(path("missing.safetensors")); },
               {path("missing.safetensors"), "No such file"});
}

TEST_F(SafetensorsTest, ReaderRejectsCorruptedHeader) {
  const std::string good = path("good.safetensors");
  keel::write_safetensors(good, {{"a", torch::ones({16})}});
  std::string bytes = read_file(good);
  const std::string p = path("bad.safetensors");

  std::string flipped = bytes;
  flipped[8] = 'X';  // the opening '{'
  write_file(p, flipped);
  expect_error([&] { keel::read_safetensors(p); }, {p, "not valid JSON", "bytes 8-"});

  std::string huge = bytes;
  huge[7] = 0x7f;  // length ~ 2^63
  write_file(p, huge);
  expect_error([&] { keel::read_safetensors(p); }, {p, "header length", "exceeds"});

  write_file(p, raw_file("[1,2]", ""));
  expect_error([&] { keel::read_safetensors(p); }, {p, "not a JSON object"});
  write_file(p, raw_file(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", "abcd"));
  expect_error([&] { keel::read_safetensors(p); }, {p, "'a'", "unknown dtype \"F33\""});
  write_file(p, raw_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd"));
  expect_error([&] { keel::read_safetensors(p); }, {p, "'a'", "shape"});
  write_file(p, raw_file(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", "abcd"));
  expect_error([&] { keel::read_safetensors(p); }, {p, "'a'", "\"shape\""});
  write_file(p, raw_file(R"({"__metadata__":{"k":1}})", ""));
  expect_error([&] { keel::read_safetensors(p); }, {p, "__metadata__", "'k'", "not a string"});
  write_file(p, raw_file(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x07", 2)));
  expect_error([&] { keel::read_safetensors(p); }, {p, "'a'", "BOOL byte", "is 7"});
  // A 400 KB header of nested arrays (it crashed `keel import-hf`): refused
  // before any value that deep exists; and a hostile entry is quoted only in part.
  write_file(p, raw_file(std::string(200000, '[') + std::string(200000, ']'), ""));
  expect_error([&] { keel::read_safetensors(p); }, {p, "nested deeper than 64 levels"});
  write_file(p, raw_file("{\"a\": [" + std::string(3000, '1') + ", 2]}", ""));
  try {
    keel::read_safetensors(p);
    ADD_FAILURE() << "accepted";
  } catch (const keel::Error& e) {
    EXPECT_LT(std::string(e.what()).size(), 600u) << "the entry must be quoted only in part";
  }
}

TEST_F(SafetensorsTest, ReaderRejectsBadOffsets) {
  const std::string p = path("off.safetensors");
  const std::string data(16, '\0');
  // Byte count does not match the shape.
  write_file(p, raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", data));
  expect_error([&] { keel::read_safetensors(p); }, {p, "'a'", "span 16 bytes", "needs 12"});
  // Overlap.
  write_file(p, raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", std::string(12, '\0')));
  expect_error([&] { keel::read_safetensors(p); }, {p, "'b'", "overlaps tensor 'a'"});
  // Out of range.
  write_file(p, raw_file(R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", data));
  expect_error([&] { keel::read_safetensors(p); }, {p, "'a'", "truncated"});
  // A gap.
  write_file(p, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data));
  expect_error([&] { keel::read_safetensors(p); }, {p, "'a'", "gap of 8 bytes"});
  // Trailing bytes.
  write_file(p, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data));
  expect_error([&] { keel::read_safetensors(p); }, {p, "8 trailing bytes"});
  // end < begin.
  write_file(p, raw_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", data));
  expect_error([&] { keel::read_safetensors(p); }, {p, "'a'", "end before"});
  // A shape whose byte count overflows 64 bits.
  write_file(p, raw_file(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""));
  expect_error([&] { keel::read_safetensors(p); }, {p, "'a'", "overflows"});
  // No bytes, but more elements than LibTorch can count: a clear error
  // naming the file, not a c10 backtrace (issue 20, defect 12).
  write_file(p, raw_file(R"({"a":{"dtype":"F32","shape":[0,4611686018427387904,4611686018427387904],)"
                         R"("data_offsets":[0,0]}})", ""));
  expect_error([&] { keel::read_safetensors(p); }, {p, "'a'", "overflows"});
}

// Accepts what other writers produce: keys in any order, unpadded headers,
// extra whitespace.
TEST_F(SafetensorsTest, ReaderAcceptsForeignLayout) {
  const std::string p = path("foreign.safetensors");
  std::string data(8, '\0');
  float one = 1.0f;
  int32_t seven = 7;
  std::memcpy(&data[0], &seven, 4);
  std::memcpy(&data[4], &one, 4);
  write_file(p, raw_file(R"( {"z":{"shape":[1],"data_offsets":[4,8],"dtype":"F32"},)"
                          R"( "y":{"data_offsets":[0,4],"dtype":"I32","shape":[]}})", data));
  TensorMap out = keel::read_safetensors(p);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].first, "y");  // data order
  EXPECT_EQ(out[0].second.dim(), 0);
  EXPECT_EQ(out[0].second.item<int32_t>(), 7);
  EXPECT_EQ(out[1].second.item<float>(), 1.0f);
}

// ------------------------------------------------------ Python interop files
// Skipped unless KEEL_INTEROP_DIR is set; tests/python/test_safetensors_interop.py
// sets it and checks the other side. The values are a formula both sides compute.

const char* interop_dir() { return std::getenv("KEEL_INTEROP_DIR"); }

TensorMap interop_tensors() {
  auto base = [](std::vector<int64_t> shape) {
    return torch::arange(1, 1 + c10::multiply_integers(shape), torch::kFloat64).reshape(shape);
  };
  TensorMap m;
  m.emplace_back("f64", base({2, 3}) * 0.37 - 1.0);
  m.emplace_back("f32", (base({4, 3}) * 0.37 - 2.0).to(torch::kFloat32));
  m.emplace_back("bf16", (base({3, 4}) * 0.37 - 2.0).to(torch::kBFloat16));
  m.emplace_back("f16", (base({5}) * 0.37 - 1.0).to(torch::kFloat16));
  m.emplace_back("i64", (base({2, 2}) * 1e10 - 3e10).to(torch::kInt64));
  m.emplace_back("i32", (base({7}) * 1000 - 3000).to(torch::kInt32));
  m.emplace_back("u8", (base({2, 5}) * 23).remainder(256).to(torch::kUInt8));
  m.emplace_back("bool", base({6}).remainder(3).eq(0));
  m.emplace_back("scalar", torch::tensor(3.5, torch::kFloat32).reshape({}));
  m.emplace_back("empty", torch::zeros({0, 3}, torch::kFloat32));
  m.emplace_back("specials", torch::tensor({0.0f, -0.0f, INFINITY, -INFINITY, NAN}));
  return m;
}

TEST(Interop, WriteFileForPython) {
  if (!interop_dir()) GTEST_SKIP() << "KEEL_INTEROP_DIR not set (run by tests/python)";
  keel::write_safetensors(std::string(interop_dir()) + "/from_cpp.safetensors", interop_tensors(),
                          {{"writer", "keel"}, {"step", "123"}});
}

TEST(Interop, ReadFileFromPython) {
  if (!interop_dir()) GTEST_SKIP() << "KEEL_INTEROP_DIR not set (run by tests/python)";
  std::map<std::string, std::string> meta;
  TensorMap got = keel::read_safetensors(std::string(interop_dir()) + "/from_python.safetensors", &meta);
  EXPECT_EQ(meta, (std::map<std::string, std::string>{{"writer", "python"}, {"step", "456"}}));
  TensorMap want = interop_tensors();
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    auto it = std::find_if(got.begin(), got.end(), [&name = name](const auto& p) { return p.first == name; });
    ASSERT_NE(it, got.end()) << name;
    expect_bit_equal(it->second, w, name);
  }
}

}  // namespace
