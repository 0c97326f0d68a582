#include "interop/hf_mapping.h"

#include <cmath>
#include <set>

#include "model/parametrization.h"

namespace keel {

namespace {

const std::vector<HfFamilyInfo>& families() {
  static const std::vector<HfFamilyInfo> all = {
      {HfFamily::llama, "llama", "LlamaForCausalLM", "Llama", false, false},
      {HfFamily::qwen3, "qwen3", "Qwen3ForCausalLM", "Qwen3", false, true},
      {HfFamily::olmo2, "olmo2", "Olmo2ForCausalLM", "OLMo 2", false, true},
      {HfFamily::gemma2, "gemma2", "Gemma2ForCausalLM", "Gemma 2", true, false},
      {HfFamily::gemma3, "gemma3_text", "Gemma3ForCausalLM", "Gemma 3", true, true},
  };
  return all;
}

}  // namespace

bool hf_mapping_reads(const std::string& key) {
  static const std::set<std::string> keys = {
      "model.vocab_size",   "model.pad_vocab_multiple", "model.max_seq_len",      "model.d_model",
      "model.n_layers",     "model.n_heads",            "model.n_kv_heads",       "model.d_ff",
      "model.mlp",          "model.norm",               "model.norm_unit_offset", "model.norm_eps",
      "model.norm_placement", "model.bias",             "model.tie_embeddings",   "model.rope",
      "model.rope_theta",   "model.attn_softcap",       "model.final_softcap",    "model.embed_norm",
      "model.query_pre_attn_scalar",
      // QK-Norm: checked above; the l2 temperature keys only matter with type l2 (refused).
      "model.qk_norm.type", "model.qk_norm.scope", "model.qk_norm.position", "model.qk_norm.gain",
      "model.qk_norm.gain_per_head", "model.qk_norm.bias", "model.qk_norm.eps",
      "model.qk_norm.temperature_learnable", "model.qk_norm.temperature_per_head",
      "model.qk_norm.temperature_init", "model.qk_norm.henry_seq_len",
      // Folded into the exported tensors (hf_fold_factors) or refused below.
      "model.parametrization"};
  return keys.count(key) > 0 || key.rfind("model.init.", 0) == 0 || key.rfind("model.mup.", 0) == 0;
}

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

const HfFamilyInfo& hf_family_info(HfFamily family) {
  for (const auto& f : families())
    if (f.family == family) return f;
  return families().front();
}

std::optional<HfFamily> hf_family_from_model_type(const std::string& model_type) {
  for (const auto& f : families())
    if (f.model_type == model_type) return f.family;
  return std::nullopt;
}

ConfigErrors hf_export_refusals(const ModelConfig& m, HfFamily* family_out) {
  ConfigErrors e;
  const auto& qk = m.qk_norm;
  const bool has_qk = qk.type != NormKind::none;

  // 1. The block layout and the QK-Norm pick the class.
  std::optional<HfFamily> family;
  if (m.norm_placement == NormPlacement::post) {
    e.add("model.norm_placement",
          "post (classic Post-LN, norm(x + f(x))) has no Hugging Face decoder class; mapped layouts are pre "
          "(Llama, Qwen3), reordered (OLMo 2) and sandwich (Gemma 2, Gemma 3)");
  } else if (m.norm_placement == NormPlacement::pre) {
    if (!has_qk) family = HfFamily::llama;
    else if (qk.scope == QKNormScope::head) family = HfFamily::qwen3;
    else
      e.add("model.qk_norm.scope",
            name_of(qk.scope) + " with model.norm_placement: pre has no Hugging Face class (Qwen3 normalises each head; "
                       "OLMo 2's projection-wide QK-Norm comes with norm_placement: reordered)");
  } else if (m.norm_placement == NormPlacement::reordered) {
    if (!has_qk)
      e.add("model.qk_norm.type",
            "none with model.norm_placement: reordered: OLMo 2, the class with this layout, always has an RMS "
            "QK-Norm over the q and k projections (qk_norm: {type: rms, scope: projection})");
    else if (qk.scope == QKNormScope::projection) family = HfFamily::olmo2;
    else
      e.add("model.qk_norm.scope", name_of(qk.scope) +
                                       " with model.norm_placement: reordered: OLMo 2 normalises the whole q and "
                                       "k projections (scope: projection)");
  } else if (m.norm_placement == NormPlacement::sandwich) {
    if (!has_qk) family = HfFamily::gemma2;
    else if (qk.scope == QKNormScope::head) family = HfFamily::gemma3;
    else
      e.add("model.qk_norm.scope",
            name_of(qk.scope) + " with model.norm_placement: sandwich: Gemma 3 normalises each head (scope: head)");
  }

  // 2. What every mapped class has.
  if (m.norm != NormKind::rms)
    e.add("model.norm", name_of(m.norm) + ": the mapped Hugging Face classes (Llama, Qwen3, OLMo 2, Gemma) use RMSNorm");
  if (!m.rope) e.add("model.rope", "false: every mapped Hugging Face class uses rotary position embeddings");
  if (m.mlp == MlpKind::gelu)
    e.add("model.mlp",
          "gelu (down(gelu(up x)), no gate) has no mapped Hugging Face class; they all use a gated MLP "
          "(model.mlp: swiglu, or geglu_tanh for Gemma's gelu_pytorch_tanh)");
  if (has_qk) {
    if (qk.type != NormKind::rms)
      e.add("model.qk_norm.type", name_of(qk.type) +
                                      ": Hugging Face's QK-Norms (Qwen3, OLMo 2, Gemma 3) are RMSNorms; L2 and "
                                      "LayerNorm QK-Norm have no class");
    if (qk.position != QKNormPosition::before_rope)
      e.add("model.qk_norm.position", name_of(qk.position) + ": Qwen3, OLMo 2 and Gemma 3 normalise q and k before RoPE");
    if (qk.gain_per_head)
      e.add("model.qk_norm.gain_per_head",
            "true: Qwen3 and Gemma 3 share one head_dim-sized gain across heads");
    if (qk.type == NormKind::rms && qk.eps != m.norm_eps)
      e.add("model.qk_norm.eps", num(qk.eps) + " differs from model.norm_eps = " + num(m.norm_eps) +
                                     ": transformers uses config.rms_norm_eps for block and QK norms alike");
  }

  // 3. Family-specific keys.
  if (family) {
    const bool gemma = is_gemma(*family);
    const std::string name = hf_family_info(*family).display;
    if (gemma && m.embed_norm != EmbedNorm::scale_sqrt_d)
      e.add("model.embed_norm", name_of(m.embed_norm) + ": " + name +
                                    " scales the embedding by sqrt(d_model) (embed_norm: scale_sqrt_d)");
    if (!gemma && m.embed_norm != EmbedNorm::none)
      e.add("model.embed_norm", name_of(m.embed_norm) + ": " + name + " has nothing after the embedding lookup (none)");
    if (m.bias && *family != HfFamily::llama)
      e.add("model.bias", "true: " + name +
                              " has no MLP biases (only Llama has attention_bias and mlp_bias)");
    if (!gemma && m.attn_softcap)
      e.add("model.attn_softcap", "set: only Gemma 2/3 (norm_placement: sandwich) cap attention scores");
    if (!gemma && m.final_softcap)
      e.add("model.final_softcap", "set: only Gemma 2/3 (norm_placement: sandwich) cap output logits");
    if (gemma && m.query_pre_attn_scalar && std::floor(*m.query_pre_attn_scalar) != *m.query_pre_attn_scalar)
      e.add("model.query_pre_attn_scalar",
            num(*m.query_pre_attn_scalar) + ": " + name + "'s config declares query_pre_attn_scalar an integer");
    if (!gemma && m.query_pre_attn_scalar && *m.query_pre_attn_scalar != static_cast<double>(m.head_dim()))
      e.add("model.query_pre_attn_scalar",
            num(*m.query_pre_attn_scalar) + ": " + name + " scales scores by head_dim^-0.5 (head_dim = " +
                std::to_string(m.head_dim()) + "); only Gemma has query_pre_attn_scalar");
  }
  // 4. µP/CompleteP multipliers that have no tensor to live in.
  if (m.parametrization != Parametrization::standard) {
    const ForwardScaling f = forward_scaling(m);
    if (f.output_mult != 1.0 && m.tie_embeddings)
      e.add("model.tie_embeddings",
            "true with model.parametrization: " + name_of(m.parametrization) + " and base_width != d_model: the "
            "readout multiplier " + num(f.output_mult) + " cannot be folded into a head shared with the embedding");
    if (f.attn_scale && m.qk_norm.type != NormKind::none && !m.qk_norm.gain)
      e.add("model.qk_norm.gain", "false with model.parametrization: " + name_of(m.parametrization) +
                                      ": the muP attention scale is folded into the q gain, which this model lacks");
  }
  // 5. Any other model key (one added later included) that is not at its
  // default changes the computation in a way these classes do not have.
  Config with, defaults;
  with.model = m;
  Schema a = make_schema(with), b = make_schema(defaults);
  for (size_t i = 0; i < a.keys().size(); ++i) {
    const std::string& key = a.keys()[i].path;
    if (key.rfind("model.", 0) != 0 || hf_mapping_reads(key)) continue;
    const std::string value = a.value_string(a.keys()[i]), default_value = b.value_string(b.keys()[i]);
    if (value != default_value)
      e.add(key, value + ": keel-only, no mapped Hugging Face class has it (the default " + default_value +
                     " is exportable)");
  }
  if (e.empty() && family && family_out) *family_out = *family;
  return e;
}

HfFamily hf_family_for(const ModelConfig& m) {
  HfFamily family = HfFamily::llama;
  ConfigErrors e = hf_export_refusals(m, &family);
  if (!e.empty()) throw ConfigError(e);
  return family;
}

std::vector<HfTensorName> hf_tensor_names(const ModelConfig& m, HfFamily family) {
  const int64_t V = m.vocab_size, C = m.d_model, D = m.head_dim(), H = m.n_heads, K = m.n_kv_heads;
  const int64_t F = m.ffn_dim();
  std::vector<HfTensorName> out;
  auto add = [&](const std::string& k, const std::string& h, TensorRole role, std::vector<int64_t> shape) {
    out.push_back({k, h, role, std::move(shape)});
  };
  add("wte", "model.embed_tokens.weight", TensorRole::vocab_rows, {V, C});
  for (int64_t i = 0; i < m.n_layers; ++i) {
    const std::string k = "blocks." + std::to_string(i) + ".", h = "model.layers." + std::to_string(i) + ".";
    // Norms, in the order the class's DecoderLayer declares them.
    switch (family) {
      case HfFamily::llama:
      case HfFamily::qwen3:  // pre: input_layernorm before attention, post_attention_layernorm before the MLP
        add(k + "attn_norm.weight", h + "input_layernorm.weight", TensorRole::norm_gain, {C});
        add(k + "mlp_norm.weight", h + "post_attention_layernorm.weight", TensorRole::norm_gain, {C});
        break;
      case HfFamily::olmo2:  // reordered: both norms on the sub-layer outputs
        add(k + "attn_norm.weight", h + "post_attention_layernorm.weight", TensorRole::norm_gain, {C});
        add(k + "mlp_norm.weight", h + "post_feedforward_layernorm.weight", TensorRole::norm_gain, {C});
        break;
      case HfFamily::gemma2:
      case HfFamily::gemma3:  // sandwich
        add(k + "attn_norm.weight", h + "input_layernorm.weight", TensorRole::norm_gain, {C});
        add(k + "attn_post_norm.weight", h + "post_attention_layernorm.weight", TensorRole::norm_gain, {C});
        add(k + "mlp_norm.weight", h + "pre_feedforward_layernorm.weight", TensorRole::norm_gain, {C});
        add(k + "mlp_post_norm.weight", h + "post_feedforward_layernorm.weight", TensorRole::norm_gain, {C});
        break;
    }
    add(k + "attn.wq", h + "self_attn.q_proj.weight", TensorRole::plain, {H * D, C});
    add(k + "attn.wk", h + "self_attn.k_proj.weight", TensorRole::plain, {K * D, C});
    add(k + "attn.wv", h + "self_attn.v_proj.weight", TensorRole::plain, {K * D, C});
    add(k + "attn.wo", h + "self_attn.o_proj.weight", TensorRole::plain, {C, H * D});
    if (m.bias) {
      add(k + "attn.wq_bias", h + "self_attn.q_proj.bias", TensorRole::plain, {H * D});
      add(k + "attn.wk_bias", h + "self_attn.k_proj.bias", TensorRole::plain, {K * D});
      add(k + "attn.wv_bias", h + "self_attn.v_proj.bias", TensorRole::plain, {K * D});
      add(k + "attn.wo_bias", h + "self_attn.o_proj.bias", TensorRole::plain, {C});
    }
    if (hf_family_info(family).qk_norm) {
      // OLMo 2: RMSNorm(n_heads*head_dim) and RMSNorm(n_kv_heads*head_dim); Qwen3, Gemma 3: RMSNorm(head_dim).
      const bool projection = family == HfFamily::olmo2;
      const std::vector<int64_t> qs = {projection ? H * D : D}, ks = {projection ? K * D : D};
      const bool gain = m.qk_norm.gain;
      add(gain ? k + "attn.q_norm.weight" : "", h + "self_attn.q_norm.weight",
          gain ? TensorRole::norm_gain : TensorRole::unit_gain, qs);
      add(gain ? k + "attn.k_norm.weight" : "", h + "self_attn.k_norm.weight",
          gain ? TensorRole::norm_gain : TensorRole::unit_gain, ks);
    }
    add(k + "mlp.w_gate", h + "mlp.gate_proj.weight", TensorRole::plain, {F, C});
    add(k + "mlp.w_up", h + "mlp.up_proj.weight", TensorRole::plain, {F, C});
    add(k + "mlp.w_down", h + "mlp.down_proj.weight", TensorRole::plain, {C, F});
    if (m.bias) {  // Llama's mlp_bias
      add(k + "mlp.w_gate_bias", h + "mlp.gate_proj.bias", TensorRole::plain, {F});
      add(k + "mlp.w_up_bias", h + "mlp.up_proj.bias", TensorRole::plain, {F});
      add(k + "mlp.w_down_bias", h + "mlp.down_proj.bias", TensorRole::plain, {C});
    }
  }
  add("final_norm.weight", "model.norm.weight", TensorRole::norm_gain, {C});
  if (!m.tie_embeddings) add("lm_head", "lm_head.weight", TensorRole::vocab_rows, {V, C});
  return out;
}

std::vector<std::pair<std::string, double>> hf_fold_factors(const ModelConfig& m) {
  std::vector<std::pair<std::string, double>> out;
  if (m.parametrization == Parametrization::standard) return out;
  const ForwardScaling f = forward_scaling(m);
  if (f.output_mult != 1.0 && !m.tie_embeddings) out.emplace_back("lm_head", f.output_mult);
  for (int64_t i = 0; i < m.n_layers; ++i) {
    const std::string k = "blocks." + std::to_string(i) + ".";
    if (f.attn_scale) {
      // Scores x c with c = scale * sqrt(head_dim): q x c (RoPE is linear), or the q gain x c.
      const double c = *f.attn_scale * std::sqrt(static_cast<double>(m.head_dim()));
      if (m.qk_norm.type != NormKind::none) {
        out.emplace_back(k + "attn.q_norm.weight", c);
      } else {
        out.emplace_back(k + "attn.wq", c);
        if (m.bias) out.emplace_back(k + "attn.wq_bias", c);
      }
    }
    if (f.residual_mult != 1.0) {
      std::vector<std::string> last;
      if (m.norm_placement == NormPlacement::reordered) last = {"attn_norm.weight", "mlp_norm.weight"};
      else if (m.norm_placement == NormPlacement::sandwich) last = {"attn_post_norm.weight", "mlp_post_norm.weight"};
      else if (m.bias) last = {"attn.wo", "attn.wo_bias", "mlp.w_down", "mlp.w_down_bias"};
      else last = {"attn.wo", "mlp.w_down"};
      for (const auto& t : last) out.emplace_back(k + t, f.residual_mult);
    }
  }
  return out;
}

bool is_ignorable_hf_tensor(const std::string& name) {
  const std::string suffix = "rotary_emb.inv_freq";
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace keel
