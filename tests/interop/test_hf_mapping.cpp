// The keel <-> Hugging Face mapping (src/interop/): which class each layout
// maps to, refusals naming every key, tensor names and shapes against the
// built model, config.json both ways, and the SentencePiece proto reader.
// The numerical parity with transformers is in tests/python/test_hf_*.py.
#include <gtest/gtest.h>

#include <iostream>
#include <set>

#include "config/config.h"
#include "data/sources.h"
#include "data/tokenizer.h"
#include "data/tokenizer_train.h"
#include "interop/hf_config.h"
#include "interop/hf_mapping.h"
#include "interop/hf_tokenizer.h"
#include "model/feature_configs.h"
#include "model/init.h"
#include "test_util.h"
#include "util/error.h"
#include "util/fs.h"

using namespace keel;

namespace {

ModelConfig shipped(const std::string& name) {
  return load_config(keel_test::source_path("configs/" + name + ".yaml")).model;
}

ModelConfig tiny() {
  ModelConfig m;
  m.vocab_size = 100;
  m.max_seq_len = 16;
  m.d_model = 32;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.d_ff = 48;
  m.norm_eps = 1e-6;
  return m;
}

ModelConfig gemma(bool qk) {
  ModelConfig m = tiny();
  m.norm_placement = NormPlacement::sandwich;
  m.mlp = MlpKind::geglu_tanh;
  m.norm_unit_offset = true;
  m.embed_norm = EmbedNorm::scale_sqrt_d;
  if (qk) m.qk_norm.type = NormKind::rms;
  return m;
}

// The keys named by the refusal of `m` (the part before ": ").
std::set<std::string> refused_keys(const ModelConfig& m) {
  HfFamily f;
  std::set<std::string> keys;
  for (const auto& item : hf_export_refusals(m, &f).items) keys.insert(item.substr(0, item.find(": ")));
  return keys;
}

HfFamily family_of(const ModelConfig& m) {
  HfFamily f = HfFamily::llama;
  ConfigErrors e = hf_export_refusals(m, &f);
  EXPECT_TRUE(e.empty()) << e.joined();
  return f;
}

}  // namespace

TEST(HfMapping, ShippedConfigsMapToTheirNamesakes) {
  EXPECT_EQ(family_of(shipped("default")), HfFamily::llama);
  EXPECT_EQ(family_of(shipped("qwen3-style")), HfFamily::qwen3);
  EXPECT_EQ(family_of(shipped("olmo2-style")), HfFamily::olmo2);
  EXPECT_EQ(family_of(shipped("gemma2-style")), HfFamily::gemma2);
  EXPECT_EQ(family_of(shipped("gemma3-style")), HfFamily::gemma3);
}

TEST(HfMapping, ShippedUnmappableConfigsNameTheirKeys) {
  EXPECT_EQ(refused_keys(shipped("post-ln")), (std::set<std::string>{"model.norm_placement", "model.norm", "model.mlp"}));
  EXPECT_EQ(refused_keys(shipped("l2-qknorm")), (std::set<std::string>{"model.qk_norm.type"}));
  EXPECT_EQ(refused_keys(shipped("gpt2-124m")), (std::set<std::string>{"model.norm", "model.mlp"}));
  // hf_family_for throws the same list.
  try {
    hf_family_for(shipped("post-ln"));
    ADD_FAILURE() << "post-ln was not refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("classic Post-LN"), std::string::npos) << e.what();
  }
}

TEST(HfMapping, EveryRefusalReason) {
  struct Case {
    std::function<void(ModelConfig&)> edit;
    std::set<std::string> keys;
  };
  const std::vector<Case> cases = {
      {[](ModelConfig& m) { m.qk_norm.type = NormKind::layernorm; }, {"model.qk_norm.type"}},
      {[](ModelConfig& m) { m.qk_norm.type = NormKind::rms; m.qk_norm.position = QKNormPosition::after_rope; }, {"model.qk_norm.position"}},
      {[](ModelConfig& m) { m.qk_norm.type = NormKind::rms; m.qk_norm.gain_per_head = true; }, {"model.qk_norm.gain_per_head"}},
      {[](ModelConfig& m) { m.qk_norm.type = NormKind::rms; m.qk_norm.eps = 1e-5; }, {"model.qk_norm.eps"}},
      {[](ModelConfig& m) { m.qk_norm.type = NormKind::rms; m.qk_norm.scope = QKNormScope::projection; }, {"model.qk_norm.scope"}},
      {[](ModelConfig& m) { m.norm_placement = NormPlacement::reordered; }, {"model.qk_norm.type"}},
      {[](ModelConfig& m) { m.norm_placement = NormPlacement::reordered; m.qk_norm.type = NormKind::rms; }, {"model.qk_norm.scope"}},
      {[](ModelConfig& m) { m.rope = false; }, {"model.rope"}},
      {[](ModelConfig& m) { m.embed_norm = EmbedNorm::rmsnorm; }, {"model.embed_norm"}},
      {[](ModelConfig& m) { m.attn_softcap = 50.0; m.final_softcap = 30.0; },
       {"model.attn_softcap", "model.final_softcap"}},
      {[](ModelConfig& m) { m.query_pre_attn_scalar = 16.0; }, {"model.query_pre_attn_scalar"}},
      {[](ModelConfig& m) { m.qk_norm.type = NormKind::rms; m.bias = true; }, {"model.bias"}},
      {[](ModelConfig& m) { m = gemma(false); m.embed_norm = EmbedNorm::none; }, {"model.embed_norm"}},
      {[](ModelConfig& m) { m = gemma(true); m.qk_norm.scope = QKNormScope::projection; }, {"model.qk_norm.scope"}},
      {[](ModelConfig& m) { m = gemma(false); m.query_pre_attn_scalar = 16.5; }, {"model.query_pre_attn_scalar"}},
      {[](ModelConfig& m) { m = gemma(false); m.bias = true; }, {"model.bias"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    ModelConfig m = tiny();
    cases[i].edit(m);
    EXPECT_EQ(refused_keys(m), cases[i].keys);
  }
  // Accepted: what the classes express although keel spells it differently.
  ModelConfig ok = tiny();
  ok.query_pre_attn_scalar = 8.0;  // = head_dim: the default scale
  ok.bias = true;                  // Llama's attention_bias + mlp_bias
  ok.mlp = MlpKind::geglu_tanh;           // Llama with hidden_act gelu_pytorch_tanh
  ok.norm_unit_offset = true;      // gains converted to w + 1
  EXPECT_EQ(family_of(ok), HfFamily::llama);
  ModelConfig no_gain = tiny();
  no_gain.qk_norm.type = NormKind::rms;
  no_gain.qk_norm.gain = false;  // exported as a gain of ones
  EXPECT_EQ(family_of(no_gain), HfFamily::qwen3);
}

// A model key the mapping does not interpret (one added to keel after it,
// say) is refused by name as soon as it leaves its default.
TEST(HfMapping, EveryOtherModelKeyIsRefusedOffItsDefault) {
  Config probe;
  Schema schema = make_schema(probe);
  int checked = 0;
  for (const auto& key : schema.keys()) {
    if (key.path.rfind("model.", 0) != 0 || hf_mapping_reads(key.path)) continue;
    Config c;
    c.model = tiny();
    Schema s = make_schema(c);
    const KeyDef* k = s.find(key.path);
    std::string value;
    if (k->kind == KeyKind::boolean) value = s.value_string(*k) == "true" ? "false" : "true";
    else if (k->kind == KeyKind::choice) value = k->choices[0] == s.value_string(*k) ? k->choices[1] : k->choices[0];
    else if (k->kind == KeyKind::optional_real) value = "1.5";
    else continue;  // numbers: no generic non-default value that keeps the config valid
    ConfigErrors apply;
    s.apply_override(key.path + "=" + value, apply);
    if (!apply.empty()) continue;  // out of this key's range: try the next one
    SCOPED_TRACE(key.path + "=" + value);
    EXPECT_EQ(refused_keys(c.model).count(key.path), 1u);
    ++checked;
  }
  // The mapped keys themselves are interpreted, not refused wholesale.
  EXPECT_TRUE(hf_mapping_reads("model.norm_unit_offset"));
  EXPECT_TRUE(hf_mapping_reads("model.qk_norm.position"));
  EXPECT_FALSE(hf_mapping_reads("model.some_future_stabiliser"));
  std::cout << checked << " unmapped model keys checked\n";
}

// Every shared feature config (tests/model/feature_configs.h) either maps to
// a class whose tensors cover the model exactly once, or is refused naming
// config keys: a new knob is exported or refused, never silently dropped
// (EveryOtherModelKeyIsRefusedOffItsDefault checks the naming key by key).
TEST(HfMapping, EveryFeatureConfigMapsOrIsRefusedByName) {
  int mapped = 0, refused = 0;
  for (const auto& f : keel_model_test::feature_configs()) {
    SCOPED_TRACE(f.name);
    const ModelConfig m = f.config();
    HfFamily family = HfFamily::llama;
    const ConfigErrors e = hf_export_refusals(m, &family);
    if (!e.empty()) {
      ++refused;
      Config c;
      c.model = m;
      Schema s = make_schema(c);
      for (const auto& key : refused_keys(m)) EXPECT_NE(s.find(key), nullptr) << key << " is not a config key";
      continue;
    }
    ++mapped;
    auto model = build_model(m, 1);
    auto params = model->named_parameters(true);
    std::set<std::string> exported;
    for (const auto& n : hf_tensor_names(m, family)) {
      ASSERT_NE(params.find(n.keel), nullptr) << n.keel;
      EXPECT_TRUE(exported.insert(n.keel).second) << n.keel;
    }
    EXPECT_EQ(exported.size(), params.size()) << "a parameter is not exported";
  }
  EXPECT_GT(mapped, 10);
  EXPECT_GT(refused, 10);
}

// Every keel name exists in the built model with the shape the Hugging Face
// tensor has (bar the padded vocabulary rows); every parameter is exported
// exactly once; Hugging Face names are unique.
TEST(HfMapping, TensorNamesCoverTheModel) {
  std::vector<std::pair<std::string, ModelConfig>> cases;
  ModelConfig llama = tiny();
  llama.bias = true;
  cases.push_back({"llama_bias", llama});
  ModelConfig qwen = tiny();
  qwen.qk_norm.type = NormKind::rms;
  qwen.tie_embeddings = true;
  cases.push_back({"qwen3_tied", qwen});
  ModelConfig olmo = tiny();
  olmo.norm_placement = NormPlacement::reordered;
  olmo.qk_norm.type = NormKind::rms;
  olmo.qk_norm.scope = QKNormScope::projection;
  cases.push_back({"olmo2", olmo});
  cases.push_back({"gemma2", gemma(false)});
  cases.push_back({"gemma3", gemma(true)});
  const std::vector<HfFamily> want = {HfFamily::llama, HfFamily::qwen3, HfFamily::olmo2, HfFamily::gemma2,
                                      HfFamily::gemma3};
  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE(cases[c].first);
    const ModelConfig& m = cases[c].second;
    const HfFamily f = family_of(m);
    EXPECT_EQ(f, want[c]);
    auto model = build_model(m, 1);
    auto params = model->named_parameters(true);
    std::set<std::string> exported, hf_names;
    for (const auto& n : hf_tensor_names(m, f)) {
      EXPECT_TRUE(hf_names.insert(n.hf).second) << "duplicate " << n.hf;
      const torch::Tensor* p = params.find(n.keel);
      ASSERT_NE(p, nullptr) << n.keel;
      EXPECT_TRUE(exported.insert(n.keel).second) << n.keel;
      auto shape = p->sizes().vec();
      if (n.role == TensorRole::vocab_rows) shape[0] = m.vocab_size;
      EXPECT_EQ(shape, n.hf_shape) << n.keel << " -> " << n.hf;
    }
    EXPECT_EQ(exported.size(), params.size());  // the tied head is wte, listed once
    EXPECT_EQ(hf_names.count("lm_head.weight"), m.tie_embeddings ? 0u : 1u);
  }
}

TEST(HfMapping, NormNamesFollowEachLayout) {
  auto hf_of = [](const ModelConfig& m, const std::string& keel_name) {
    for (const auto& n : hf_tensor_names(m, family_of(m)))
      if (n.keel == keel_name) return n.hf;
    return std::string("(none)");
  };
  ModelConfig olmo = tiny();
  olmo.norm_placement = NormPlacement::reordered;
  olmo.qk_norm.type = NormKind::rms;
  olmo.qk_norm.scope = QKNormScope::projection;
  // modeling_llama.py: post_attention_layernorm is the norm *before* the MLP.
  EXPECT_EQ(hf_of(tiny(), "blocks.1.mlp_norm.weight"), "model.layers.1.post_attention_layernorm.weight");
  // modeling_olmo2.py: it is the norm on the attention output.
  EXPECT_EQ(hf_of(olmo, "blocks.1.attn_norm.weight"), "model.layers.1.post_attention_layernorm.weight");
  EXPECT_EQ(hf_of(olmo, "blocks.0.mlp_norm.weight"), "model.layers.0.post_feedforward_layernorm.weight");
  EXPECT_EQ(hf_of(gemma(false), "blocks.0.mlp_norm.weight"), "model.layers.0.pre_feedforward_layernorm.weight");
  EXPECT_EQ(hf_of(gemma(false), "blocks.0.attn_post_norm.weight"), "model.layers.0.post_attention_layernorm.weight");
}

// config.json written for a model reads back as the same model.
TEST(HfConfig, ExportThenImportGivesTheSameModel) {
  std::vector<ModelConfig> cases;
  ModelConfig llama = tiny();
  llama.bias = true;
  llama.rope_theta = 5e5;
  llama.mlp = MlpKind::geglu_tanh;
  cases.push_back(llama);
  ModelConfig qwen = tiny();
  qwen.qk_norm.type = NormKind::rms;
  qwen.tie_embeddings = true;
  qwen.n_kv_heads = 1;
  cases.push_back(qwen);
  ModelConfig olmo = tiny();
  olmo.norm_placement = NormPlacement::reordered;
  olmo.qk_norm.type = NormKind::rms;
  olmo.qk_norm.scope = QKNormScope::projection;
  cases.push_back(olmo);
  ModelConfig g2 = gemma(false);
  g2.attn_softcap = 50.0;
  g2.final_softcap = 30.0;
  g2.query_pre_attn_scalar = 24.0;
  g2.tie_embeddings = true;
  cases.push_back(g2);
  ModelConfig g3 = gemma(true);
  g3.rope_theta = 1e6;
  cases.push_back(g3);
  for (const auto& m : cases) {
    const HfFamily f = family_of(m);
    SCOPED_TRACE(hf_family_info(f).display);
    auto json = hf_config_json(m, f, {1, 2, 0}, "float32");
    EXPECT_EQ(json["model_type"], hf_family_info(f).model_type);
    EXPECT_EQ(json["vocab_size"], m.vocab_size);
    auto back = model_config_from_hf(nlohmann::json::parse(json.dump()));
    EXPECT_EQ(back.family, f);
    EXPECT_EQ(back.ids.bos, 1);
    EXPECT_EQ(back.ids.eos, 2);
    EXPECT_EQ(back.ids.pad, 0);
    ModelConfig want = m;
    if ((f == HfFamily::gemma2 || f == HfFamily::gemma3) && !want.query_pre_attn_scalar)
      want.query_pre_attn_scalar = static_cast<double>(m.head_dim());  // written explicitly
    Config a, b;
    a.model = want;
    b.model = back.model;
    EXPECT_EQ(config_to_yaml(a), config_to_yaml(b));
  }
}

TEST(HfConfig, GemmaSoftcapsAreWrittenEvenWhenOff) {
  // Gemma 2's class defaults are 50 and 30: "off" must be an explicit null.
  auto json = hf_config_json(gemma(false), HfFamily::gemma2, {}, "float32");
  EXPECT_TRUE(json["attn_logit_softcapping"].is_null());
  EXPECT_TRUE(json["final_logit_softcapping"].is_null());
  EXPECT_EQ(json["layer_types"].size(), 2u);
  EXPECT_EQ(json["layer_types"][0], "full_attention");
  // And an absent field means the class default on import.
  auto j = nlohmann::json::parse(json.dump());
  j.erase("attn_logit_softcapping");
  j.erase("final_logit_softcapping");
  auto back = model_config_from_hf(j);
  EXPECT_EQ(back.model.attn_softcap, std::optional<double>(50.0));
  EXPECT_EQ(back.model.final_softcap, std::optional<double>(30.0));
}

TEST(HfConfig, ImportRefusesWhatKeelCannotRepresent) {
  auto base = [] {
    return nlohmann::json::parse(hf_config_json(tiny(), HfFamily::llama, {1, 2, 0}, "float32").dump());
  };
  auto refused = [](const nlohmann::json& j) {
    try {
      model_config_from_hf(j);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  auto j = base();
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 5e5}, {"factor", 8.0}};
  EXPECT_NE(refused(j).find("config.json: rope_parameters.rope_type"), std::string::npos) << refused(j);
  j = base();
  j["head_dim"] = 16;  // 4 heads x 16 != 32
  EXPECT_NE(refused(j).find("config.json: head_dim"), std::string::npos);
  j = base();
  j["hidden_act"] = "gelu";
  EXPECT_NE(refused(j).find("config.json: hidden_act"), std::string::npos);
  j = base();
  j["attention_bias"] = true;  // without mlp_bias
  EXPECT_NE(refused(j).find("config.json: mlp_bias"), std::string::npos);
  j = base();
  j["model_type"] = "gemma3";
  EXPECT_NE(refused(j).find("gemma3_text"), std::string::npos);
  j = base();
  j["model_type"] = "gpt2";
  EXPECT_NE(refused(j).find("not one of the mapped classes"), std::string::npos);

  // Gemma 3 with its real local/global RoPE bases on sliding layers: no single base fits.
  auto g3 = nlohmann::json::parse(hf_config_json(gemma(true), HfFamily::gemma3, {}, "float32").dump());
  g3.erase("layer_types");  // the class default: five sliding layers per full one
  g3["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                           {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  EXPECT_NE(refused(g3).find("rope_parameters.sliding_attention.rope_theta"), std::string::npos) << refused(g3);
}

TEST(HfConfig, SlidingWindowCapsTheContext) {
  auto j = nlohmann::json::parse(hf_config_json(gemma(false), HfFamily::gemma2, {}, "float32").dump());
  j.erase("layer_types");  // Gemma 2's default: alternating sliding and full layers
  j["sliding_window"] = 8;
  j["max_position_embeddings"] = 8192;
  auto back = model_config_from_hf(j);
  EXPECT_EQ(back.model.max_seq_len, 8);
  ASSERT_FALSE(back.notes.empty());
  EXPECT_NE(back.notes.back().find("sliding window"), std::string::npos);
  EXPECT_THROW(model_config_from_hf(j, 16), ConfigError);  // asked for more than the window
  EXPECT_EQ(model_config_from_hf(j, 4).model.max_seq_len, 4);
}

// ---------------------------------------------------------------------------
// SentencePiece proto reader and tokenizer.json.

namespace {

std::string trained_tokenizer(const std::string& type) {
  std::string dir = keel_test::make_temp_dir("hf_tok");
  std::string file = dir + "/corpus.txt";
  // Words of 1-4 syllables chosen by a fixed LCG: enough distinct text for 320 pieces.
  const char* syllables[] = {"ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ve", "dy", "chu", "an", "el", "or"};
  uint64_t state = 12345;
  auto next = [&state](uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  std::string text;
  for (int doc = 0; doc < 200; ++doc) {
    for (int w = 0; w < 60; ++w) {
      for (uint64_t k = 0, n = 1 + next(4); k < n; ++k) text += syllables[next(14)];
      text += w % 12 == 11 ? ".\n" : " ";
    }
    text += "\n<|endoftext|>\n";
  }
  keel_test::write_file(file, text);
  TokenizerTrainOptions o;
  o.type = type;
  o.vocab_size = 320;
  o.separator = "<|endoftext|>";
  return train_tokenizer(sample_for_tokenizer(expand_sources({file}), o), o, file);
}

}  // namespace

TEST(HfTokenizer, ProtoReaderAgreesWithSentencePiece) {
  for (const char* type : {"bpe", "unigram"}) {
    SCOPED_TRACE(type);
    const std::string proto = trained_tokenizer(type);
    Tokenizer tok = Tokenizer::from_serialized(proto, "test");
    SpmModel m = parse_spm_model(proto, "test");
    ASSERT_EQ(static_cast<int64_t>(m.pieces.size()), tok.vocab_size());
    for (int32_t i = 0; i < tok.vocab_size(); ++i) EXPECT_EQ(m.pieces[i].piece, tok.piece(i)) << i;
    EXPECT_EQ(m.pieces[0].type, SpmPiece::control);  // <pad>
    EXPECT_EQ(m.pieces[3].type, SpmPiece::unknown);
    EXPECT_EQ(m.pieces[4].type, SpmPiece::byte);     // <0x00>
    EXPECT_EQ(m.model_type, std::string(type) == "bpe" ? SpmModel::bpe : SpmModel::unigram);
    EXPECT_EQ(m.normalizer_name, "identity");
    EXPECT_FALSE(m.add_dummy_prefix);
    EXPECT_FALSE(m.remove_extra_whitespaces);
    EXPECT_TRUE(m.escape_whitespaces);
    EXPECT_FALSE(m.has_precompiled_charsmap);

    auto j = hf_tokenizer_json(m, "test");
    EXPECT_EQ(j["model"]["type"], std::string(type) == "bpe" ? "BPE" : "Unigram");
    EXPECT_EQ(j["added_tokens"].size(), 4u);  // <pad> <s> </s> <unk>
    EXPECT_EQ(j["added_tokens"][1]["content"], "<s>");
    EXPECT_EQ(j["normalizer"]["type"], "Replace");  // no dummy prefix
    EXPECT_TRUE(j["post_processor"].is_null());     // no BOS added
    if (std::string(type) == "bpe") {
      EXPECT_EQ(j["model"]["vocab"].size(), m.pieces.size());
      // Every merge joins two pieces into a third, ranked by the result's id.
      int64_t last = -1;
      for (const auto& merge : j["model"]["merges"]) {
        const std::string merged = merge[0].get<std::string>() + merge[1].get<std::string>();
        ASSERT_TRUE(j["model"]["vocab"].contains(merged)) << merged;
        const int64_t id = j["model"]["vocab"][merged].get<int64_t>();
        EXPECT_GE(id, last);
        last = id;
      }
      EXPECT_GT(j["model"]["merges"].size(), 20u);
    }
  }
}

TEST(HfTokenizer, RejectsWhatItCannotExpress) {
  EXPECT_THROW(parse_spm_model("not a proto \xff\xff\xff", "junk"), InteropError);
  SpmModel m = parse_spm_model(trained_tokenizer("bpe"), "test");
  m.has_precompiled_charsmap = true;
  m.normalizer_name = "nmt_nfkc";
  EXPECT_THROW(hf_tokenizer_json(m, "test"), InteropError);
  m.has_precompiled_charsmap = false;
  m.remove_extra_whitespaces = true;
  EXPECT_THROW(hf_tokenizer_json(m, "test"), InteropError);
  m.remove_extra_whitespaces = false;
  m.add_dummy_prefix = true;  // expressible: Prepend + Strip
  auto j = hf_tokenizer_json(m, "test");
  EXPECT_EQ(j["normalizer"]["type"], "Sequence");
  EXPECT_EQ(j["normalizer"]["normalizers"][0]["type"], "Prepend");
}

// ---------------------------------------------------------------------------
// CLI: refusals exit 2 naming the keys; bad paths exit 2.

TEST(HfCli, BadInputExitsTwo) {
  std::string out;
  const std::string dir = keel_test::make_temp_dir("hf_cli");
  EXPECT_EQ(keel_test::run_keel("export-hf " + dir + "/missing " + dir + "/out", &out), 2) << out;
  EXPECT_NE(out.find("neither a checkpoint"), std::string::npos) << out;
  EXPECT_EQ(keel_test::run_keel("import-hf " + dir + " " + dir + "/out", &out), 2) << out;
  EXPECT_NE(out.find("config.json: missing"), std::string::npos) << out;
  keel_test::write_file(dir + "/config.json", R"({"model_type": "gpt2", "vocab_size": 10})");
  EXPECT_EQ(keel_test::run_keel("import-hf " + dir + " " + dir + "/out", &out), 2) << out;
  EXPECT_NE(out.find("config.json: model_type"), std::string::npos) << out;
  EXPECT_EQ(keel_test::run_keel("export-hf a b --dtype int8", &out), 2) << out;
}

// A sharded checkpoint's index names files inside the model directory only:
// "../outside.safetensors" is refused before anything outside is read
// (issue 20, defect 12).
TEST(HfCli, ShardNamesCannotLeaveTheModelDirectory) {
  const std::string root = keel_test::make_temp_dir("hf_shard_escape");
  const std::string dir = root + "/model";
  ensure_directory(dir);
  keel_test::write_file(dir + "/config.json", hf_config_json(tiny(), HfFamily::llama, HfTokenIds{}, "float32").dump());
  keel_test::write_file(root + "/outside.safetensors", "not read");
  for (const std::string shard : {"../outside.safetensors", "/etc/passwd", "a/../../outside.safetensors", "..", ""}) {
    SCOPED_TRACE(shard);
    keel_test::write_file(dir + "/model.safetensors.index.json",
                          nlohmann::json{{"weight_map", {{"lm_head.weight", shard}}}}.dump());
    std::string out;
    EXPECT_EQ(keel_test::run_keel("import-hf " + dir + " " + root + "/out", &out), 2) << out;
    EXPECT_NE(out.find("not a plain file name"), std::string::npos) << out;
  }
  EXPECT_FALSE(path_exists(root + "/out"));
}
