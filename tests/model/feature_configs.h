// One list of model feature configs, each a small edit of tiny_config(): every
// knob alone and the combinations that interact. The size, reference-forward
// and Hugging Face mapping tests all iterate it, and
// FeatureConfigs.VaryEveryModelKey fails when a model.* key is varied by no
// entry, so a new knob cannot be added without being counted, checked against
// the reference and either exported or refused by name.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "test_model_reference.h"

namespace keel_model_test {

struct FeatureConfig {
  std::string name;
  std::function<void(keel::ModelConfig&)> edit;
  keel::ModelConfig config() const {
    keel::ModelConfig c = tiny_config();
    edit(c);
    return c;
  }
};

inline std::vector<FeatureConfig> feature_configs() {
  using C = keel::ModelConfig;
  std::vector<FeatureConfig> v = {
      {"tiny", [](C&) {}},
      {"tied", [](C& c) { c.tie_embeddings = true; }},
      {"bias", [](C& c) { c.bias = true; }},
      {"gelu", [](C& c) { c.mlp = MlpKind::gelu; }},
      {"gelu_bias_layernorm_tied", [](C& c) { c.mlp = MlpKind::gelu; c.bias = true; c.norm = NormKind::layernorm; c.tie_embeddings = true; }},
      {"swiglu_default_dff", [](C& c) { c.d_ff = 0; }},
      {"gelu_default_dff", [](C& c) { c.d_ff = 0; c.mlp = MlpKind::gelu; }},
      {"geglu_tanh_default_dff_bias", [](C& c) { c.d_ff = 0; c.mlp = MlpKind::geglu_tanh; c.bias = true; }},
      {"norm_unit_offset_qk", [](C& c) { c.norm_unit_offset = true; c.qk_norm.type = NormKind::rms; }},
      {"norm_eps", [](C& c) { c.norm_eps = 1e-3; }},
      {"mqa_3_layers", [](C& c) { c.n_kv_heads = 1; c.n_layers = 3; }},
      {"mha_1_layer", [](C& c) { c.n_kv_heads = 4; c.n_layers = 1; }},
      {"two_heads_wider", [](C& c) { c.n_heads = 2; c.n_kv_heads = 2; c.d_model = 48; }},
      {"no_padding", [](C& c) { c.pad_vocab_multiple = 1; }},
      {"vocab_61", [](C& c) { c.vocab_size = 61; }},
      {"longer_context", [](C& c) { c.max_seq_len = 24; }},
      {"no_rope", [](C& c) { c.rope = false; }},
      {"rope_theta", [](C& c) { c.rope_theta = 500000.0; }},
      {"embed_layernorm", [](C& c) { c.embed_norm = EmbedNorm::layernorm; }},
      {"embed_layernorm_bias_rms_blocks", [](C& c) { c.embed_norm = EmbedNorm::layernorm; c.bias = true; c.norm = NormKind::rms; }},
      {"embed_scale", [](C& c) { c.embed_norm = EmbedNorm::scale_sqrt_d; }},
      {"embed_rmsnorm", [](C& c) { c.embed_norm = EmbedNorm::rmsnorm; }},
      {"rms_bias", [](C& c) { c.norm = NormKind::rms; c.bias = true; }},
      {"attn_softcap", [](C& c) { c.attn_softcap = 2.0; }},
      {"final_softcap", [](C& c) { c.final_softcap = 3.0; }},
      {"query_pre_attn_scalar", [](C& c) { c.query_pre_attn_scalar = 3.0; }},
      {"logit_clamp", [](C& c) { c.attn_logit_clamp = 1.5; }},
      {"qkv_norm_rms", [](C& c) { c.qkv_norm = NormKind::rms; }},
      {"qkv_norm_layernorm_bias", [](C& c) { c.qkv_norm = NormKind::layernorm; c.bias = true; }},
      {"sigma_reparam", [](C& c) { c.sigma_reparam = true; }},
      {"sigma_reparam_gelu_bias", [](C& c) { c.sigma_reparam = true; c.mlp = MlpKind::gelu; c.bias = true; }},
      // µP / CompleteP (model/parametrization.h): every multiplier away from 1.
      {"mup_width", [](C& c) { c.parametrization = keel::Parametrization::mup; c.mup.base_width = 16; }},
      {"mup_fixed_head_dim_tied", [](C& c) { c.parametrization = keel::Parametrization::mup; c.mup.base_width = 16; c.mup.base_head_dim = 8; c.tie_embeddings = true; }},
      {"completep_alpha_half_reordered", [](C& c) { c.parametrization = keel::Parametrization::completep; c.mup.base_width = 16; c.mup.base_depth = 1; c.mup.depth_alpha = 0.5; c.norm_placement = NormPlacement::reordered; }},
      {"init_std_depth_truncate", [](C& c) { c.init.std = 0.1; c.init.depth_scaled = !c.init.depth_scaled; c.init.truncate = 2.0; }},
  };
  for (const char* p : {"pre", "post", "reordered", "sandwich"}) {
    v.push_back({std::string("placement_") + p, [p](C& c) { c.norm_placement = as<NormPlacement>(p); }});
    v.push_back({std::string("placement_") + p + "_layernorm_bias",
                 [p](C& c) { c.norm_placement = as<NormPlacement>(p); c.norm = NormKind::layernorm; c.bias = true; }});
  }
  for (const char* type : {"rms", "layernorm", "l2"})
    for (const char* scope : {"head", "projection"})
      for (int gain = 0; gain < 3; ++gain) {  // off, shared, per head
        if (std::string(scope) == "projection" && gain == 2) continue;
        for (bool bias : {false, true}) {
          if (bias && std::string(type) != "layernorm") continue;
          std::string name = std::string("qk_") + type + "_" + scope + "_gain" + std::to_string(gain) + (bias ? "_bias" : "");
          v.push_back({name, [=](C& c) {
                         c.qk_norm.type = as<NormKind>(type);
                         c.qk_norm.scope = as<QKNormScope>(scope);
                         c.qk_norm.gain = gain > 0;
                         c.qk_norm.gain_per_head = gain == 2;
                         c.qk_norm.bias = bias;
                       }});
        }
      }
  v.push_back({"qk_rms_after_rope_eps", [](C& c) { c.qk_norm.type = NormKind::rms; c.qk_norm.position = QKNormPosition::after_rope; c.qk_norm.eps = 1e-3; }});
  for (int groups : {1, 2, 4})
    v.push_back({"qk_group_" + std::to_string(groups), [groups](C& c) {
                   c.qk_norm.type = NormKind::layernorm;
                   c.qk_norm.scope = QKNormScope::group;
                   c.qk_norm.groups = groups;
                   c.qk_norm.gain_per_head = groups == 2;
                 }});
  for (bool learnable : {false, true})
    for (bool per_head : {false, true})
      v.push_back({std::string("l2_temperature") + (learnable ? "_learnable" : "_fixed") + (per_head ? "_per_head" : ""),
                   [=](C& c) {
                     c.qk_norm.type = NormKind::l2;
                     c.qk_norm.temperature_learnable = learnable;
                     c.qk_norm.temperature_per_head = per_head;
                   }});
  v.push_back({"l2_temperature_init", [](C& c) { c.qk_norm.type = NormKind::l2; c.qk_norm.temperature_init = 4.0; }});
  v.push_back({"l2_henry_seq_len", [](C& c) { c.qk_norm.type = NormKind::l2; c.qk_norm.henry_seq_len = 64; }});
  // Rybakov et al.'s relatives of QK-Norm (docs/papers.md#other-stabilisers).
  v.push_back({"attn_temperature_fixed", [](C& c) { c.attn_temperature = 0.7; }});
  v.push_back({"attn_temperature_learnable_qk_rms", [](C& c) { c.attn_temperature = 1.5; c.attn_temperature_learnable = true; c.qk_norm.type = NormKind::rms; }});
  v.push_back({"clipped_softmax", [](C& c) { c.clipped_softmax = true; }});
  v.push_back({"clipped_softmax_stretch", [](C& c) { c.clipped_softmax = true; c.clipped_softmax_zeta = 1.1; c.clipped_softmax_gamma = -0.1; }});
  v.push_back({"layer_scale", [](C& c) { c.layer_scale = 0.1; }});
  v.push_back({"layer_scale_sandwich_bias", [](C& c) { c.layer_scale = 0.5; c.norm_placement = NormPlacement::sandwich; c.bias = true; }});
  v.push_back({"everything", [](C& c) {
                 c.norm_placement = NormPlacement::sandwich;
                 c.norm = NormKind::layernorm;
                 c.bias = true;
                 c.mlp = MlpKind::gelu;
                 c.qk_norm.type = NormKind::layernorm;
                 c.qk_norm.bias = true;
                 c.qk_norm.gain_per_head = true;
                 c.embed_norm = EmbedNorm::layernorm;
                 c.attn_softcap = 50.0;
                 c.final_softcap = 30.0;
                 c.n_layers = 3;
               }});
  return v;
}

}  // namespace keel_model_test
