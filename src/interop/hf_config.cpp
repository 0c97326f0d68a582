#include "interop/hf_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "util/json.h"

namespace keel {

namespace {

using ojson = nlohmann::ordered_json;

ojson id_or_null(int64_t id) { return id >= 0 ? ojson(id) : ojson(nullptr); }

ojson optional_value(const std::optional<double>& v) { return v ? ojson(*v) : ojson(nullptr); }

// Gemma's config declares query_pre_attn_scalar as int (strictly validated).
ojson scalar_value(double v) {
  if (std::floor(v) == v && std::abs(v) < 9e15) return ojson(static_cast<int64_t>(v));
  return ojson(v);
}

std::string activation_name(MlpKind mlp) {
  return mlp == MlpKind::geglu_tanh ? "gelu_pytorch_tanh" : "silu";  // swiglu
}

}  // namespace

ojson hf_config_json(const ModelConfig& m, HfFamily family, const HfTokenIds& ids, const std::string& dtype) {
  const auto& info = hf_family_info(family);
  const bool gemma = is_gemma(family);
  const ojson rope = {{"rope_type", "default"}, {"rope_theta", m.rope_theta}};
  // keel attends to the whole context in every layer: no sliding-window layers.
  const ojson full_layers = std::vector<std::string>(static_cast<size_t>(m.n_layers), "full_attention");
  ojson c;
  c["architectures"] = {info.architecture};
  c["model_type"] = info.model_type;
  c["vocab_size"] = m.vocab_size;  // keel's padded rows are not exported (never predicted)
  c["hidden_size"] = m.d_model;
  c["intermediate_size"] = m.ffn_dim();
  c["num_hidden_layers"] = m.n_layers;
  c["num_attention_heads"] = m.n_heads;
  c["num_key_value_heads"] = m.n_kv_heads;
  if (family != HfFamily::olmo2) c["head_dim"] = m.head_dim();  // OLMo 2 derives it
  c[gemma ? "hidden_activation" : "hidden_act"] = activation_name(m.mlp);
  c["max_position_embeddings"] = m.max_seq_len;
  c["initializer_range"] = m.init.std;
  c["rms_norm_eps"] = m.norm_eps;
  c["tie_word_embeddings"] = m.tie_embeddings;
  c["attention_bias"] = m.bias;
  c["attention_dropout"] = 0.0;
  if (family == HfFamily::llama) {
    c["mlp_bias"] = m.bias;
    c["pretraining_tp"] = 1;
  }
  c["bos_token_id"] = id_or_null(ids.bos);
  c["eos_token_id"] = id_or_null(ids.eos);
  c["pad_token_id"] = id_or_null(ids.pad);
  c["use_cache"] = true;
  c["dtype"] = dtype;
  if (family == HfFamily::gemma3) {
    // Per layer type in 5.x; rope_local_base_freq is 4.x's name for the sliding layers' base.
    c["rope_parameters"] = {{"full_attention", rope}, {"sliding_attention", rope}};
    c["rope_theta"] = m.rope_theta;
    c["rope_local_base_freq"] = m.rope_theta;
  } else {
    c["rope_parameters"] = rope;
    c["rope_theta"] = m.rope_theta;
  }
  if (family == HfFamily::qwen3) {
    c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr;
    c["max_window_layers"] = m.n_layers;
    c["layer_types"] = full_layers;
  }
  if (gemma) {
    const double scalar = m.query_pre_attn_scalar ? *m.query_pre_attn_scalar : static_cast<double>(m.head_dim());
    c["query_pre_attn_scalar"] = scalar_value(scalar);
    // Both must be written: Gemma 2's defaults are 50 and 30, not off.
    c["attn_logit_softcapping"] = optional_value(m.attn_softcap);
    c["final_logit_softcapping"] = optional_value(m.final_softcap);
    c["sliding_window"] = m.max_seq_len;  // unused: every layer is full attention
    c["layer_types"] = full_layers;
    c["use_bidirectional_attention"] = false;
  }
  return c;
}

ojson hf_generation_config_json(const HfTokenIds& ids) {
  ojson g;
  g["bos_token_id"] = id_or_null(ids.bos);
  g["eos_token_id"] = id_or_null(ids.eos);
  g["pad_token_id"] = id_or_null(ids.pad);
  return g;
}

// ---------------------------------------------------------------------------
// Import.

namespace {

// Reads config.json fields, recording every problem under its field name.
class Fields {
 public:
  Fields(const nlohmann::json& j, ConfigErrors& e) : j_(j), e_(e) {}

  bool has(const std::string& k) const { return j_.contains(k) && !j_[k].is_null(); }

  int64_t integer(const std::string& k, std::optional<int64_t> fallback = std::nullopt) {
    if (!has(k)) {
      if (fallback) return *fallback;
      e_.add("config.json: " + k, "missing");
      return 1;
    }
    // Sizes and counts: below 2^31, so products of two stay exact and a
    // hostile file cannot make keel allocate for 2^62 layers.
    if (!j_[k].is_number_integer() || json_int<int64_t>(j_[k]) < 0 || json_int<int64_t>(j_[k]) > INT32_MAX) {
      e_.add("config.json: " + k, "expected a non-negative integer below 2^31, got " + json_excerpt(j_[k]));
      return 1;
    }
    return json_int<int64_t>(j_[k]);
  }

  double real(const std::string& k, double fallback) {
    if (!has(k)) return fallback;
    if (!j_[k].is_number()) {
      e_.add("config.json: " + k, "expected a number, got " + json_excerpt(j_[k]));
      return fallback;
    }
    return j_[k].get<double>();
  }

  std::optional<double> optional_real(const std::string& k, std::optional<double> absent) {
    if (!j_.contains(k)) return absent;  // absent: the class's default
    if (j_[k].is_null()) return std::nullopt;
    return real(k, 0.0);
  }

  bool boolean(const std::string& k, bool fallback) {
    if (!has(k)) return fallback;
    if (!j_[k].is_boolean()) {
      e_.add("config.json: " + k, "expected true or false, got " + json_excerpt(j_[k]));
      return fallback;
    }
    return j_[k].get<bool>();
  }

  std::string text(const std::string& k, const std::string& fallback) {
    if (!has(k)) return fallback;
    if (!j_[k].is_string()) {
      e_.add("config.json: " + k, "expected a string, got " + json_excerpt(j_[k]));
      return fallback;
    }
    return j_[k].get<std::string>();
  }

  int64_t token_id(const std::string& k) {
    if (!has(k)) return -1;
    const auto& v = j_[k];
    if (v.is_number_integer()) return json_int<int64_t>(v);
    if (v.is_array() && !v.empty() && v[0].is_number_integer()) return json_int<int64_t>(v[0]);  // eos lists
    return -1;
  }

 private:
  const nlohmann::json& j_;
  ConfigErrors& e_;
};

// theta of one rope_parameters dict (or the legacy fields), refusing scaled RoPE.
double rope_theta_of(const nlohmann::json& rp, const std::string& where, double fallback, ConfigErrors& e) {
  if (!rp.is_object()) return fallback;
  const std::string type = rp.value("rope_type", rp.value("type", std::string("default")));
  if (type != "default")
    e.add("config.json: " + where + ".rope_type",
          type + ": keel implements plain RoPE only (rope_type: default), not scaled variants");
  if (rp.contains("partial_rotary_factor") && rp["partial_rotary_factor"].is_number() &&
      rp["partial_rotary_factor"].get<double>() != 1.0)
    e.add("config.json: " + where + ".partial_rotary_factor", "keel rotates every dimension of the head");
  if (rp.contains("rope_theta") && rp["rope_theta"].is_number()) return rp["rope_theta"].get<double>();
  return fallback;
}

constexpr int64_t kMaxHfLayers = 65536;

std::vector<std::string> layer_types_of(const nlohmann::json& j, HfFamily f, int64_t n_layers) {
  std::vector<std::string> types;
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    for (const auto& t : j["layer_types"]) types.push_back(t.is_string() ? t.get<std::string>() : "?");
    return types;
  }
  for (int64_t i = 0; i < n_layers; ++i) {
    std::string t = "full_attention";
    if (f == HfFamily::gemma2 && (i + 1) % 2 != 0) t = "sliding_attention";  // Gemma 2: alternating
    if (f == HfFamily::gemma3) {
      const int64_t pattern = json_int_or<int64_t>(j, "sliding_window_pattern", int64_t{6});
      if (pattern > 0 && (i + 1) % pattern != 0) t = "sliding_attention";
    }
    if (f == HfFamily::qwen3 && j.value("use_sliding_window", false) && i >= json_int_or<int64_t>(j, "max_window_layers", int64_t{28}))
      t = "sliding_attention";
    types.push_back(t);
  }
  return types;
}

}  // namespace

static HfImportedConfig model_config_from_hf_unchecked(const nlohmann::json& j, int64_t max_seq_len);

// Fields read with a fallback (j.value) throw nlohmann's type_error on a
// value of another type: still a config.json problem, exit 2.
HfImportedConfig model_config_from_hf(const nlohmann::json& j, int64_t max_seq_len) {
  try {
    return model_config_from_hf_unchecked(j, max_seq_len);
  } catch (const nlohmann::json::exception& ex) {
    throw InteropError("config.json: a field has the wrong type: " + std::string(ex.what()).substr(0, 300));
  }
}

static HfImportedConfig model_config_from_hf_unchecked(const nlohmann::json& j, int64_t max_seq_len) {
  ConfigErrors e;
  Fields f(j, e);
  HfImportedConfig out;
  const std::string model_type = f.text("model_type", "");
  auto family = hf_family_from_model_type(model_type);
  if (!family) {
    std::string hint = model_type == "gemma3" ? " (the multimodal wrapper; keel imports Gemma 3's text model, "
                                                "model_type gemma3_text)"
                                              : "";
    e.add("config.json: model_type",
          "'" + model_type + "'" + hint + " is not one of the mapped classes: llama, qwen3, olmo2, gemma2, gemma3_text");
    throw ConfigError(e);
  }
  out.family = *family;
  const bool gemma = is_gemma(*family);
  ModelConfig& m = out.model;

  m.vocab_size = f.integer("vocab_size");
  m.d_model = f.integer("hidden_size");
  m.n_layers = f.integer("num_hidden_layers");
  if (m.n_layers > kMaxHfLayers) {
    e.add("config.json: num_hidden_layers", std::to_string(m.n_layers) + " layers; keel imports at most " +
                                                std::to_string(kMaxHfLayers));
    m.n_layers = 1;
  }
  m.n_heads = f.integer("num_attention_heads");
  m.n_kv_heads = f.integer("num_key_value_heads", m.n_heads);
  m.d_ff = f.integer("intermediate_size");
  if (f.has("head_dim") && m.n_heads > 0 && f.integer("head_dim") * m.n_heads != m.d_model)
    e.add("config.json: head_dim", std::to_string(f.integer("head_dim")) + " x num_attention_heads " +
                                       std::to_string(m.n_heads) + " != hidden_size " + std::to_string(m.d_model) +
                                       ": keel's head_dim is d_model / n_heads");

  const std::string act_key = gemma ? (f.has("hidden_activation") ? "hidden_activation" : "hidden_act") : "hidden_act";
  const std::string act = f.text(act_key, gemma ? "gelu_pytorch_tanh" : "silu");
  if (act == "silu" || act == "swish") m.mlp = MlpKind::swiglu;
  else if (act == "gelu_pytorch_tanh") m.mlp = MlpKind::geglu_tanh;
  else e.add("config.json: " + act_key, act + ": keel's gated MLPs are silu (swiglu) and gelu_pytorch_tanh (geglu_tanh)");

  m.norm = NormKind::rms;
  m.norm_eps = f.real("rms_norm_eps", *family == HfFamily::olmo2 ? 1e-5 : 1e-6);
  m.norm_unit_offset = gemma;  // Gemma's x_hat * (1 + w): weights are copied as they are
  m.rope = true;
  m.init.std = f.real("initializer_range", 0.02);
  m.tie_embeddings = f.boolean("tie_word_embeddings", gemma);  // the classes' own defaults

  const bool attention_bias = f.boolean("attention_bias", false);
  if (*family == HfFamily::llama) {
    const bool mlp_bias = f.boolean("mlp_bias", false);
    if (attention_bias != mlp_bias)
      e.add("config.json: mlp_bias", std::string(mlp_bias ? "true" : "false") + " with attention_bias " +
                                         (attention_bias ? "true" : "false") +
                                         ": keel's model.bias puts biases in attention and MLP together");
    m.bias = attention_bias && mlp_bias;
  } else if (attention_bias) {
    e.add("config.json: attention_bias", "true: keel's model.bias would also add MLP biases this class lacks");
  }
  if (f.boolean("use_bidirectional_attention", false))
    e.add("config.json: use_bidirectional_attention", "true: keel's attention is causal");

  // RoPE base; Gemma 3 has one per layer type.
  const auto types = layer_types_of(j, *family, m.n_layers);
  const bool any_sliding = std::count(types.begin(), types.end(), "sliding_attention") > 0;
  for (const auto& t : types)
    if (t != "full_attention" && t != "sliding_attention")
      e.add("config.json: layer_types", "'" + t + "' is not full_attention or sliding_attention");
  const double legacy_theta = f.real("rope_theta", *family == HfFamily::gemma3 ? 1e6 : 1e4);
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    rope_theta_of(j["rope_scaling"], "rope_scaling", legacy_theta, e);
  const nlohmann::json rp = j.contains("rope_parameters") ? j["rope_parameters"] : nlohmann::json();
  if (*family == HfFamily::gemma3) {
    const bool nested = rp.is_object() && rp.contains("full_attention");
    m.rope_theta = nested ? rope_theta_of(rp["full_attention"], "rope_parameters.full_attention", legacy_theta, e)
                          : rope_theta_of(rp, "rope_parameters", legacy_theta, e);
    const double local = nested && rp.contains("sliding_attention")
                             ? rope_theta_of(rp["sliding_attention"], "rope_parameters.sliding_attention", 1e4, e)
                             : f.real("rope_local_base_freq", 1e4);
    if (any_sliding && local != m.rope_theta)
      e.add("config.json: rope_parameters.sliding_attention.rope_theta",
            std::to_string(local) + " differs from the full-attention layers' " + std::to_string(m.rope_theta) +
                ": keel has one RoPE base for every layer (Gemma 3 fits only when both are equal or every "
                "layer is full_attention)");
  } else {
    m.rope_theta = rope_theta_of(rp, "rope_parameters", legacy_theta, e);
  }

  // Layout per family.
  auto& qk = m.qk_norm;
  switch (*family) {
    case HfFamily::llama:
      m.norm_placement = NormPlacement::pre;
      break;
    case HfFamily::qwen3:
      m.norm_placement = NormPlacement::pre;
      qk.type = NormKind::rms;
      qk.scope = QKNormScope::head;
      break;
    case HfFamily::olmo2:
      m.norm_placement = NormPlacement::reordered;
      qk.type = NormKind::rms;
      qk.scope = QKNormScope::projection;
      break;
    case HfFamily::gemma2:
    case HfFamily::gemma3:
      m.norm_placement = NormPlacement::sandwich;
      m.embed_norm = EmbedNorm::scale_sqrt_d;
      if (*family == HfFamily::gemma3) {
        qk.type = NormKind::rms;
        qk.scope = QKNormScope::head;
      }
      m.query_pre_attn_scalar = f.real("query_pre_attn_scalar", 256.0);
      // Absent means the class default: Gemma 2 caps at 50 and 30, Gemma 3 not at all.
      m.attn_softcap = f.optional_real("attn_logit_softcapping",
                                       *family == HfFamily::gemma2 ? std::optional<double>(50.0) : std::nullopt);
      m.final_softcap = f.optional_real("final_logit_softcapping",
                                        *family == HfFamily::gemma2 ? std::optional<double>(30.0) : std::nullopt);
      break;
  }
  if (qk.type != NormKind::none) {
    qk.position = QKNormPosition::before_rope;
    qk.gain = true;
    qk.eps = m.norm_eps;  // transformers uses rms_norm_eps for q_norm/k_norm too
  }

  // Context length.
  const int64_t max_pos = f.integer("max_position_embeddings", int64_t{2048});
  if (max_seq_len > 0) {
    m.max_seq_len = max_seq_len;
  } else {
    m.max_seq_len = std::min<int64_t>(max_pos, 8192);
    if (m.max_seq_len < max_pos)
      out.notes.push_back("model.max_seq_len = " + std::to_string(m.max_seq_len) + " (max_position_embeddings " +
                          std::to_string(max_pos) + " capped; --max-seq-len sets it)");
  }
  if (any_sliding && f.has("sliding_window")) {
    const int64_t window = f.integer("sliding_window");
    if (window > 0 && m.max_seq_len > window) {
      if (max_seq_len > 0)
        e.add("config.json: sliding_window",
              std::to_string(window) + " is shorter than --max-seq-len " + std::to_string(max_seq_len) +
                  ": keel has no sliding-window attention, so it matches this model only up to the window");
      else {
        m.max_seq_len = window;
        out.notes.push_back("model.max_seq_len = " + std::to_string(window) +
                            ": the sliding window of this model's local layers (keel attends to the whole "
                            "context, which equals the window up to this length)");
      }
    }
  }

  out.ids.bos = f.token_id("bos_token_id");
  out.ids.eos = f.token_id("eos_token_id");
  out.ids.pad = f.token_id("pad_token_id");

  // What keel itself checks (divisibility, ranges), under keel's key names.
  if (e.empty()) check_model(m, e);
  if (!e.empty()) throw ConfigError(e);
  // The imported config must map back to the same class (the round trip).
  HfFamily back = *family;
  ConfigErrors refusals = hf_export_refusals(m, &back);
  if (!refusals.empty() || back != *family) {
    refusals.add("import-hf", "internal: the imported config does not map back to " + model_type);
    throw ConfigError(refusals);
  }
  return out;
}

}  // namespace keel
