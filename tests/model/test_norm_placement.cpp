// Block layouts of docs/papers.md#block-layouts: every norm placement equals a hand-written
// reference forward (fp64) built from the model's own parameter tensors.
#include "test_model_reference.h"

using namespace keel_model_test;

namespace {

struct PlacementCase {
  std::string placement;
  std::string norm;  // rms | layernorm
  std::string mlp;   // swiglu | gelu
  bool bias;
  bool tied;
};

keel::ModelConfig placement_config(const PlacementCase& c) {
  auto cfg = tiny_config();
  cfg.norm_placement = as<NormPlacement>(c.placement);
  cfg.norm = as<NormKind>(c.norm);
  cfg.mlp = as<MlpKind>(c.mlp);
  cfg.bias = c.bias;
  cfg.tie_embeddings = c.tied;
  return cfg;
}

// One placement, three variants (rms/swiglu; layernorm/gelu/bias; layernorm/swiglu/tied).
void check_placement(const std::string& placement) {
  const std::vector<PlacementCase> variants = {{placement, "rms", "swiglu", false, false},
                                               {placement, "layernorm", "gelu", true, false},
                                               {placement, "layernorm", "swiglu", false, true}};
  for (const auto& c : variants) {
    SCOPED_TRACE(c.placement + "/" + c.norm + "/" + c.mlp + (c.bias ? "/bias" : "") + (c.tied ? "/tied" : ""));
    auto cfg = placement_config(c);
    auto model = make_model(cfg, 11);
    perturb(model, 12);
    auto idx = random_tokens(cfg, 2, 9);
    torch::NoGradGuard no_grad;
    auto want = ref_forward(model, idx);
    auto got = model->forward(idx);
    ASSERT_EQ(got.scalar_type(), torch::kFloat64);
    EXPECT_TENSOR_NEAR(got, want, 1e-10, 1e-12);
    // Not vacuous: the real-vocab logits are O(1) and vary.
    EXPECT_GT(want.narrow(-1, 0, cfg.vocab_size).std().item<double>(), 1e-2);
    // The explicit attention path (taken when statistics are requested) gives
    // the same logits; it scores in fp32, hence the looser tolerance.
    std::vector<keel::AttentionStats> stats;
    keel::ForwardOptions opt;
    opt.attention_stats = &stats;
    EXPECT_TENSOR_NEAR(model->forward(idx, opt), want, 1e-5, 1e-6);
    EXPECT_EQ(stats.size(), static_cast<size_t>(cfg.n_layers));
  }
}

// pre (GPT-2, Llama): x + f(norm(x)), final norm.
TEST(NormPlacement, PreMatchesReference) { check_placement("pre"); }
// post (original Transformer): norm(x + f(x)), no final norm.
TEST(NormPlacement, PostMatchesReference) { check_placement("post"); }
// reordered (OLMo 2): x + norm(f(x)), final norm.
TEST(NormPlacement, ReorderedMatchesReference) { check_placement("reordered"); }
// sandwich (Gemma 2/3): x + norm_post(f(norm_pre(x))), final norm.
TEST(NormPlacement, SandwichMatchesReference) { check_placement("sandwich"); }

// The module layout each placement needs: post has no final norm, sandwich
// has a second norm pair per block, the others exactly two norms per block.
TEST(NormPlacement, ModulesPerLayout) {
  for (const char* p : {"pre", "post", "reordered", "sandwich"}) {
    SCOPED_TRACE(p);
    auto cfg = tiny_config();
    cfg.norm_placement = as<NormPlacement>(p);
    auto model = make_model(cfg);
    EXPECT_EQ(static_cast<bool>(model->final_norm), std::string(p) != "post");
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
      auto* b = block(model, l);
      EXPECT_TRUE(static_cast<bool>(b->attn_norm));
      EXPECT_TRUE(static_cast<bool>(b->mlp_norm));
      EXPECT_EQ(static_cast<bool>(b->attn_post_norm), std::string(p) == "sandwich");
      EXPECT_EQ(static_cast<bool>(b->mlp_post_norm), std::string(p) == "sandwich");
    }
  }
}

// Same parameters, different layout: different function. (Guards against a
// reference that would accept any placement.) Weights are copied by name;
// the sandwich-only post norms stay at their init.
TEST(NormPlacement, LayoutsAreDistinctFunctions) {
  std::vector<torch::Tensor> outs;
  auto idx = random_tokens(tiny_config(), 1, 8);
  auto base_cfg = tiny_config();
  base_cfg.norm_placement = NormPlacement::sandwich;
  auto base = make_model(base_cfg, 5);
  perturb(base, 6);
  auto base_params = base->named_parameters(true);
  for (const char* p : {"pre", "post", "reordered", "sandwich"}) {
    auto cfg = tiny_config();
    cfg.norm_placement = as<NormPlacement>(p);
    auto m = make_model(cfg, 5);
    torch::NoGradGuard no_grad;
    for (auto& item : m->named_parameters(true)) item.value().copy_(base_params[item.key()]);
    outs.push_back(m->forward(idx));
  }
  for (size_t i = 0; i < outs.size(); ++i)
    for (size_t j = i + 1; j < outs.size(); ++j) EXPECT_GT(max_abs_diff(outs[i], outs[j]), 1e-3) << i << " vs " << j;
}

// Post-LN ends every block in a norm: with unit gain and no bias, each
// position of the block output has RMS 1 (rms norm) even for a huge input scale.
TEST(NormPlacement, PostBlockOutputIsNormalised) {
  auto cfg = tiny_config();
  cfg.norm_placement = NormPlacement::post;
  cfg.n_layers = 1;
  auto model = make_model(cfg);
  torch::NoGradGuard no_grad;
  auto x = torch::randn({2, 6, cfg.d_model}, torch::kFloat64) * 100;
  auto rope = keel::make_rope_tables(6, cfg.head_dim(), cfg.rope_theta, torch::kCPU);
  auto y = block(model, 0)->forward(x, rope, nullptr);
  auto rms = y.pow(2).mean(-1).sqrt();
  EXPECT_TENSOR_NEAR(rms, torch::ones_like(rms), 0, 1e-4);  // eps 1e-5 shrinks it slightly
  // Pre-LN keeps the residual stream: output scale follows the input.
  cfg.norm_placement = NormPlacement::pre;
  auto pre = make_model(cfg);
  auto y2 = block(pre, 0)->forward(x, rope, nullptr);
  EXPECT_GT(y2.pow(2).mean(-1).sqrt().min().item<double>(), 10.0);
}

}  // namespace
