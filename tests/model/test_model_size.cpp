// model_size(): the closed-form parameter count equals the built model's
// parameters for many configs, and matches independent hand counts of
// published architectures (GPT-2 small, OLMo 2 1B).
#include "model/model_size.h"

#include "test_model_reference.h"

using namespace keel_model_test;

namespace {

int64_t counted_params(keel::Transformer& m) {
  int64_t n = 0;
  for (const auto& p : m->parameters()) n += p.numel();
  return n;
}

struct SizeCase {
  std::string name;
  std::function<void(keel::ModelConfig&)> edit;
};

std::vector<SizeCase> size_cases() {
  using C = keel::ModelConfig;
  std::vector<SizeCase> v = {
      {"default_tiny", [](C&) {}},
      {"tied", [](C& c) { c.tie_embeddings = true; }},
      {"bias", [](C& c) { c.bias = true; }},
      {"gelu", [](C& c) { c.mlp = "gelu"; }},
      {"gelu_bias_layernorm_tied", [](C& c) { c.mlp = "gelu"; c.bias = true; c.norm = "layernorm"; c.tie_embeddings = true; }},
      {"swiglu_default_dff", [](C& c) { c.d_ff = 0; }},
      {"gelu_default_dff", [](C& c) { c.d_ff = 0; c.mlp = "gelu"; }},
      {"geglu_tanh_default_dff_bias", [](C& c) { c.d_ff = 0; c.mlp = "geglu_tanh"; c.bias = true; }},
      {"norm_unit_offset_qk", [](C& c) { c.norm_unit_offset = true; c.qk_norm.type = "rms"; }},
      {"mqa_3_layers", [](C& c) { c.n_kv_heads = 1; c.n_layers = 3; }},
      {"mha_1_layer", [](C& c) { c.n_kv_heads = 4; c.n_layers = 1; }},
      {"no_padding", [](C& c) { c.pad_vocab_multiple = 1; }},
      {"embed_layernorm", [](C& c) { c.embed_norm = "layernorm"; }},
      {"embed_layernorm_bias_rms_blocks", [](C& c) { c.embed_norm = "layernorm"; c.bias = true; c.norm = "rms"; }},
      {"embed_layernorm_bias_layernorm_blocks", [](C& c) { c.embed_norm = "layernorm"; c.bias = true; c.norm = "layernorm"; }},
      {"embed_scale", [](C& c) { c.embed_norm = "scale_sqrt_d"; }},
      {"embed_rmsnorm", [](C& c) { c.embed_norm = "rmsnorm"; }},
      {"rms_bias", [](C& c) { c.norm = "rms"; c.bias = true; }},
  };
  for (const char* p : {"pre", "post", "reordered", "sandwich"}) {
    v.push_back({std::string("placement_") + p, [p](C& c) { c.norm_placement = p; }});
    v.push_back({std::string("placement_") + p + "_layernorm_bias",
                 [p](C& c) { c.norm_placement = p; c.norm = "layernorm"; c.bias = true; }});
  }
  for (const char* type : {"rms", "layernorm", "l2"})
    for (const char* scope : {"head", "projection"})
      for (int gain = 0; gain < 3; ++gain) {  // off, shared, per head
        if (std::string(scope) == "projection" && gain == 2) continue;
        for (bool bias : {false, true}) {
          if (bias && std::string(type) != "layernorm") continue;
          std::string name = std::string("qk_") + type + "_" + scope + "_gain" + std::to_string(gain) + (bias ? "_bias" : "");
          v.push_back({name, [=](C& c) {
                         c.qk_norm.type = type;
                         c.qk_norm.scope = scope;
                         c.qk_norm.gain = gain > 0;
                         c.qk_norm.gain_per_head = gain == 2;
                         c.qk_norm.bias = bias;
                       }});
        }
      }
  for (bool learnable : {false, true})
    for (bool per_head : {false, true})
      v.push_back({std::string("l2_temperature") + (learnable ? "_learnable" : "_fixed") + (per_head ? "_per_head" : ""),
                   [=](C& c) {
                     c.qk_norm.type = "l2";
                     c.qk_norm.temperature_learnable = learnable;
                     c.qk_norm.temperature_per_head = per_head;
                   }});
  v.push_back({"everything", [](C& c) {
                 c.norm_placement = "sandwich";
                 c.norm = "layernorm";
                 c.bias = true;
                 c.mlp = "gelu";
                 c.qk_norm.type = "layernorm";
                 c.qk_norm.bias = true;
                 c.qk_norm.gain_per_head = true;
                 c.embed_norm = "layernorm";
                 c.attn_softcap = 50.0;
                 c.final_softcap = 30.0;
                 c.n_layers = 3;
               }});
  return v;
}

TEST(ModelSize, TotalEqualsBuiltParameterCount) {
  for (const auto& c : size_cases()) {
    SCOPED_TRACE(c.name);
    auto cfg = tiny_config();
    c.edit(cfg);
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
  c.mlp = "gelu";
  c.norm = "layernorm";
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
  c.mlp = "swiglu";
  c.norm = "rms";
  c.norm_placement = "reordered";
  c.qk_norm.type = "rms";
  c.qk_norm.scope = "projection";
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
  c.norm_placement = "sandwich";
  c.qk_norm.type = "rms";
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

TEST(ModelSize, FlopsConventionIsStated) {
  const auto s = keel::flops_convention();
  EXPECT_NE(s.find("6"), std::string::npos);
  EXPECT_NE(s.find("12"), std::string::npos);
}

}  // namespace
