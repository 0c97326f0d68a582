// TensorBoard event files without TensorFlow: CRC-32C and TFRecord framing
// against known vectors, Event protobufs byte for byte against what
// TensorBoard's own protobuf classes serialize, and the metric-to-tag map.
// (tests/python/test_tensorboard.py reads a real run's files with the
// tensorboard package.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "monitor/tensorboard_writer.h"
#include "test_util.h"
#include "util/fs.h"

namespace {

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

uint32_t le32(const std::string& s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}

}  // namespace

TEST(TensorBoard, Crc32cKnownVectors) {
  EXPECT_EQ(keel::crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value
  const std::string zeros(32, '\0'), ones(32, '\xff');
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(keel::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(keel::crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(keel::crc32c(ascending.data(), ascending.size()), 0x46DD794Eu);
  EXPECT_EQ(keel::crc32c("56789", 5, keel::crc32c("1234", 4)), 0xE3069283u);  // continues
  EXPECT_EQ(keel::masked_crc32c("123456789", 9), 0xC78AB0E5u);  // TensorBoard's masked_crc32c
}

TEST(TensorBoard, EventsMatchTensorBoardsProtobufBytes) {
  // Expected bytes: tensorboard.compat.proto.event_pb2.Event(...).SerializeToString(),
  // framed with the writer of tensorboard.summary.writer.record_writer.
  EXPECT_EQ(keel::tfrecord_frame(keel::encode_file_version_event(1.5)),
            unhex("1800000000000000a37f4b2209000000000000f83f1a0d627261696e2e4576656e743a322a28646c"));
  EXPECT_EQ(keel::tfrecord_frame(keel::encode_scalars_event(1700000000.25, 300, {{"train/loss", 2.5}, {"val/loss", -0.125}})),
            unhex("3200000000000000241956ec0900001040fc54d94110ac022a240a110a0a747261696e2f6c6f737315000020400a0f0a087661"
                  "6c2f6c6f737315000000be84fe85be"));
}

TEST(TensorBoard, MetricsRecordBecomesTaggedScalars) {
  auto rec = nlohmann::json::parse(R"({"step": 20, "loss": 3.5, "lr": 0.001, "val_loss": 3.25, "val_ppl": 25.8,
      "attn": [{"max_logit": 12.5, "entropy": 1.0}, {"max_logit": 7.0, "entropy": 2.0}],
      "output": {"max_logit": 9.0}, "layer_grad_norms": {"blocks": [0.5, 0.25], "other": 0.1},
      "spikes": [{"step": 17, "signal": "loss", "value": 9.0}], "note": "text", "skipped": true})");
  rec["grad_norm"] = NAN;  // written as null in metrics.jsonl: left out
  keel::Scalars expected = {{"train/loss", 3.5}, {"train/lr", 0.001}, {"val/loss", 3.25}, {"val/ppl", 25.8},
                            {"attn/0/max_logit", 12.5}, {"attn/0/entropy", 1.0}, {"attn/1/max_logit", 7.0},
                            {"attn/1/entropy", 2.0}, {"output/max_logit", 9.0}, {"layer_grad_norms/blocks/0", 0.5},
                            {"layer_grad_norms/blocks/1", 0.25}, {"layer_grad_norms/other", 0.1}};
  auto got = keel::metrics_to_scalars(rec);
  std::sort(expected.begin(), expected.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, expected);
}

// A task evaluation's record (eval.tasks, eval.sets): tasks/<name>/<metric>, sets/<name>/loss.
TEST(TensorBoard, TaskAndSetResultsBecomeTaggedScalars) {
  auto rec = nlohmann::json::parse(R"({"step": 600, "tasks": {"builtin": {"acc": 0.5, "acc_stderr": 0.03,
      "acc_norm_stderr": null, "examples": 250}}, "sets": {"wiki": {"loss": 3.9, "ppl": 49.4}}, "tasks_eval_s": 0.6})");
  keel::Scalars expected = {{"tasks/builtin/acc", 0.5},  {"tasks/builtin/acc_stderr", 0.03},
                            {"tasks/builtin/examples", 250}, {"sets/wiki/loss", 3.9},
                            {"sets/wiki/ppl", 49.4},       {"train/tasks_eval_s", 0.6}};
  auto got = keel::metrics_to_scalars(rec);
  std::sort(expected.begin(), expected.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, expected);
}

TEST(TensorBoard, WriterFileIsASequenceOfValidRecords) {
  const std::string dir = keel_test::make_temp_dir("tensorboard");
  std::string path;
  {
    keel::TensorBoardWriter w(dir);
    path = w.path();
    w.add_scalars(10, {{"train/loss", 4.0}});
    w.add_scalars(20, {{"train/loss", 3.0}, {"train/lr", 1e-3}});
    w.add_scalars(30, {});  // nothing to write
  }
  EXPECT_TRUE(keel::is_tensorboard_event_file(keel::base_name(path)));
  EXPECT_EQ(keel::dir_name(path), dir);
  const std::string bytes = keel_test::read_file(path);
  size_t at = 0, records = 0;
  while (at < bytes.size()) {
    ASSERT_LE(at + 12, bytes.size());
    uint64_t n;
    std::memcpy(&n, bytes.data() + at, 8);
    EXPECT_EQ(le32(bytes, at + 8), keel::masked_crc32c(bytes.data() + at, 8));
    ASSERT_LE(at + 16 + n, bytes.size());
    EXPECT_EQ(le32(bytes, at + 12 + n), keel::masked_crc32c(bytes.data() + at + 12, n));
    at += 16 + n;
    ++records;
  }
  EXPECT_EQ(records, 3u);  // file_version + two scalar events
  EXPECT_NE(bytes.find("brain.Event:2"), std::string::npos);
  keel::remove_tree(dir);
}
