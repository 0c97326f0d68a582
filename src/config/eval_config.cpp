// eval.* keys: downstream tasks and more held-out sets.
#include "config/eval_config.h"

#include <cctype>
#include <set>

#include "config/config.h"

namespace keel {

void declare_eval_keys(Schema& s, EvalConfig& e) {
  s.text_list("eval.tasks", &e.tasks,
              "downstream tasks scored as lm-evaluation-harness does, each \"[name=]kind:path\" (kind: hellaswag, "
              "arc, piqa, winogrande, lambada, jsonl) or \"builtin\" (from the validation split); docs/evaluation.md");
  s.integer("eval.every", &e.every, "steps between task evaluations (and at the end); 0 = train.eval_every").min = 0;
  s.integer("eval.limit", &e.limit, "score only the first N examples of each task; 0 = all").min = 0;
  auto& b = s.integer("eval.batch_size", &e.batch_size, "requests (a context and one choice) per forward");
  b.min = 1;
  b.max = 4096;
  auto& n = s.integer("eval.builtin_examples", &e.builtin_examples,
                      "examples of the builtin task (each: which of four passages follows a context)");
  n.min = 1;
  n.max = 100000;
  s.text_list("eval.sets", &e.sets,
              "more held-out data, each a prepared data directory (keel prepare, the same tokenizer; its validation "
              "split, or all of it without one) or sources as data.sources takes them (prepared under "
              "data.dir/eval_sets/ with data.dir's tokenizer, held out whole); each scored like the validation "
              "split and logged as sets/<base name>/loss and ppl");
}

const std::vector<std::string>& task_kinds() {
  static const std::vector<std::string> kinds = {"builtin", "hellaswag", "arc", "piqa", "winogrande", "lambada",
                                                 "jsonl"};
  return kinds;
}

static bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

bool parse_task_spec(const std::string& entry, TaskSpec* out, std::string* why) {
  TaskSpec t;
  std::string rest = entry;
  // name=kind:path; a '=' after the first ':' belongs to the path.
  const size_t eq = rest.find('='), colon = rest.find(':');
  if (eq != std::string::npos && (colon == std::string::npos || eq < colon)) {
    t.name = rest.substr(0, eq);
    rest = rest.substr(eq + 1);
    if (!valid_name(t.name)) {
      *why = "\"" + t.name + "\" is not a task name (letters, digits, _ - . only, at most 64)";
      return false;
    }
  }
  const size_t c = rest.find(':');
  t.kind = rest.substr(0, c);
  if (c != std::string::npos) t.path = rest.substr(c + 1);
  bool known = false;
  for (const auto& k : task_kinds()) known = known || k == t.kind;
  if (!known) {
    *why = "\"" + entry + "\": unknown task kind \"" + t.kind +
           "\" (expected builtin, or hellaswag:, arc:, piqa:, winogrande:, lambada: or jsonl: and a file)";
    return false;
  }
  if (t.kind == "builtin" && !t.path.empty()) {
    *why = "\"" + entry + "\": the builtin task takes no file";
    return false;
  }
  if (t.kind != "builtin" && t.path.empty()) {
    *why = "\"" + entry + "\": " + t.kind + " needs a file, as \"" + t.kind + ":path/to/file.jsonl\"";
    return false;
  }
  if (t.name.empty()) t.name = t.kind;
  *out = t;
  return true;
}

std::vector<TaskSpec> task_specs(const Config& cfg) {
  std::vector<TaskSpec> out;
  for (const auto& entry : cfg.eval.tasks) {
    TaskSpec t;
    std::string why;
    if (parse_task_spec(entry, &t, &why)) out.push_back(t);
  }
  return out;
}

int64_t task_eval_every(const Config& cfg) { return cfg.eval.every > 0 ? cfg.eval.every : cfg.train.eval_every; }

void check_eval(const Config& c, ConfigErrors& e) {
  std::set<std::string> names;
  for (size_t i = 0; i < c.eval.tasks.size(); ++i) {
    const std::string key = "eval.tasks[" + std::to_string(i) + "]";
    TaskSpec t;
    std::string why;
    if (!parse_task_spec(c.eval.tasks[i], &t, &why)) {
      e.add(key, why);
      continue;
    }
    if (!names.insert(t.name).second)
      e.add(key, "a second task named \"" + t.name + "\": name one of them, as \"" + t.name + "2=" +
                     c.eval.tasks[i] + "\"");
  }
  std::set<std::string> sets;
  for (size_t i = 0; i < c.eval.sets.size(); ++i) {
    const std::string& dir = c.eval.sets[i];
    if (dir.empty()) e.add("eval.sets[" + std::to_string(i) + "]", "is an empty path");
    else if (!sets.insert(dir).second) e.add("eval.sets[" + std::to_string(i) + "]", "\"" + dir + "\" is listed twice");
  }
}

}  // namespace keel
