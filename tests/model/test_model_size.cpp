// model_size(): counted on the built model; equals its parameters for every
// shared feature config (feature_configs.h) and every shipped config, and matches independent hand counts of
// published architectures (GPT-2 small, OLMo 2 1B) and of the knobs a
// second, closed-form description once missed (QKV-norm, group-scope
// QK-Norm gains, sigmaReparam's gamma).
#include "model/model_size.h"

#include "config/config.h"
#include "feature_configs.h"
#include "test_util.h"
#include "optim/optimizer.h"
#include "util/fs.h"

using namespace keel_model_test;

namespace {

int64_t counted_params(keel::Transformer& m) {
  int64_t n = 0;
  for (const auto& p : m->parameters()) n += p.numel();
  return n;
}

TEST(ModelSize, TotalEqualsBuiltParameterCount) {
  for (const auto& c : feature_configs()) {
    SCOPED_TRACE(c.name);
    const auto cfg = c.config();
    auto model = keel::build_model(cfg, 1);
    const auto s = keel::model_size(cfg, 16);
    EXPECT_EQ(s.total, counted_params(model));
    EXPECT_EQ(s.embedding, model->wte.numel());
    EXPECT_EQ(s.head, cfg.tie_embeddings ? 0 : model->lm_head.numel());
    // matmul weights: the projections and the output head (tied or not).
    int64_t matmul = model->lm_head.numel();
    for (auto& item : model->named_parameters(true)) {
      const auto& n = item.key();
      for (const char* w : {".wq", ".wk", ".wv", ".wo", ".w_gate", ".w_up", ".w_down"})
        if (ends_with(n, w)) matmul += item.value().numel();
    }
    EXPECT_EQ(s.matmul, matmul);
    const double attn = 12.0 * cfg.n_layers * cfg.n_heads * cfg.head_dim() * 16;
    EXPECT_DOUBLE_EQ(s.flops_per_token, 6.0 * matmul + attn);
  }
}

// GPT-2 small without its learned position embeddings (keel uses RoPE):
// nanoGPT reports 124,439,808 parameters, 123.65M without wpe (1024 x 768).
TEST(ModelSize, Gpt2SmallByHand) {
  keel::ModelConfig c;
  c.vocab_size = 50257;
  c.pad_vocab_multiple = 1;
  c.max_seq_len = 1024;
  c.d_model = 768;
  c.n_layers = 12;
  c.n_heads = 12;
  c.n_kv_heads = 12;
  c.mlp = MlpKind::gelu;
  c.norm = NormKind::layernorm;
  c.bias = true;
  c.tie_embeddings = true;
  const int64_t d = 768, V = 50257, L = 12;
  const int64_t per_layer = (d * 3 * d + 3 * d)  // c_attn
                            + (d * d + d)          // c_proj
                            + (d * 4 * d + 4 * d)  // c_fc
                            + (4 * d * d + d)      // mlp c_proj
                            + 2 * 2 * d;           // ln_1, ln_2
  const int64_t hand = V * d + L * per_layer + 2 * d;  // wte (tied) + blocks + ln_f
  EXPECT_EQ(hand, 124439808 - 1024 * 768);
  EXPECT_EQ(keel::model_size(c, 1024).total, hand);
  // Padded to 64 (nanoGPT's 50304): 47 extra embedding rows.
  c.pad_vocab_multiple = 64;
  EXPECT_EQ(keel::model_size(c, 1024).total, hand + 47 * d);
  // FLOPs: 6N + 12 L H Q T, N = all matmul weights incl. the (tied) head.
  const int64_t matmul = L * 12 * d * d + 50304 * d;
  EXPECT_EQ(keel::model_size(c, 1024).matmul, matmul);
  EXPECT_DOUBLE_EQ(keel::model_size(c, 1024).flops_per_token, 6.0 * matmul + 12.0 * 12 * 12 * 64 * 1024);
}

// OLMo 2 1B: d 2048, 16 layers, 16 heads (MHA), SwiGLU 8192, vocab 100352,
// untied, reordered norm, QK RMSNorm over the whole projection.
// Published size: 1,484,916,736 parameters.
TEST(ModelSize, Olmo2OneBillionByHand) {
  keel::ModelConfig c;
  c.vocab_size = 100352;
  c.max_seq_len = 4096;
  c.d_model = 2048;
  c.n_layers = 16;
  c.n_heads = 16;
  c.n_kv_heads = 16;
  c.d_ff = 8192;
  c.mlp = MlpKind::swiglu;
  c.norm = NormKind::rms;
  c.norm_placement = NormPlacement::reordered;
  c.qk_norm.type = NormKind::rms;
  c.qk_norm.scope = QKNormScope::projection;
  const int64_t d = 2048, V = 100352, L = 16, F = 8192;
  const int64_t per_layer = 4 * d * d   // q, k, v, o
                            + 3 * d * F  // gate, up, down
                            + 2 * d      // post-attention and post-MLP norms
                            + 2 * d;     // q_norm, k_norm (whole projection)
  const int64_t hand = 2 * V * d + L * per_layer + d;
  EXPECT_EQ(hand, 1484916736);
  EXPECT_EQ(keel::model_size(c, 4096).total, hand);
  EXPECT_EQ(keel::model_size(c, 4096).embedding, V * d);
  EXPECT_EQ(keel::model_size(c, 4096).head, V * d);
}

// A tiny Gemma-like GQA config counted by hand: sandwich norms, per-head QK
// RMSNorm shared gain, untied, swiglu with the default 8/3 width rounded to 64.
TEST(ModelSize, TinyGqaSandwichByHand) {
  keel::ModelConfig c = tiny_config();
  c.vocab_size = 100;            // padded to 112 (multiple of 16)
  c.d_model = 64;
  c.n_heads = 4;                 // head_dim 16
  c.n_kv_heads = 2;
  c.d_ff = 0;                    // 8/3*64 = 170.67 -> 171 -> 192
  c.norm_placement = NormPlacement::sandwich;
  c.qk_norm.type = NormKind::rms;
  EXPECT_EQ(c.ffn_dim(), 192);
  const int64_t attn = 64 * 64 + 2 * (32 * 64) + 64 * 64;  // wq, wk+wv (2 kv heads x 16), wo
  const int64_t mlp = 3 * 64 * 192;
  const int64_t norms = 4 * 64;
  const int64_t qk = 16 + 16;
  const int64_t hand = 112 * 64 * 2 + 2 * (attn + mlp + norms + qk) + 64;
  EXPECT_EQ(hand, 14336 + 98880 + 64);  // embeddings + 2 layers of 49440 + final norm
  EXPECT_EQ(2 * (attn + mlp + norms + qk), 98880);
  EXPECT_EQ(keel::model_size(c, 16).total, hand);
  auto m = keel::build_model(c, 1);
  EXPECT_EQ(counted_params(m), hand);
}

// Tied embeddings: one tensor, counted once.
TEST(ModelSize, TiedHeadIsTheEmbedding) {
  auto cfg = tiny_config();
  cfg.tie_embeddings = true;
  auto m = keel::build_model(cfg, 1);
  EXPECT_EQ(m->lm_head.data_ptr(), m->wte.data_ptr());
  int64_t n_named = 0;
  for (auto& item : m->named_parameters(true)) n_named += item.key() == "lm_head";
  EXPECT_EQ(n_named, 0);
  torch::NoGradGuard no_grad;
  m->wte[3].fill_(0.5);
  EXPECT_EQ(m->lm_head[3][0].item<float>(), 0.5f);
  cfg.tie_embeddings = false;
  auto u = keel::build_model(cfg, 1);
  EXPECT_NE(u->lm_head.data_ptr(), u->wte.data_ptr());
}

// The shipped configs: every parameter the optimizer updates is counted once.
TEST(ModelSize, EveryShippedConfigCountsEveryParameter) {
  int checked = 0;
  for (const auto& name : keel::list_directory(keel_test::source_path("configs"))) {
    if (!ends_with(name, ".yaml")) continue;
    SCOPED_TRACE(name);
    auto cfg = keel::load_config(keel_test::source_path("configs/" + name));
    cfg.model.n_layers = std::min<int64_t>(cfg.model.n_layers, 2);  // the count is per layer; keep the test fast
    auto model = keel::build_model(cfg.model, 1);
    std::vector<keel::NamedParam> params;
    for (auto& item : model->named_parameters(true)) params.push_back({item.key(), item.value()});
    keel::AdamW opt(params, cfg.train);
    int64_t optimized = 0;
    for (const auto& p : opt.params()) optimized += p.param.numel();
    EXPECT_EQ(keel::model_size(*model, cfg.seq_len()).total, optimized);
    EXPECT_EQ(keel::model_size(cfg.model, cfg.seq_len()).total, optimized);
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

// The default-sized model of configs/default.yaml with one stabiliser each,
// counted by hand from the papers' definitions.
TEST(ModelSize, StabiliserParametersByHand) {
  keel::ModelConfig c;
  c.vocab_size = 4096;
  c.max_seq_len = 128;
  c.d_model = 128;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.mlp = MlpKind::swiglu;
  c.norm = NormKind::rms;
  c.tie_embeddings = false;
  const int64_t C = 128, V = 4096, L = 4, H = 4, K = 2, D = 32, F = c.ffn_dim();
  const int64_t attn = C * H * D + 2 * C * K * D + H * D * C, mlp = 3 * C * F;
  const int64_t base = 2 * V * C + L * (attn + mlp + 2 * C) + C;  // embedding, head, blocks, final norm
  EXPECT_EQ(keel::model_size(c, 128).total, base);
  {  // QKV-norm (Rybakov et al. 2024): a norm over the q, k, v outputs replaces the attention input norm
    auto q = c;
    q.qkv_norm = NormKind::layernorm;
    EXPECT_EQ(keel::model_size(q, 128).total, base + L * ((H + 2 * K) * D - C));
  }
  {  // QK-Norm over 2 groups of heads: queries 2 heads (64) at a time, keys 1 head (32): one shared gain each
    auto g = c;
    g.qk_norm.type = NormKind::rms;
    g.qk_norm.scope = QKNormScope::group;
    g.qk_norm.groups = 2;
    EXPECT_EQ(keel::model_size(g, 128).total, base + L * ((H / 2) * D + (K / 2) * D));
  }
  {  // sigmaReparam (Zhai et al. 2023): one learnable gamma per linear layer, 4 in attention, 3 in the MLP
    auto s = c;
    s.sigma_reparam = true;
    EXPECT_EQ(keel::model_size(s, 128).total, base + L * 7);
    EXPECT_EQ(keel::model_size(s, 128).matmul, keel::model_size(c, 128).matmul);
  }
}

TEST(ModelSize, FlopsConventionIsStated) {
  const auto s = keel::flops_convention();
  EXPECT_NE(s.find("6"), std::string::npos);
  EXPECT_NE(s.find("12"), std::string::npos);
}

}  // namespace
