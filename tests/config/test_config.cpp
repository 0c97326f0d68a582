// Strict configs: every broken config is rejected with its key path, all
// errors in one pass, and every shipped config validates.
#include <gtest/gtest.h>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <fstream>

#include "config/config.h"
#include "test_util.h"
#include "util/fs.h"

using namespace keel;

namespace {

// Returns the error text for a config that must be rejected ("" if accepted).
std::string rejection(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    config_from_yaml_text(yaml, overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

struct BrokenCase {
  const char* yaml;
  const char* path;      // must appear in the message
  const char* contains;  // and so must this
};

const BrokenCase kBroken[] = {
    {"model:\n  qk_nrom: {type: rms}\n", "model.qk_nrom", "did you mean model.qk_norm?"},
    {"model:\n  d_modle: 64\n", "model.d_modle", "did you mean model.d_model?"},
    {"trian:\n  lr: 0.1\n", "trian", "did you mean train?"},
    {"model:\n  d_model: abc\n", "model.d_model", "expected an integer"},
    {"model:\n  d_model: 64.5\n", "model.d_model", "expected an integer"},
    {"train:\n  lr: fast\n", "train.lr", "expected a number"},
    {"model:\n  bias: maybe\n", "model.bias", "expected true or false"},
    {"model:\n  norm_placement: middle\n", "model.norm_placement", "pre | post | reordered | sandwich"},
    {"model:\n  qk_norm:\n    type: l3\n", "model.qk_norm.type", "none | rms | layernorm | l2"},
    {"model:\n  d_model: 130\n  n_heads: 4\n", "model.d_model", "not divisible by model.n_heads"},
    {"model:\n  n_heads: 6\n  d_model: 192\n  n_kv_heads: 4\n", "model.n_heads", "not divisible by model.n_kv_heads"},
    {"model:\n  d_model: 12\n  n_heads: 4\n  n_kv_heads: 4\n", "model.d_model", "is odd"},
    {"model:\n  attn_softcap: 0\n", "model.attn_softcap", "must be > 0"},
    {"model:\n  final_softcap: -30\n", "model.final_softcap", "must be > 0"},
    {"train:\n  warmup_steps: 700\n  max_steps: 600\n", "train.warmup_steps", "longer than train.max_steps"},
    {"model:\n  n_layers: 0\n", "model.n_layers", "must be >= 1"},
    {"train:\n  lr: 0\n", "train.lr", "must be > 0"},
    {"train:\n  beta2: 1.5\n", "train.beta2", "must be <= 1"},
    {"train:\n  seq_len: 512\nmodel:\n  max_seq_len: 256\n", "train.seq_len", "exceeds model.max_seq_len"},
    {"train:\n  batch_size: 10\n  micro_batch_size: 4\n", "train.micro_batch_size", "does not divide"},
    {"model:\n  qk_norm: {type: rms, temperature_init: 3}\n", "model.qk_norm.temperature_init", "only used with type: l2"},
    {"model:\n  qk_norm: {type: rms, bias: true}\n", "model.qk_norm.bias", "RMSNorm has no bias"},
    {"model:\n  n_kv_heads: 8\n  n_heads: 4\n", "model.n_kv_heads", "exceeds model.n_heads"},
    {"model: 5\n", "model", "is a section"},
    {"run:\n  name: a/b\n", "run.name", "without '/'"},
    {"model:\n  d_model: [1, 2]\n", "model.d_model", "got a list"},
    {"train:\n  cuda_graph: true\nmonitor:\n  skip_on_spike: true\n", "train.cuda_graph", "on_spike: skip_step"},
    {"train:\n  cuda_graph: true\nmonitor:\n  on_spike: rewind\n", "train.cuda_graph", "on_spike: rewind"},
    {"monitor:\n  on_spike: rewind\ncheckpoint:\n  every: 0\n", "monitor.on_spike", "checkpoint.every > 0"},
    {"monitor:\n  on_spike: rewind\n  skip_on_spike: true\n", "monitor.skip_on_spike", "cannot be combined"},
    {"monitor:\n  on_spike: undo\n", "monitor.on_spike", "none | skip_step | rewind"},
    {"data:\n  skip_batches: ['10:5', '12']\n", "data.skip_batches", "entry 1 '12' is not AFTER:COUNT"},
    {"data:\n  skip_batches: ['10:0']\n", "data.skip_batches", "COUNT >= 1"},
    {"data:\n  skip_batches: ['-1:3']\n", "data.skip_batches", "entry 0"},
    {"data:\n  skip_batches: ['4:2x']\n", "data.skip_batches", "entry 0"},
    {"data:\n  reset_positions: true\n", "data.reset_positions", "set data.document_mask: true"},
    {"data:\n  document_mask: true\ntrain:\n  cuda_graph: true\n  device: cuda\n", "data.document_mask",
     "train.cuda_graph"},
    {"data:\n  align: eos\n  sources: [{path: a.txt, weight: 1}, {path: b.txt, weight: 2}]\n", "data.align",
     "mixture"},
    {"data:\n  align: middle\n", "data.align", "middle"},
    {"train:\n  cuda_graph: true\nmonitor:\n  layer_grad_norms: true\n", "train.cuda_graph",
     "monitor.layer_grad_norms"},
    {"train:\n  cuda_graph: true\n  qk_clip_tau: 100\n", "train.cuda_graph", "train.qk_clip_tau"},
    {"train:\n  cuda_graph: true\nmodel:\n  sigma_reparam: true\n", "train.cuda_graph", "model.sigma_reparam"},
    {"train:\n  cuda_graph: true\n  optimizer_impl: reference\n", "train.cuda_graph", "optimizer_impl: reference"},
    {"train:\n  cuda_graph: true\n  activation_checkpointing: full\n", "train.cuda_graph",
     "train.activation_checkpointing"},
    {"train:\n  activation_checkpointing: every_n\n  checkpoint_every_n: 0\n", "train.checkpoint_every_n", ">= 1"},
    // µP / CompleteP (model/parametrization.h): the base model must exist, conflicting knobs are refused.
    {"model:\n  mup: {base_width: 64}\n", "model.mup", "only used with model.parametrization"},
    {"model:\n  parametrization: mup\n  mup: {base_depth: 2}\n", "model.mup.base_depth", "completep"},
    {"model:\n  parametrization: mup\n  mup: {base_width: 30}\n", "model.mup.base_width",
     "not divisible by model.n_heads"},
    {"model:\n  parametrization: mup\n  mup: {base_width: 64, base_head_dim: 24}\n", "model.mup.base_head_dim",
     "does not divide"},
    {"model:\n  parametrization: mup\n  mup: {base_width: 32, base_head_dim: 32}\n", "model.mup.base_head_dim",
     "cannot keep the ratio"},
    {"model:\n  parametrization: mup\n  d_ff: 100\n  mup: {base_width: 48}\n", "model.d_ff", "not a whole number"},
    {"model:\n  parametrization: mup\n  sigma_reparam: true\n", "model.sigma_reparam", "spectral norm"},
    {"model:\n  parametrization: completep\n  embed_norm: scale_sqrt_d\n", "model.embed_norm", "grow with width"},
    {"model:\n  parametrization: mup\n  query_pre_attn_scalar: 64\n", "model.query_pre_attn_scalar",
     "sqrt(base_head_dim)/head_dim"},
    {"model:\n  parametrization: completep\n  norm_placement: post\n", "model.norm_placement",
     "identity residual stream"},
    {"model:\n  parametrization: completep\n  mup: {depth_alpha: 2}\n", "model.mup.depth_alpha", "must be <= 1"},
};

}  // namespace

// A non-UTF-8 run name or directory (e.g. from --set in a Latin-1 shell)
// used to train to the end and then fail every save; it is refused up front.
TEST(Config, NonUtf8RunNameAndDirAreRefused) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"run.name", "r\xff"}, {"run.out_dir", "runs\xc3"}, {"run.name", "caf\xe9"}}) {
    try {
      keel::config_from_yaml_text("", {key + "=" + value});
      ADD_FAILURE() << key << " accepted";
    } catch (const keel::ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(key + ": is not valid UTF-8"), std::string::npos) << what;
    }
  }
  EXPECT_NO_THROW(keel::config_from_yaml_text("", {"run.name=caf\xc3\xa9"}));  // "café" in UTF-8
}

// Hostile nesting in a config file ends in a config error naming the file,
// not a stack overflow (yaml-cpp bounds its own recursion; this keeps it so).
TEST(Config, DeeplyNestedYamlIsAnError) {
  for (const std::string& text : {"model: " + std::string(100000, '[') + std::string(100000, ']'),
                                  [] {
                                    std::string t = "model: ";
                                    for (int i = 0; i < 100000; ++i) t += "{a: ";
                                    return t + "1" + std::string(100000, '}');
                                  }()}) {
    EXPECT_THROW(keel::config_from_yaml_text(text), keel::ConfigError);
  }
}

TEST(Config, DefaultsValidate) {
  Config c;
  EXPECT_NO_THROW(validate(c));
}

TEST(Config, EachBrokenConfigIsRejectedWithItsPath) {
  ASSERT_GE(sizeof(kBroken) / sizeof(kBroken[0]), 15u);
  for (const auto& bc : kBroken) {
    std::string err = rejection(bc.yaml);
    SCOPED_TRACE(bc.yaml);
    ASSERT_FALSE(err.empty()) << "accepted a broken config";
    EXPECT_NE(err.find(bc.path), std::string::npos) << err;
    EXPECT_NE(err.find(bc.contains), std::string::npos) << err;
  }
}

TEST(Config, AllErrorsReportedInOnePass) {
  std::string err = rejection(
      "model:\n  qk_nrom: 1\n  d_model: 130\n  bias: maybe\ntrain:\n  lr: x\n  warmup_steps: 9999\n");
  for (const char* path : {"model.qk_nrom", "model.d_model", "model.bias", "train.lr", "train.warmup_steps"})
    EXPECT_NE(err.find(path), std::string::npos) << path << " missing from:\n" << err;
}

TEST(Config, ErrorsNameFileAndLine) {
  std::string dir = keel_test::make_temp_dir("cfg");
  std::string path = dir + "/bad.yaml";
  std::ofstream(path) << "model:\n  d_model: 64\n  n_layrs: 2\n";
  try {
    load_config(path);
    FAIL() << "accepted unknown key";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":3"), std::string::npos) << e.what();
  }
  keel::remove_tree(dir);
}

TEST(Config, SyntaxErrorIsReported) {
  std::string err = rejection("model:\n  d_model: [1, 2\n");
  EXPECT_NE(err.find("syntax error"), std::string::npos) << err;
}

TEST(Config, OverridesApplyAndAreValidated) {
  Config c = config_from_yaml_text("model:\n  d_model: 64\n", {"model.d_model=96", "train.lr=1e-3",
                                                              "model.qk_norm.type=l2", "model.attn_softcap=null"});
  EXPECT_EQ(c.model.d_model, 96);
  EXPECT_DOUBLE_EQ(c.train.lr, 1e-3);
  EXPECT_EQ(c.model.qk_norm.type, keel::NormKind::l2);
  EXPECT_FALSE(c.model.attn_softcap.has_value());

  EXPECT_NE(rejection("", {"model.d_model=130"}).find("model.d_model"), std::string::npos);
  EXPECT_NE(rejection("", {"model.qk_nrom.type=rms"}).find("did you mean model.qk_norm.type?"), std::string::npos);
  EXPECT_NE(rejection("", {"train.lr"}).find("expected KEY=VALUE"), std::string::npos);
}

TEST(Config, RoundTripThroughYamlIsExact) {
  Config c = config_from_yaml_text(
      "model:\n  d_model: 64\n  attn_softcap: 50\n  qk_norm:\n    type: l2\n    temperature_init: 7.5\n"
      "data:\n  sources: [a.txt, 'b c.jsonl']\ntrain:\n  lr: 0.000123456789\n  min_lr: 0.0000123\n");
  std::string yaml = config_to_yaml(c);
  Config d = config_from_yaml_text(yaml);
  EXPECT_EQ(yaml, config_to_yaml(d));
  EXPECT_EQ(d.model.d_model, 64);
  EXPECT_DOUBLE_EQ(*d.model.attn_softcap, 50.0);
  EXPECT_DOUBLE_EQ(*d.model.qk_norm.temperature_init, 7.5);
  EXPECT_DOUBLE_EQ(d.train.lr, 0.000123456789);
  EXPECT_EQ(d.data.sources, (std::vector<std::string>{"a.txt", "b c.jsonl"}));
}

TEST(Config, DescribeListsEveryKeyWithHelp) {
  Config c;
  Schema s = make_schema(c);
  std::string text = describe_config();
  ASSERT_GT(s.keys().size(), 40u);
  for (const auto& key : s.keys()) {
    EXPECT_NE(text.find(key.path), std::string::npos) << key.path;
    EXPECT_FALSE(key.help.empty()) << key.path << " has no description";
  }
}

TEST(Config, EveryShippedConfigValidates) {
  int n = 0;
  // configs/*.yaml (sweep files under configs/sweeps/ have their own format).
  for (const auto& name : keel::list_directory(keel_test::source_path("configs"))) {
    if (name.size() < 5 || name.compare(name.size() - 5, 5, ".yaml") != 0) continue;
    SCOPED_TRACE(name);
    EXPECT_NO_THROW(load_config(keel_test::source_path("configs/" + name)));
    ++n;
  }
  EXPECT_GE(n, 7);
}

TEST(Config, DocumentedInConfigsReadme) {
  std::ifstream in(keel_test::source_path("docs/configuration.md"));
  ASSERT_TRUE(in) << "docs/configuration.md is missing";
  std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Config c;
  Schema schema = make_schema(c);
  for (const auto& key : schema.keys())
    EXPECT_NE(doc.find("`" + key.path + "`"), std::string::npos) << key.path << " is not documented";
}

TEST(Config, CliExitsWithTwoAndPrintsPaths) {
  std::string dir = keel_test::make_temp_dir("cli");
  std::string path = dir + "/bad.yaml";
  std::ofstream(path) << "model:\n  qk_nrom: {type: rms}\ntrain:\n  lr: -1\n";
  std::string out;
  EXPECT_EQ(keel_test::run_keel("validate " + path, &out), 2);
  EXPECT_NE(out.find("model.qk_nrom"), std::string::npos) << out;
  EXPECT_NE(out.find("train.lr"), std::string::npos) << out;
  EXPECT_EQ(keel_test::run_keel("validate " + keel_test::source_path("configs/default.yaml") +
                                    " --set model.d_model=96",
                                &out),
            0)
      << out;
  EXPECT_NE(out.find("d_model: 96"), std::string::npos) << out;
  keel::remove_tree(dir);
}

// Every resolved config reloads to the identical config (issue 20, defect 7):
// strings YAML would read as null, booleans, numbers, lists or mappings, or
// whose characters need escapes, and numbers that need all 17 digits.
TEST(Config, EveryKeyRoundTripsThroughTheSavedYaml) {
  const std::vector<std::string> strings = {
      "NULL", "null", "Null", "~", "- x", "x\ny", "yes", "No", "on", "OFF", "y", "1e3", "0x10", "12", "-3.5",
      "true", " lead", "trail ", "a: b", "#c", "\"q\"", "back\\slash", "tab\there", "", "\xc3\xbc/\xc3\xb1",
      "*star", "&amp", "!tag", "%p", "@a", "`b", "{x}", "[y]", "|", ">", "?", "x,y", "\x01ctl\x7f", ".inf",
      ".nan", "runs/ok-name_1.2", "'single'", "a #b", "key:"};
  const std::vector<double> numbers = {0.1 + 0.2, 1.0 / 3.0, 2.0 / 3.0 * 1e-7, 123456789.12345679, 1e-300,
                                       4.9406564584124654e-324, 1.7976931348623157e308, 1e22, 0.5};
  const std::vector<int64_t> integers = {9007199254740993LL, INT64_MAX, 0, 7};
  for (size_t i = 0; i < std::max({strings.size(), numbers.size(), integers.size()}); ++i) {
    Config a;
    Schema sa = make_schema(a);
    const std::string& text = strings[i % strings.size()];
    const double number = numbers[i % numbers.size()];
    const int64_t integer = integers[i % integers.size()];
    for (const auto& k : sa.keys()) {
      switch (k.kind) {
        case KeyKind::text: *static_cast<std::string*>(k.target) = text; break;
        case KeyKind::text_list: *static_cast<std::vector<std::string>*>(k.target) = {text, "plain", text}; break;
        case KeyKind::real: *static_cast<double*>(k.target) = number; break;
        case KeyKind::optional_real: *static_cast<std::optional<double>*>(k.target) = number; break;
        case KeyKind::integer: *static_cast<int64_t*>(k.target) = integer; break;
        case KeyKind::boolean: *static_cast<bool*>(k.target) = i % 2 == 1; break;
        case KeyKind::choice: k.choice_set(k.choices[i % k.choices.size()]); break;
      }
    }
    const std::string yaml = sa.to_yaml();
    SCOPED_TRACE(yaml);
    Config b;
    Schema sb = make_schema(b);
    ConfigErrors errors;
    sb.apply_yaml(YAML::Load(yaml), "saved", errors);
    ASSERT_TRUE(errors.empty()) << errors.joined();
    for (const auto& k : sa.keys()) {
      const KeyDef* kb = sb.find(k.path);
      ASSERT_NE(kb, nullptr);
      SCOPED_TRACE(k.path);
      switch (k.kind) {
        case KeyKind::text:
          EXPECT_EQ(*static_cast<std::string*>(kb->target), text);
          break;
        case KeyKind::text_list:
          EXPECT_EQ(*static_cast<std::vector<std::string>*>(kb->target),
                    (std::vector<std::string>{text, "plain", text}));
          break;
        case KeyKind::real: EXPECT_EQ(*static_cast<double*>(kb->target), number); break;
        case KeyKind::optional_real: EXPECT_EQ(*static_cast<std::optional<double>*>(kb->target), number); break;
        case KeyKind::integer: EXPECT_EQ(*static_cast<int64_t*>(kb->target), integer); break;
        case KeyKind::boolean: EXPECT_EQ(*static_cast<bool*>(kb->target), i % 2 == 1); break;
        case KeyKind::choice: EXPECT_EQ(kb->choice_get(), k.choice_get()); break;
      }
    }
  }
}

// Two equal keys in one mapping are an error, not "the last one wins" (issue 20, defect 12).
TEST(Config, DuplicateKeysAreAnError) {
  const std::string err = rejection("train:\n  lr: 0.1\n  lr: 0.2\n");
  EXPECT_NE(err.find("train.lr"), std::string::npos) << err;
  EXPECT_NE(err.find("duplicate key"), std::string::npos) << err;
  const std::string sections = rejection("model:\n  d_model: 64\nmodel:\n  n_layers: 2\n");
  EXPECT_NE(sections.find("duplicate key"), std::string::npos) << sections;
}

// Issue 31: mixture weights are checked where the config is, so `keel
// validate` refuses what `keel train` would: weights of 1e308 passed and then
// overflowed (their sum is infinite, every share 0); a share too small to mix
// passed and failed in train. A refused weight is the only error, not also
// "must list at least one file".
TEST(Config, MixtureWeightsAreBoundedAndARefusedWeightIsTheOnlyError) {
  auto errors_of = [](const std::string& sources) {
    try {
      config_from_yaml_text("data:\n  sources: " + sources + "\n");
    } catch (const ConfigError& e) {
      return e.errors().items;
    }
    return std::vector<std::string>{};
  };
  for (const char* w : {"0", "-1", ".nan"}) {
    SCOPED_TRACE(w);
    const auto items = errors_of(std::string("[{path: a.txt, weight: ") + w + "}, {path: b.txt, weight: 1}]");
    ASSERT_EQ(items.size(), 1u) << ::testing::PrintToString(items);
    EXPECT_EQ(items[0].rfind("data.sources[0].weight: must be a positive number", 0), 0u) << items[0];
  }
  auto items = errors_of("[{path: a.txt, weight: 1e308}, {path: b.txt, weight: 1e308}]");
  ASSERT_EQ(items.size(), 2u) << ::testing::PrintToString(items);
  EXPECT_EQ(items[0].rfind("data.sources[0].weight: 1e+308 is not a number in (0, 1e+15]", 0), 0u) << items[0];
  EXPECT_EQ(items[1].rfind("data.sources[1].weight: 1e+308", 0), 0u) << items[1];
  items = errors_of("[{path: a.txt, weight: 1}, {path: b.txt, weight: 1e-9}]");
  ASSERT_EQ(items.size(), 1u) << ::testing::PrintToString(items);
  EXPECT_NE(items[0].find("data.sources[1].weight: 1e-09 is a share of 1e-09 of the mixture, below the smallest"),
            std::string::npos)
      << items[0];
  // Large weights that are fine: relative, 3:1.
  EXPECT_TRUE(errors_of("[{path: a.txt, weight: 3e14}, {path: b.txt, weight: 1e14}]").empty());
}
