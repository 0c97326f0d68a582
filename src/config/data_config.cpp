#include "config/data_config.h"

#include "config/config.h"

namespace keel {

void declare_data_keys(Schema& s, DataConfig& d) {
  s.text("data.dir", &d.dir, "directory of prepared token shards, manifest and tokenizer");
  s.text_list("data.sources", &d.sources, "text files, directories or .jsonl(.gz) for `keel prepare`");
  s.text("data.tokenizer", &d.tokenizer, "existing SentencePiece .model to reuse; empty = train one");
  s.choice("data.tokenizer_type", &d.tokenizer_type, {"bpe", "unigram"}, "SentencePiece model type");
  s.text("data.doc_separator", &d.doc_separator, "text files: a line equal to this separates documents");
  auto& v = s.real("data.val_fraction", &d.val_fraction, "fraction of documents held out (by hash)");
  v.min = 0;
  v.max = 0.5;
  s.integer("data.tokenizer_sample_mb", &d.tokenizer_sample_mb, "MB of text sampled to train the tokenizer")
      .min = 1;
  s.integer("data.shard_tokens", &d.shard_tokens, "tokens per shard file").min = 1024;
  s.integer("data.prefetch", &d.prefetch, "batches prepared ahead on a background thread").min = 0;
}

void check_data(const Config& c, ConfigErrors& e) {
  if (c.data.dir.empty()) e.add("data.dir", "must not be empty");
}

}  // namespace keel
