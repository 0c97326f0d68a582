// eval.tasks entries: "[name=]kind:path" or "builtin" (docs/evaluation.md).
#pragma once

#include <string>
#include <vector>

namespace keel {

struct Config;

// One entry of eval.tasks, parsed. `name` labels its metrics (eval/<name>/acc):
// the kind unless the entry names it.
struct TaskSpec {
  std::string name;
  std::string kind;  // builtin | hellaswag | arc | piqa | winogrande | lambada | jsonl
  std::string path;  // empty for builtin
};

// The task kinds keel reads, in the formats their publishers release.
const std::vector<std::string>& task_kinds();

// Parses one entry; on a malformed one returns false and sets `why`.
bool parse_task_spec(const std::string& entry, TaskSpec* out, std::string* why);

// Every entry of cfg.eval.tasks, parsed (validate() has checked them).
std::vector<TaskSpec> task_specs(const Config& cfg);

// The steps between task evaluations: eval.every, or train.eval_every when 0.
int64_t task_eval_every(const Config& cfg);

}  // namespace keel
