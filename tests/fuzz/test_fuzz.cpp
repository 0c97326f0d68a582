// A deterministic mutation fuzzer over every file keel reads (issue 20). Each
// format starts from valid files written by keel's own writers; each mutant
// (bit flips, overwritten bytes, truncation, splices, deleted and repeated
// ranges, inserted tokens: huge and negative numbers, deep nesting, invalid
// UTF-8, YAML and JSON punctuation) must end in success or in keel's own
// error (keel::Error: exit 2 with the file named), never in a crash, a hang,
// another exception type or an out-of-bounds read. Seeds are fixed, so a
// failure reproduces; the counts are printed for the README.
//
// KEEL_FUZZ_FRACTION (0 < f <= 1, default 1) runs the first f of each count:
// CTest runs a tenth (tests/CMakeLists.txt), because the test command runs
// every mutant again under ASan and UBSan (scripts/build/sanitize.sh), which finds
// everything the uninstrumented run would and more.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_store.h"
#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "config/config.h"
#include "eval/task_files.h"
#include "data/corpus_reader.h"
#include "data/manifest.h"
#include "data/shard.h"
#include "data/sources.h"
#include "data/bpe_tokenizer.h"
#include "data/tokenizer.h"
#include "data/tokenizer_train.h"
#include "interop/hf_config.h"
#include "interop/hf_tokenizer.h"
#include "model/init.h"
#include "sweep/sweep_spec.h"
#include "data/test_data_util.h"
#ifdef KEEL_WITH_PARQUET
#include "data/parquet_writer.h"
#endif
#include "test_util.h"
#include "optim/optimizer.h"
#include "train/train_state.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

using namespace keel;

namespace {

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  std::string operator()(const std::vector<std::string>& seeds) {
    std::string s = seeds[pick(seeds.size())];
    for (size_t n = 1 + pick(3); n > 0; --n) s = mutate_once(s, seeds);
    return s;
  }

 private:
  size_t pick(size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng_() % n); }

  std::string token() {
    static const std::vector<std::string> tokens = {
        "99999999999999999999999", "-1", "-9223372036854775809", "18446744073709551616", "1e308", "1e-400",
        "-0", "nan", "inf", "null", "~", "true", "[]", "{}", "\"\"", "\xff\xfe", "\xc3(", "\xed\xa0\x80",
        "\"", "\\", ":", ": ", "- ", "\n", std::string(1, '\0'), "&a", "*a", "!!binary", "%YAML", "---",
        std::string(300, '['), std::string(300, '{'), "{\"a\":" + std::string(100, '['), "0x7fffffff",
        "4294967296", "65536", "2147483648"};
    return tokens[pick(tokens.size())];
  }

  std::string mutate_once(std::string s, const std::vector<std::string>& seeds) {
    const size_t n = s.size();
    switch (pick(8)) {
      case 0:  // flip a few bits
        for (size_t k = 0, m = 1 + pick(8); k < m && n > 0; ++k) s[pick(n)] ^= static_cast<char>(1u << pick(8));
        return s;
      case 1:  // overwrite bytes with random ones
        for (size_t k = 0, m = 1 + pick(4); k < m && n > 0; ++k) s[pick(n)] = static_cast<char>(rng_());
        return s;
      case 2:  // truncate
        return s.substr(0, pick(n + 1));
      case 3: {  // delete a range
        const size_t at = pick(n + 1), len = pick(std::min<size_t>(64, n - at) + 1);
        return s.erase(at, len);
      }
      case 4: {  // repeat a range
        const size_t at = pick(n + 1), len = pick(std::min<size_t>(64, n - at) + 1);
        return s.insert(at, s.substr(at, len));
      }
      case 5: {  // splice in a piece of another seed
        const std::string& o = seeds[pick(seeds.size())];
        const size_t from = pick(o.size() + 1), len = pick(std::min<size_t>(128, o.size() - from) + 1);
        return s.insert(pick(n + 1), o.substr(from, len));
      }
      case 6:  // insert a token
        return s.insert(pick(n + 1), token());
      default: {  // replace a digit run (a length, an offset, a count) with a token
        size_t at = pick(n + 1);
        while (at < n && !std::isdigit(static_cast<unsigned char>(s[at]))) ++at;
        size_t end = at;
        while (end < n && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
        return s.replace(at, end - at, token());
      }
    }
  }

  std::mt19937_64 rng_;
};

struct Tally {
  int64_t tried = 0, accepted = 0, refused = 0;
  std::vector<std::string> foreign;  // exceptions that are not keel::Error
};

int scaled_count(int count) {
  const char* env = std::getenv("KEEL_FUZZ_FRACTION");
  if (!env || !*env) return count;
  const double f = std::atof(env);
  if (!(f > 0.0 && f <= 1.0)) ADD_FAILURE() << "KEEL_FUZZ_FRACTION=" << env << ": want 0 < f <= 1";
  return std::max(1, static_cast<int>(count * std::clamp(f, 0.0, 1.0)));
}

// Runs `read` on `count` mutants of `seeds` (scaled by KEEL_FUZZ_FRACTION). An accepted input and a
// keel::Error are fine; anything else is recorded (a crash ends the program).
Tally fuzz(const std::string& format, const std::vector<std::string>& seeds, int count, uint64_t seed,
           const std::function<void(const std::string&)>& read) {
  Mutator mutate(seed);
  Tally t;
  for (const auto& s : seeds) read(s);  // the seeds themselves must be accepted
  count = scaled_count(count);
  for (int i = 0; i < count; ++i) {
    const std::string input = mutate(seeds);
    ++t.tried;
    try {
      read(input);
      ++t.accepted;
    } catch (const Error&) {
      ++t.refused;
    } catch (const std::exception& e) {
      if (t.foreign.size() < 5)
        t.foreign.push_back("mutant " + std::to_string(i) + ": " + std::string(e.what()).substr(0, 300) +
                            "\ninput: " + input.substr(0, 1500));
      else
        t.foreign.push_back("");
    }
  }
  std::printf("fuzz %-22s %6lld inputs: %6lld accepted, %6lld refused with keel's error, %zu other\n",
              format.c_str(), static_cast<long long>(t.tried), static_cast<long long>(t.accepted),
              static_cast<long long>(t.refused), t.foreign.size());
  for (const auto& f : t.foreign)
    if (!f.empty()) ADD_FAILURE() << format << ": not a keel error: " << f;
  return t;
}

std::string dir_for(const std::string& tag) { return keel_test::make_temp_dir("fuzz_" + tag); }

ModelConfig tiny_model() {
  ModelConfig m;
  m.vocab_size = 64;
  m.pad_vocab_multiple = 16;
  m.max_seq_len = 8;
  m.d_model = 16;
  m.n_layers = 1;
  m.n_heads = 2;
  m.n_kv_heads = 1;
  m.d_ff = 32;
  return m;
}

}  // namespace

TEST(Fuzz, ConfigYaml) {
  Config c;
  std::vector<std::string> seeds = {config_to_yaml(c), keel_test::read_file(keel_test::source_path("configs/default.yaml")),
                                    "model: {qk_norm: {type: rms, scope: group, groups: 2}, attn_softcap: 50}\n"
                                    "train: {lr: 1e-3, schedule: wsd}\ndata: {sources: [a.txt, b.jsonl]}\n"};
  fuzz("config YAML", seeds, 20000, 1, [](const std::string& text) { config_from_yaml_text(text); });
}

TEST(Fuzz, SweepFile) {
  const std::string dir = dir_for("sweep");
  keel_test::write_file(dir + "/base.yaml", "train: {max_steps: 4, warmup_steps: 1, min_lr: 1e-5}\n");
  std::vector<std::string> seeds = {
      "base: base.yaml\nout_dir: out\nseeds: [1, 2]\nset: {train.eval_every: 3}\nvariants:\n  none: {model.qk_norm.type: "
      "none}\n  rms: {model.qk_norm.type: rms}\ngrid:\n  train.lr: [1e-3, 1e-2]\n",
      "base: base.yaml\ngrid:\n  train.lr: [1e-4, 3e-4, 1e-3]\n  model.d_model: [32, 64]\n"};
  fuzz("sweep file", seeds, 5000, 2, [&](const std::string& text) {
    keel_test::write_file(dir + "/sweep.yaml", text);
    expand_grid(load_sweep_spec(dir + "/sweep.yaml"));
  });
}

TEST(Fuzz, Safetensors) {
  const std::string dir = dir_for("safetensors");
  const std::string path = dir + "/x.safetensors";
  std::vector<std::string> seeds;
  write_safetensors(path, {{"a", torch::randn({3, 4})}, {"b", torch::arange(5)}, {"c", torch::ones({2}, torch::kBool)}},
                    {{"format", "pt"}});
  seeds.push_back(keel_test::read_file(path));
  write_safetensors(path, {{"w", torch::randn({2, 2}).to(torch::kBFloat16)}});
  seeds.push_back(keel_test::read_file(path));
  fuzz("safetensors", seeds, 10000, 3, [&](const std::string& bytes) {
    keel_test::write_file(path, bytes);
    read_safetensors(path);
  });
}

TEST(Fuzz, CheckpointManifest) {
  const std::string dir = dir_for("manifest");
  CheckpointStore store(dir);
  const std::string step = store.save(7, {{"state.json", [](const std::string& p) { write_file_durably(p, "{}"); }},
                                          {"model.safetensors", [](const std::string& p) {
                                             write_safetensors(p, {{"a", torch::zeros({2})}});
                                           }}});
  const std::vector<std::string> seeds = {keel_test::read_file(step + "/" + kManifestName)};
  fuzz("checkpoint manifest", seeds, 10000, 4, [&](const std::string& text) {
    keel_test::write_file(step + "/" + kManifestName, text);
    CheckpointStore::verify(step);
  });
}

TEST(Fuzz, CheckpointStateJson) {
  torch::manual_seed(0);
  Config cfg;
  cfg.model = tiny_model();
  auto model = build_model(cfg.model, 1, torch::kCPU);
  std::vector<NamedParam> params;
  for (auto& item : model->named_parameters(true)) params.push_back({item.key(), item.value()});
  AdamW opt(params, cfg.train);
  const std::string run = dir_for("state");
  TrainState st;
  st.step = 3;
  st.tokens = 96;
  st.extra = {{"best_val_loss", 4.5}, {"device_counters", {1.0, 2.0, 3.0, 0.0, 0.0}}};
  const std::string saved = save_training_checkpoint(run, cfg, model, &opt, st, "");
  std::vector<CheckpointFile> others;
  for (const char* name : {"model.safetensors", "optimizer.safetensors", "rng.safetensors"}) {
    const std::string bytes = keel_test::read_file(saved + "/" + name);
    others.push_back({name, [bytes](const std::string& p) { write_file_durably(p, bytes); }});
  }
  const std::vector<std::string> seeds = {keel_test::read_file(saved + "/state.json")};
  CheckpointStore store(run);
  fuzz("checkpoint state.json", seeds, 1500, 5, [&](const std::string& text) {
    auto files = others;
    files.push_back({"state.json", [text](const std::string& p) { write_file_durably(p, text); }});
    const std::string dir = store.save(9, files);  // a manifest that vouches for the mutant
    load_training_checkpoint(dir, model, &opt, nullptr, 0);
    checkpoint_config(dir);
  });
}

TEST(Fuzz, DataManifest) {
  const std::string dir = dir_for("data_manifest");
  DataManifest m;
  m.fingerprint = std::string(64, 'a');
  m.settings = {{"sources", {"a.txt"}}, {"vocab_size", 320}};
  m.created = "2026-12-01T00:00:00Z";
  m.dtype = "uint16";
  m.tokenizer.vocab_size = 320;
  m.train.tokens = 1000;
  m.val.tokens = 100;
  m.shards.push_back({});
  m.shards.back().file = "train_000000.bin";
  m.shards.back().tokens = 1000;
  m.shards.back().split = "train";
  write_data_manifest(m, dir);
  const std::vector<std::string> seeds = {keel_test::read_file(dir + "/manifest.json")};
  fuzz("data manifest", seeds, 10000, 6, [&](const std::string& text) {
    keel_test::write_file(dir + "/manifest.json", text);
    read_data_manifest(dir);
  });
}

// Compressed corpora (zstd and gzip), read and decoded as keel prepare does.
TEST(Fuzz, CompressedCorpus) {
  const std::string dir = dir_for("corpus");
  std::string jsonl;
  for (const auto& d : keel_test::make_documents(20, 9)) jsonl += nlohmann::json{{"text", d}}.dump() + "\n";
  const std::string text = keel_test::join_documents(keel_test::make_documents(20, 10));
  auto read_all = [&](const std::string& name, const std::string& bytes) {
    keel_test::write_file(dir + "/" + name, bytes);
    const auto files = expand_sources({dir + "/" + name});
    read_records(files[0], 0, "%", [&](Record&& r) {
      decode_record(r, files[0]);
      return true;
    });
  };
  const std::vector<std::string> zstd = {keel_test::zstd_bytes(jsonl), keel_test::zstd_bytes(jsonl, 3)};
  fuzz("corpus .jsonl.zst", zstd, 4000, 11, [&](const std::string& b) { read_all("c.jsonl.zst", b); });
  const std::vector<std::string> ztext = {keel_test::zstd_bytes(text, 2)};
  fuzz("corpus .txt.zst", ztext, 2000, 12, [&](const std::string& b) { read_all("c.txt.zst", b); });
  keel_test::write_gzip(dir + "/seed.jsonl.gz", jsonl);
  const std::vector<std::string> gz = {keel_test::read_file(dir + "/seed.jsonl.gz")};
  fuzz("corpus .jsonl.gz", gz, 2000, 13, [&](const std::string& b) { read_all("c.jsonl.gz", b); });
}

#ifdef KEEL_WITH_PARQUET
// Parquet as FineWeb ships it (zstd pages, several row groups), through the
// same reader `keel prepare` uses. The parsing is Arrow's; the target checks
// that whatever Arrow reports reaches the user as keel's error.
TEST(Fuzz, ParquetCorpus) {
  const std::string dir = dir_for("parquet");
  std::vector<std::optional<std::string>> rows;
  for (int i = 0; i < 40; ++i) rows.push_back("row " + std::to_string(i) + ": " + keel_test::make_sentence_corpus(i, 1));
  keel_test::write_parquet(dir + "/seed.parquet", rows, "text", 8);
  const std::vector<std::string> seeds = {keel_test::read_file(dir + "/seed.parquet")};
  const std::string path = dir + "/x.parquet";
  fuzz("parquet", seeds, 2000, 13, [&](const std::string& bytes) {
    keel_test::write_file(path, bytes);
    auto files = expand_sources({path});
    read_records(files[0], 0, "", [&](Record&& r) {
      decode_record(r, files[0]);
      return true;
    });
  });
}
#endif

TEST(Fuzz, TokenShard) {
  const std::string dir = dir_for("shard");
  const std::string path = dir + "/s.bin";
  std::vector<std::string> seeds;
  for (int64_t vocab : {320, 70000}) {
    ShardWriter w(path, vocab);
    std::vector<int32_t> ids;
    for (int i = 0; i < 200; ++i) ids.push_back(static_cast<int32_t>((i * 37) % vocab));
    w.append(ids.data(), ids.size());
    w.close();
    seeds.push_back(keel_test::read_file(path));
  }
  fuzz("token shard", seeds, 10000, 7, [&](const std::string& bytes) {
    keel_test::write_file(path, bytes);
    ShardReader r(path);
    r.verify();
  });
}

TEST(Fuzz, TokenizerModel) {
  TokenizerSample sample;
  std::istringstream corpus(keel_test::make_sentence_corpus(3, 150));
  for (std::string line; std::getline(corpus, line);)
    if (!line.empty() && line != "%") sample.sentences.push_back(line);
  TokenizerTrainOptions o;
  o.vocab_size = 300;
  const std::vector<std::string> seeds = {train_tokenizer(sample, o, "fuzz corpus")};
  fuzz("tokenizer.model", seeds, 5000, 8, [&](const std::string& proto) {
    Tokenizer t = Tokenizer::from_serialized(proto, "tokenizer.model");
    t.encode("a fuzzed sentence, with \xc3\xa9 and digits 12345");
    parse_spm_model(proto, "tokenizer.model");
  });
}

// Hugging Face tokenizer.json (byte-level BPE): a GPT-2-style and a
// Llama 3 / Qwen-style file (NFC, Split with a regex, ignore_merges); loaded
// and used to encode, as `keel prepare` does with data.tokenizer.
TEST(Fuzz, TokenizerJson) {
  auto make = [](bool llama) {
    nlohmann::json vocab = nlohmann::json::object();
    const auto& alphabet = byte_level_alphabet();
    for (int b = 0; b < 256; ++b) vocab[alphabet[b]] = b;
    nlohmann::json merges = nlohmann::json::array();
    int next = 256;
    for (auto [a, b] : std::vector<std::pair<std::string, std::string>>{{"t", "h"}, {"th", "e"}, {"Ġ", "the"}, {"a", "n"}}) {
      vocab[a + b] = next++;
      merges.push_back(llama ? nlohmann::json::array({a, b}) : nlohmann::json(a + " " + b));
    }
    nlohmann::json pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
    if (llama)
      pre = {{"type", "Sequence"},
             {"pretokenizers",
              {{{"type", "Split"},
                {"pattern", {{"Regex", R"((?i:'s|'t)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
                {"behavior", "Isolated"},
                {"invert", false}},
               {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    return nlohmann::json{
        {"added_tokens", {{{"id", next}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}}}},
        {"normalizer", llama ? nlohmann::json{{"type", "NFC"}} : nlohmann::json()},
        {"pre_tokenizer", pre},
        {"model", {{"type", "BPE"}, {"ignore_merges", llama}, {"vocab", vocab}, {"merges", merges}}}}
        .dump(llama ? 1 : -1);
  };
  const std::vector<std::string> seeds = {make(false), make(true)};
  fuzz("tokenizer.json", seeds, 3000, 12, [&](const std::string& text) {
    Tokenizer t = Tokenizer::from_serialized(text, "tokenizer.json");
    auto ids = t.encode("the fuzzed  sentence's \xc3\xa9 and 12345 <|endoftext|>\n\n then");
    t.decode(ids);
  });
}

// Downstream task files (eval.tasks), each kind from a seed in its published format.
TEST(Fuzz, TaskFiles) {
  const std::string dir = dir_for("tasks");
  const std::vector<std::pair<std::string, std::string>> kinds = {
      {"hellaswag", R"({"activity_label": "Cooking", "ctx_a": "A man cuts.", "ctx_b": "then he", "endings": ["stirs [title] it.", "sleeps.", "a", "b"], "label": "1"})"},
      {"arc", R"({"question": {"stem": "Which?", "choices": [{"text": "a", "label": "A"}, {"text": "b", "label": "B"}]}, "answerKey": "B"})"
              "\n"
              R"({"question": "Which?", "choices": {"text": ["a", "b"], "label": ["1", "2"]}, "answerKey": "1"})"},
      {"piqa", R"({"goal": "Open it", "sol1": "twist", "sol2": "eat", "label": 0})"},
      {"winogrande", R"({"sentence": "Anna helped Beth because _ was kind.", "option1": "Anna", "option2": "Beth", "answer": "1"})"},
      {"lambada", R"({"text": "and then she closed the door"})"},
      {"jsonl", R"({"context": "The cat", "choices": [" sat.", " flew."], "label": 0})"}};
  uint64_t seed = 20;
  for (const auto& [kind, line] : kinds) {
    const std::string k = kind;
    fuzz("task file " + k, {line + "\n" + line + "\n"}, 1500, seed++, [&](const std::string& text) {
      keel_test::write_file(dir + "/" + k + ".jsonl", text);
      read_task_file({k, k, dir + "/" + k + ".jsonl"}, 0);
    });
  }
}

TEST(Fuzz, HfConfigJson) {
  std::vector<std::string> seeds;
  ModelConfig m = tiny_model();
  seeds.push_back(hf_config_json(m, HfFamily::llama, HfTokenIds{1, 2, 0}, "float32").dump());
  m.norm_placement = NormPlacement::sandwich;
  m.embed_norm = EmbedNorm::scale_sqrt_d;
  m.norm_unit_offset = true;
  m.mlp = MlpKind::geglu_tanh;
  seeds.push_back(hf_config_json(m, HfFamily::gemma2, HfTokenIds{2, 1, 0}, "bfloat16").dump());
  m.qk_norm.type = NormKind::rms;  // sandwich + per-head QK-Norm: Gemma 3, with its layer types
  seeds.push_back(hf_config_json(m, HfFamily::gemma3, HfTokenIds{2, 1, 0}, "bfloat16").dump());
  ModelConfig q = tiny_model();
  q.qk_norm.type = NormKind::rms;
  seeds.push_back(hf_config_json(q, HfFamily::qwen3, HfTokenIds{-1, 2, -1}, "float32").dump());
  fuzz("HF config.json", seeds, 20000, 9, [](const std::string& text) {
    model_config_from_hf(parse_json_bounded(text, "config.json"));
  });
}
