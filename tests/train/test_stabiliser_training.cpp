// The stabilisers in real training runs (issue 11): sigmaReparam's
// power-iteration vectors are checkpointed and a resumed run is bit-exact;
// QK-clip rescales heads during training and is refused with QK-Norm;
// QKV-norm and logit clamping train. A CompleteP run (width and depth away
// from its base) prints its multipliers and resumes bit-exact too.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "test_util.h"
#include "util/fs.h"

using keel_test::run_keel;

namespace {

std::string g_dir;

std::string args(const std::string& name, const std::string& extra) {
  return "train " + g_dir + "/base.yaml --set run.name=" + name + " --set run.out_dir=" + g_dir + "/runs " + extra;
}

std::vector<nlohmann::json> metrics(const std::string& name) {
  std::vector<nlohmann::json> out;
  std::ifstream in(g_dir + "/runs/" + name + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

class StabiliserTraining : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_dir = keel_test::make_temp_dir("stabiliser_training");
    keel_test::write_file(g_dir + "/corpus.txt", keel_test::make_sentence_corpus(5, 200));
    keel_test::write_file(
        g_dir + "/base.yaml",
        "model: {vocab_size: 320, max_seq_len: 32, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2}\n"
        "data: {dir: " + g_dir + "/data, sources: [" + g_dir + "/corpus.txt], doc_separator: '%'}\n"
        "train: {max_steps: 8, batch_size: 4, lr: 1.0e-2, warmup_steps: 2, log_every: 1, eval_every: 4, "
        "eval_batches: 1, threads: 1}\n"
        "checkpoint: {every: 4}\n"
        "monitor: {every: 2}\n");
    std::string out;
    ASSERT_EQ(run_keel("prepare " + g_dir + "/base.yaml --quiet", &out), 0) << out;
  }
  static void TearDownTestSuite() { keel::remove_tree(g_dir); }
};

}  // namespace

TEST_F(StabiliserTraining, SigmaReparamResumesBitExact) {
  std::string out;
  ASSERT_EQ(run_keel(args("sigma", "--set model.sigma_reparam=true"), &out), 0) << out;
  ASSERT_EQ(run_keel(args("sigma_resumed", "--set model.sigma_reparam=true --stop-after-step 4"), &out), 0) << out;
  ASSERT_EQ(run_keel(args("sigma_resumed", "--set model.sigma_reparam=true --resume auto"), &out), 0) << out;
  auto a = metrics("sigma"), b = metrics("sigma_resumed");
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 8u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << "step " << i + 1;
  // The power-iteration vectors are in the checkpoint, and they moved.
  auto saved = keel::read_safetensors(g_dir + "/runs/sigma/checkpoints/step_00000008/model.safetensors");
  std::map<std::string, torch::Tensor> by_name(saved.begin(), saved.end());
  ASSERT_TRUE(by_name.count("blocks.0.attn.wq_sigma.u"));
  ASSERT_TRUE(by_name.count("blocks.0.attn.wq_sigma.gamma"));
  EXPECT_NE(by_name["blocks.0.attn.wq_sigma.gamma"].item<double>(), 1.0);  // gamma is trained
}

TEST_F(StabiliserTraining, CompletePRunPrintsItsScalingAndResumesBitExact) {
  const std::string cp = "--set model.parametrization=completep --set model.mup.base_width=16 "
                         "--set model.mup.base_depth=1 --set train.optimizer=muon";
  std::string out;
  ASSERT_EQ(run_keel(args("cp", cp), &out), 0) << out;
  ASSERT_EQ(run_keel(args("cp_resumed", cp + " --stop-after-step 4"), &out), 0) << out;
  ASSERT_EQ(run_keel(args("cp_resumed", cp + " --resume auto"), &out), 0) << out;
  auto a = metrics("cp"), b = metrics("cp_resumed");
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 8u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << "step " << i + 1;
  // The settings table names the multipliers: width x2, depth x2.
  const std::string log = keel_test::read_file(g_dir + "/runs/cp/train.log");
  EXPECT_NE(log.find("completep: base d 16"), std::string::npos) << log;
  EXPECT_NE(log.find("logits x0.5, residual branches x0.5, AdamW eps x0.25"), std::string::npos) << log;
  EXPECT_NE(log.find("matrix-like (Muon)"), std::string::npos) << log;
}

TEST_F(StabiliserTraining, QkClipRescalesHeadsDuringTraining) {
  std::string out;
  ASSERT_EQ(run_keel(args("clip", "--set train.qk_clip_tau=0.1"), &out), 0) << out;
  double clipped = 0;
  for (const auto& m : metrics("clip")) {
    EXPECT_TRUE(std::isfinite(m["loss"].get<double>()));
    if (m.contains("qk_clipped_heads")) clipped += m["qk_clipped_heads"].get<double>();
  }
  EXPECT_GT(clipped, 0) << "tau 0.1 is below the logits (about 0.5): heads must have been clipped";
  // With a tau no logit reaches, nothing is clipped and training is unchanged.
  ASSERT_EQ(run_keel(args("clip_high", "--set train.qk_clip_tau=1e6"), &out), 0) << out;
  ASSERT_EQ(run_keel(args("no_clip", ""), &out), 0) << out;
  auto hi = metrics("clip_high"), none = metrics("no_clip");
  ASSERT_EQ(hi.size(), none.size());
  for (size_t i = 0; i < hi.size(); ++i) {
    EXPECT_NEAR(hi[i]["loss"].get<double>(), none[i]["loss"].get<double>(), 1e-5) << "step " << i + 1;
    EXPECT_EQ(hi[i].value("qk_clipped_heads", 0.0), 0.0);
  }
  // QK-Norm would undo the rescaling: refused, naming the key.
  EXPECT_EQ(run_keel(args("clip_qknorm", "--set train.qk_clip_tau=1 --set model.qk_norm.type=rms"), &out), 2);
  EXPECT_NE(out.find("train.qk_clip_tau"), std::string::npos) << out;
}

TEST_F(StabiliserTraining, QkvNormAndClampTrain) {
  std::string out;
  ASSERT_EQ(run_keel(args("qkv", "--set model.qkv_norm=layernorm"), &out), 0) << out;
  ASSERT_EQ(run_keel(args("clamp", "--set model.attn_logit_clamp=5"), &out), 0) << out;
  ASSERT_EQ(run_keel(args("group", "--set model.qk_norm.type=rms --set model.qk_norm.scope=group "
                                   "--set model.qk_norm.groups=2"),
                     &out),
            0)
      << out;
  for (const char* run : {"qkv", "clamp", "group"}) {
    auto m = metrics(run);
    ASSERT_EQ(m.size(), 8u) << run;
    EXPECT_LT(m.back()["loss"].get<double>(), m.front()["loss"].get<double>()) << run;
  }
  // QKV-norm replaces the pre-attention norm: other layouts are refused.
  EXPECT_EQ(run_keel(args("qkv_post", "--set model.qkv_norm=rms --set model.norm_placement=post"), &out), 2);
  EXPECT_NE(out.find("model.qkv_norm"), std::string::npos) << out;
  EXPECT_EQ(run_keel(args("bad_group", "--set model.qk_norm.type=rms --set model.qk_norm.scope=group "
                                       "--set model.qk_norm.groups=3"),
                     &out),
            2);
  EXPECT_NE(out.find("model.qk_norm.groups"), std::string::npos) << out;
}
