#include "eval/builtin_task.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "data/token_stream.h"
#include "util/hashing.h"

namespace keel {

namespace {

struct Span {
  size_t begin, end;  // byte offsets of one word
};

std::vector<Span> words_of(const std::string& text) {
  std::vector<Span> out;
  size_t i = 0;
  auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; };
  while (i < text.size()) {
    while (i < text.size() && space(text[i])) ++i;
    if (i >= text.size()) break;
    const size_t b = i;
    while (i < text.size() && !space(text[i])) ++i;
    out.push_back({b, i});
  }
  return out;
}

struct Place {
  size_t doc;
  int64_t word;  // the first word of the continuation
};

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_ += 0x9E3779B97F4A7C15ull); }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }

 private:
  uint64_t state_;
};

}  // namespace

EvalTask builtin_task(const std::vector<std::string>& documents, int64_t examples) {
  EvalTask task;
  task.spec = {"builtin", "builtin", ""};
  std::vector<std::vector<Span>> words;
  std::vector<Place> places;  // every place with enough context before and a continuation after
  for (size_t d = 0; d < documents.size(); ++d) {
    words.push_back(words_of(documents[d]));
    const int64_t n = static_cast<int64_t>(words.back().size());
    for (int64_t p = kBuiltinMinContextWords; p + kBuiltinChoiceWords <= n; ++p) places.push_back({d, p});
  }
  if (places.size() < static_cast<size_t>(kBuiltinChoices))
    throw TaskFileError("the builtin task: the validation split holds too little text (documents of at least " +
                        std::to_string(kBuiltinMinContextWords + kBuiltinChoiceWords) + " words are needed)");
  auto text = [&](size_t d, int64_t first, int64_t count) {
    const auto& w = words[d];
    return documents[d].substr(w[static_cast<size_t>(first)].begin,
                               w[static_cast<size_t>(first + count - 1)].end - w[static_cast<size_t>(first)].begin);
  };
  Rng rng(0x6b65656c5f657661ull);  // "keel_eva": fixed, so every run asks the same questions
  std::set<size_t> asked;
  const size_t want = std::min(static_cast<size_t>(examples), places.size());
  for (size_t tries = 0; task.docs.size() < want && tries < 20 * want; ++tries) {
    const size_t k = rng.below(places.size());
    if (!asked.insert(k).second) continue;
    const Place at = places[k];
    const int64_t from = std::max<int64_t>(0, at.word - kBuiltinContextWords);
    const std::string context = text(at.doc, from, at.word - from);
    const std::string truth = text(at.doc, at.word, kBuiltinChoiceWords);
    std::vector<std::string> others;
    for (size_t draws = 0; others.size() + 1 < static_cast<size_t>(kBuiltinChoices) && draws < 200; ++draws) {
      const Place o = places[rng.below(places.size())];
      // Another document where there is one; else far enough away in this one.
      if (documents.size() > 1 && o.doc == at.doc) continue;
      if (o.doc == at.doc && std::llabs(o.word - at.word) < kBuiltinContextWords + kBuiltinChoiceWords) continue;
      const std::string t = text(o.doc, o.word, kBuiltinChoiceWords);
      if (t == truth || std::find(others.begin(), others.end(), t) != others.end()) continue;
      others.push_back(t);
    }
    if (others.size() + 1 < static_cast<size_t>(kBuiltinChoices)) continue;
    const int64_t gold = static_cast<int64_t>(rng.below(kBuiltinChoices));
    others.insert(others.begin() + gold, truth);
    EvalDoc d;
    for (const auto& c : others) d.requests.push_back({context, " " + c});
    d.choices = std::move(others);
    d.gold = gold;
    d.line = static_cast<int64_t>(task.docs.size()) + 1;
    task.docs.push_back(std::move(d));
  }
  if (task.docs.empty())
    throw TaskFileError("the builtin task: no example could be made from the validation split (too few distinct "
                        "passages)");
  return task;
}

std::vector<std::string> validation_documents(const std::string& dir, const DataManifest& manifest,
                                              const Tokenizer& tok, int64_t max_tokens) {
  TokenStream val(dir, manifest, "val", false);
  const int64_t n = std::min(val.size(), max_tokens);
  std::vector<int64_t> ids(static_cast<size_t>(n));
  if (n > 0) val.read(0, n, ids.data());
  std::vector<std::string> docs;
  std::vector<int64_t> doc;
  const int64_t eos = tok.eos_id();
  for (int64_t i = 0; i <= n; ++i) {
    if (i == n || ids[static_cast<size_t>(i)] == eos) {
      // A document cut by max_tokens is left out: its last word may be cut too.
      if (!doc.empty() && (i < n || n == val.size())) docs.push_back(tok.decode(doc));
      doc.clear();
    } else {
      doc.push_back(ids[static_cast<size_t>(i)]);
    }
  }
  return docs;
}

std::string task_to_jsonl(const EvalTask& task) {
  std::string out;
  for (const EvalDoc& d : task.docs) {
    const nlohmann::json j = {{"context", d.requests.empty() ? "" : d.requests[0].context},
                              {"choices", d.choices},
                              {"label", d.gold}};
    out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  return out;
}

}  // namespace keel
