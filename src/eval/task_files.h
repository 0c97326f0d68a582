// Downstream tasks read from the files their publishers release, turned into
// lm-evaluation-harness's requests: for each example, one (context,
// continuation) pair per choice, scored by the continuation's log-likelihood
// (docs/evaluation.md). The text each pair holds is what lm-eval 0.4's task
// configs build (hellaswag.yaml and its utils.py, arc_easy.yaml, piqa.yaml,
// winogrande's preprocess_winogrande.py, lambada_openai.yaml), so the same
// file scores the same in both.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/eval_config.h"
#include "util/error.h"

namespace keel {

// A task file keel cannot use: "<file>:<line>: what is wrong".
class TaskFileError : public Error {
 public:
  explicit TaskFileError(const std::string& message) : Error(message, "task file error") {}
};

struct EvalRequest {
  std::string context;
  std::string continuation;  // starts with the target delimiter (" ") where the task has one
};

struct EvalDoc {
  std::vector<EvalRequest> requests;  // one per choice; one for lambada
  std::vector<std::string> choices;   // lm-eval's doc_to_choice: acc_norm divides by their lengths
  int64_t gold = 0;                   // index of the right choice
  int64_t line = 0;                   // 1-based line of its file (builtin: example number)
};

enum class TaskScoring {
  multiple_choice,   // acc and acc_norm (HellaSwag, ARC, PIQA, jsonl, builtin)
  partial,           // acc only: the choices are contexts, one continuation (Winogrande)
  last_word,         // acc = greedy match of the continuation, and perplexity (LAMBADA)
};

struct EvalTask {
  TaskSpec spec;
  TaskScoring scoring = TaskScoring::multiple_choice;
  std::vector<EvalDoc> docs;
};

// Bounds on what a task file may hold: a hostile file ends in an error, not
// an exhausted machine.
constexpr uint64_t kMaxTaskFileBytes = uint64_t{512} << 20;
constexpr size_t kMaxTaskChoices = 64;
constexpr int kMaxTaskJsonDepth = 16;

// Reads spec.path (every kind but builtin), at most `limit` examples (0 = all),
// in the file's order. Throws TaskFileError naming the file and line.
EvalTask read_task_file(const TaskSpec& spec, int64_t limit);

// Python's str methods where lm-eval's tasks use them, on UTF-8: isspace
// (bidirectional class WS, B or S, or category Zs), strip / rstrip, and
// capitalize (first character title case, the rest lower case; utf8proc's
// simple case mappings, so 'ß' stays one character where Python writes "Ss").
bool python_isspace(char32_t c);
std::string python_strip(std::string_view s);
std::string python_rstrip(std::string_view s);
std::string python_capitalize(std::string_view s);
// Length in characters (code points), as Python's len(): acc_norm's divisor.
int64_t utf8_length(std::string_view s);
// lm-eval's HellaSwag preprocess(): strip, " [title]" -> ". ", drop
// "[...]" (no newline inside), "  " -> " ".
std::string hellaswag_preprocess(std::string_view text);

}  // namespace keel
