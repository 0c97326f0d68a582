#include "config/data_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "config/config.h"

namespace keel {

void declare_data_keys(Schema& s, DataConfig& d) {
  s.text("data.dir", &d.dir, "directory of prepared token shards, manifest and tokenizer");
  s.text_list("data.sources", &d.sources,
              "text files, directories (recursive) or .jsonl files with a \"text\" field; any may be .gz or .zst "
              "(.json.gz / .json.zst are JSON Lines); entries {path: P, weight: W} make a mixture: each source "
              "gives a W/sum(W) share of the training sequences, upsampled or capped to it")
      .weights = &d.source_weights;
  s.text("data.tokenizer", &d.tokenizer,
         "existing tokenizer to reuse: a SentencePiece .model or a Hugging Face byte-level BPE tokenizer.json "
         "(GPT-2, Llama 3, Qwen 2/3, OLMo 2); empty = train one");
  s.choice("data.tokenizer_type", &d.tokenizer_type, {}, "SentencePiece model type to train");
  auto& mb = s.integer("data.tokenizer_sample_mb", &d.tokenizer_sample_mb, "MB of text sampled to train the tokenizer");
  mb.min = 1;
  mb.max = 4096;
  s.text("data.text_field", &d.text_field,
         "JSON Lines sources: the string field holding each document (\"text\" in FineWeb, Dolma, DCLM)");
  s.text("data.doc_separator", &d.doc_separator,
         "text files: a line equal to this ends a document; empty = one document per file");
  auto& v = s.real("data.val_fraction", &d.val_fraction, "fraction of documents held out for validation (by text hash)");
  v.min = 0;
  v.max = 0.5;
  auto& st = s.integer("data.shard_tokens", &d.shard_tokens, "tokens per shard file");
  st.min = 1024;
  st.max = 1e9;  // 2 GB of uint16 per file
  auto& th = s.integer("data.threads", &d.threads, "threads encoding the corpus; 0 = all cores");
  th.min = 0;
  th.max = 1024;
  auto& p = s.integer("data.prefetch", &d.prefetch, "batches prepared ahead on a background thread (0 = off)");
  p.min = 0;
  p.max = 64;
  s.boolean("data.verify", &d.verify, "check every shard's checksum and token ids when training opens it");
  s.text_list("data.skip_batches", &d.skip_batches,
              "training batches to skip, each \"AFTER:COUNT\": after step AFTER the data order moves on by COUNT "
              "batches; what monitor.on_spike: rewind records (summary.json \"data_skips\"), to replay such a run "
              "from the start");
  s.boolean("data.document_mask", &d.document_mask,
            "each token attends only to earlier tokens of its own document; an EOS opens the document after it, "
            "as a BOS would (data/README.md#document-masking)");
  s.choice("data.reset_positions", &d.reset_positions, {},
           "RoPE positions restart at each document's EOS; auto = on with data.document_mask (needs the mask)");
  s.choice("data.align", &d.align, {},
           "where training windows start: none = a fixed grid, eos = at a document's opening EOS, bos = at its "
           "first token; a document longer than a window continues in the next one");
}

std::vector<std::pair<std::string, double>> data_mixture(const DataConfig& d) {
  std::vector<std::pair<std::string, double>> out;
  if (d.source_weights.size() != d.sources.size()) return out;
  for (size_t i = 0; i < d.sources.size(); ++i) out.emplace_back(d.sources[i], d.source_weights[i]);
  return out;
}

std::vector<SkipRange> parse_skip_batches(const std::vector<std::string>& entries, ConfigErrors* errors) {
  std::vector<SkipRange> out;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string& s = entries[i];
    const size_t colon = s.find(':');
    SkipRange r;
    bool ok = colon != std::string::npos && colon > 0 && colon + 1 < s.size() && s.size() <= 40;
    if (ok) {
      try {
        size_t used_a = 0, used_b = 0;
        r.after_step = std::stoll(s.substr(0, colon), &used_a);
        r.batches = std::stoll(s.substr(colon + 1), &used_b);
        ok = used_a == colon && used_b == s.size() - colon - 1 && r.after_step >= 0 && r.batches >= 1;
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (ok) out.push_back(r);
    else if (errors)
      errors->add("data.skip_batches", "entry " + std::to_string(i) + " '" + s.substr(0, 40) +
                                           "' is not AFTER:COUNT with AFTER >= 0 and COUNT >= 1");
  }
  return out;
}

namespace {

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A mixture's weights as Mixture (data/mixture.h) will take them, so that
// `keel validate` refuses what `keel train` would: each at most
// kMaxMixtureWeight (their sum stays finite), each share at least
// kMinMixtureShare.
void check_source_weights(const DataConfig& d, ConfigErrors& e) {
  if (d.source_weights.empty() || d.source_weights.size() != d.sources.size()) return;
  auto key = [](size_t i) { return "data.sources[" + std::to_string(i) + "].weight"; };
  double total = 0;
  bool bounded = true;
  for (size_t i = 0; i < d.source_weights.size(); ++i) {
    const double w = d.source_weights[i];
    if (!(w > 0) || !std::isfinite(w) || w > kMaxMixtureWeight) {
      e.add(key(i), number_text(w) + " is not a number in (0, " + number_text(kMaxMixtureWeight) +
                        "]; weights are relative (3 and 1 give 75% and 25%), so scale them all down");
      bounded = false;
      continue;
    }
    total += w;
  }
  if (!bounded) return;
  for (size_t i = 0; i < d.source_weights.size(); ++i) {
    const double share = d.source_weights[i] / total;
    if (share < kMinMixtureShare)
      e.add(key(i), number_text(d.source_weights[i]) + " is a share of " + number_text(share) +
                        " of the mixture, below the smallest keel mixes (" + number_text(kMinMixtureShare) +
                        "); raise it or drop the source");
  }
}

}  // namespace

void check_data(const Config& c, ConfigErrors& e) {
  const auto& d = c.data;
  if (d.dir.empty()) e.add("data.dir", "must not be empty");
  // An entry refused while it was read (a weight of 0, a missing path)
  // leaves the list short or empty: that is the one error, not a second.
  const bool entry_refused = std::any_of(e.items.begin(), e.items.end(),
                                         [](const std::string& item) { return item.rfind("data.sources", 0) == 0; });
  if (d.sources.empty() && !entry_refused) e.add("data.sources", "must list at least one file or directory");
  check_source_weights(d, e);
  for (const auto& s : d.sources)
    if (s.empty()) e.add("data.sources", "contains an empty path");
  if (d.doc_separator.find('\n') != std::string::npos || d.doc_separator.find('\r') != std::string::npos)
    e.add("data.doc_separator", "is compared with whole lines, so it cannot contain a line break");
  if (d.text_field.empty()) e.add("data.text_field", "must name a field");
  parse_skip_batches(d.skip_batches, &e);
  if (d.reset_positions == PositionReset::on && !d.document_mask)
    e.add("data.reset_positions", "restarts positions at document boundaries the attention still crosses; "
                                  "set data.document_mask: true with it, or leave it at auto");
  if (d.align != WindowAlign::none && !d.source_weights.empty())
    e.add("data.align", "does not combine with a weighted mixture of data.sources, which draws its own windows");
  if (d.document_mask && c.train.cuda_graph)
    e.add("data.document_mask", "reads each batch's documents on the host, which a captured CUDA graph cannot; "
                                "set train.cuda_graph: false");
}

}  // namespace keel
