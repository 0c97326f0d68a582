// The builtin task: multiple choice made from the validation split, so that
// every run can show a downstream metric before any benchmark is downloaded.
// Each example is a context of up to 32 words from a held-out document and
// four continuations of 6 words: the words that truly follow, and three
// 6-word passages from other held-out documents. Chance is 1/4. The
// examples depend only on the documents (a fixed seed, not run.seed), so
// every run on the same data scores the same questions.
#pragma once

#include <string>
#include <vector>

#include "data/manifest.h"
#include "data/tokenizer.h"
#include "eval/task_files.h"

namespace keel {

constexpr int64_t kBuiltinContextWords = 32;
constexpr int64_t kBuiltinMinContextWords = 8;
constexpr int64_t kBuiltinChoiceWords = 6;
constexpr int64_t kBuiltinChoices = 4;

// `examples` examples (fewer when the documents hold fewer places to ask);
// throws TaskFileError when they are too short for even one.
EvalTask builtin_task(const std::vector<std::string>& documents, int64_t examples);

// The validation split's documents as text (split at EOS), at most the first
// `max_tokens` tokens of it.
std::vector<std::string> validation_documents(const std::string& dir, const DataManifest& manifest,
                                              const Tokenizer& tok, int64_t max_tokens);

// A task in the generic JSONL format ({"context", "choices", "label"} a line),
// which `jsonl:` reads back and lm-eval's multiple_choice configs can score.
std::string task_to_jsonl(const EvalTask& task);

}  // namespace keel
