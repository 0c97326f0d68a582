// train.activation_checkpointing: the gradients of every model feature config,
// with every block or every other block recomputed in backward, or every
// block keeping its linear outputs (selective), are bit for bit those of a
// plain backward, in fp32 and under bf16 autocast, with
// document masking; the forward's statistics are recorded once; evaluation
// (no grad) keeps nothing to recompute.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "feature_configs.h"
#include "model/chunked_loss.h"
#include "model/fused_ops.h"
#include "model/init.h"
#include "model/transformer.h"
#include "train/device.h"
#include "train/op_counter.h"

using namespace keel;
using keel_model_test::feature_configs;

namespace {

struct Grads {
  torch::Tensor loss;
  std::vector<torch::Tensor> grads;
};

Grads loss_and_grads(Transformer& model, const torch::Tensor& idx, bool bf16) {
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  LossParts loss;
  {
    AutocastScope autocast(bf16, torch::kCPU);  // as the training step: backward outside it
    loss = model_loss(*model, idx.narrow(1, 0, idx.size(1) - 1), idx.narrow(1, 1, idx.size(1) - 1), 1e-4, 0);
  }
  loss.total.backward();
  Grads g{loss.total.detach(), {}};
  for (auto& p : model->parameters()) g.grads.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return g;
}

// Modes to check against none: every block, every other block, and every
// block keeping its linear layers' outputs.
const std::vector<std::pair<ActivationCheckpointing, int64_t>> kModes = {{ActivationCheckpointing::full, 1},
                                                                          {ActivationCheckpointing::every_n, 2},
                                                                          {ActivationCheckpointing::selective, 1}};
// Selective recompute replays each linear with a backward of its own: on
// keel's oneDNN path the very backward a plain linear runs, on at::linear's
// (bf16 autocast, the composite kernels CI also runs) the same matmuls as
// ATen's derivative. Both give the same bits on the CPU.

void expect_identical(const ModelConfig& cfg, const std::string& name, bool bf16, const DocumentMasking& docs = {}) {
  Transformer model = build_model(cfg, 7);
  model->set_documents(docs);
  auto idx = torch::randint(0, cfg.vocab_size, {2, cfg.max_seq_len + 1}, torch::kInt64);
  if (docs.enabled()) idx.index_put_({0, 5}, docs.eos_id);
  const Grads plain = loss_and_grads(model, idx, bf16);
  for (const auto& [mode, k] : kModes) {
    model->set_activation_checkpointing(mode, k);
    const Grads ck = loss_and_grads(model, idx, bf16);
    model->set_activation_checkpointing(ActivationCheckpointing::none, 1);
    EXPECT_TRUE(torch::equal(ck.loss, plain.loss)) << name << " mode " << static_cast<int>(mode);
    ASSERT_EQ(ck.grads.size(), plain.grads.size());
    for (size_t i = 0; i < ck.grads.size(); ++i) {
      ASSERT_EQ(ck.grads[i].defined(), plain.grads[i].defined()) << name << " parameter " << i;
      if (!plain.grads[i].defined()) continue;
      EXPECT_TRUE(torch::equal(ck.grads[i], plain.grads[i])) << name << (bf16 ? " bf16" : " fp32") << " mode " << static_cast<int>(mode) << " parameter "
                        << i << ": max diff " << (ck.grads[i] - plain.grads[i]).abs().max().item<double>();
    }
  }
}

// The recomputing nodes in the graph behind y: one per checkpointed block.
int64_t checkpoint_nodes(const torch::Tensor& y) {
  std::vector<torch::autograd::Node*> todo{y.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  int64_t n = 0;
  while (!todo.empty()) {
    auto* node = todo.back();
    todo.pop_back();
    if (!node || !seen.insert(node).second) continue;
    n += node->name().find("CheckpointFn") != std::string::npos;
    for (const auto& e : node->next_edges()) todo.push_back(e.function.get());
  }
  return n;
}

}  // namespace

TEST(ActivationCheckpoint, GradientsBitIdenticalForEveryFeatureConfig) {
  torch::manual_seed(0);
  int64_t configs = 0;
  for (const auto& f : feature_configs()) {
    ModelConfig cfg = f.config();
    if (cfg.n_layers < 2) cfg.n_layers = 3;  // every_n 2 then leaves a block plain
    expect_identical(cfg, f.name, false);
    ++configs;
  }
  EXPECT_GT(configs, 30);
}

TEST(ActivationCheckpoint, GradientsBitIdenticalUnderBf16AutocastAndDocumentMasks) {
  torch::manual_seed(1);
  for (const auto& f : feature_configs()) {
    if (f.name != "tiny" && f.name != "attn_softcap" && f.name != "norm_unit_offset_qk" && f.name != "gelu") continue;
    ModelConfig cfg = f.config();
    cfg.n_layers = 3;
    expect_identical(cfg, f.name, true);
    expect_identical(cfg, f.name + " document mask", false, DocumentMasking{3, true});
    // Both CPU linears, whichever this CPU's default is (oneDNN on AMD, at::linear on Intel).
    for (bool onednn : {false, true}) {
      set_onednn_linear(onednn);
      expect_identical(cfg, f.name + (onednn ? " oneDNN linear" : " ATen linear"), false);
    }
    reset_onednn_linear();
  }
}

TEST(ActivationCheckpoint, StatisticsOnceAndNothingKeptWithoutGrad) {
  ModelConfig cfg = keel_model_test::tiny_config();
  Transformer model = build_model(cfg, 3);
  auto idx = torch::randint(0, cfg.vocab_size, {2, cfg.max_seq_len}, torch::kInt64);
  ActivationRms plain_rms, ck_rms;
  ForwardOptions o;
  o.activations = &plain_rms;
  auto plain = model->forward_hidden(idx, o);
  model->set_activation_checkpointing(ActivationCheckpointing::full, 1);
  o.activations = &ck_rms;
  auto y = model->forward_hidden(idx, o);
  EXPECT_EQ(checkpoint_nodes(y), cfg.n_layers);
  EXPECT_EQ(checkpoint_nodes(plain), 0);
  y.sum().backward();  // the recompute must not add entries
  EXPECT_EQ(ck_rms.names, plain_rms.names);
  for (size_t i = 0; i < ck_rms.values.size(); ++i) EXPECT_TRUE(torch::equal(ck_rms.values[i], plain_rms.values[i]));
  {
    torch::NoGradGuard no_grad;  // evaluation: a plain forward
    auto e = model->forward_hidden(idx);
    EXPECT_FALSE(e.requires_grad());
  }
}

// Selective recompute multiplies no more than a plain step: the recompute
// takes the forward's linear outputs back instead of running the matmuls
// again, where full recompute runs every block's matmuls twice. (The
// gradient tests above cannot tell: recomputing a linear gives the same bits.)
TEST(ActivationCheckpoint, SelectiveRunsNoLinearTwice) {
  ModelConfig cfg = feature_configs().front().config();
  cfg.n_layers = 3;
  Transformer model = build_model(cfg, 7);
  auto idx = torch::randint(0, cfg.vocab_size, {2, cfg.max_seq_len + 1}, torch::kInt64);
  auto matmuls = [&](ActivationCheckpointing mode) {
    model->set_activation_checkpointing(mode, 1);
    OpCounter counter;
    loss_and_grads(model, idx, false);
    int64_t n = 0;
    for (const auto& [name, count] : counter.counts().by_name)
      if (name.find("linear") != std::string::npos || name.find("mm") != std::string::npos) n += count;
    return n;
  };
  const int64_t none = matmuls(ActivationCheckpointing::none);
  EXPECT_GT(none, 0);
  EXPECT_EQ(matmuls(ActivationCheckpointing::selective), none);
  EXPECT_GT(matmuls(ActivationCheckpointing::full), none);
}
