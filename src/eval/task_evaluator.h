// Downstream tasks during training: every task of eval.tasks, read and
// tokenized once when the run starts (a bad file stops it before the first
// step), then scored through the model's own forward in batches of
// eval.batch_size requests. Batches are made once, longest first, and dealt
// to the data-parallel ranks in turn; each request's score is summed into a
// vector all ranks reduce, so every rank gets the same numbers as one rank
// would, whatever the world size.
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "config/config.h"
#include "data/manifest.h"
#include "distributed/process_group.h"
#include "eval/task_files.h"
#include "eval/task_requests.h"
#include "eval/task_scoring.h"
#include "model/transformer.h"
#include "model/autocast.h"

namespace keel {

// The builtin task reads at most this many validation tokens.
constexpr int64_t kBuiltinMaxTokens = 4'000'000;

// Every task of cfg.eval.tasks, read (the builtin one from the validation
// split of data_dir); throws ConfigError naming eval.tasks[i] and what is wrong.
std::vector<EvalTask> load_eval_tasks(const Config& cfg, const DataManifest& data, const Tokenizer& tok);

// Where the model computes: its device and whether under bf16 autocast.
struct EvalDevice {
  torch::Device device = torch::kCPU;
  bool bf16_autocast = false;
};

class TaskEvaluator {
 public:
  // Throws ConfigError naming the eval.tasks entry whose request cannot be scored.
  TaskEvaluator(std::vector<EvalTask> tasks, const Tokenizer& tok, int64_t max_len, int64_t batch_size, Dist* dist,
                EvalDevice compute);
  bool enabled() const { return !tasks_.empty(); }
  const std::vector<EvalTask>& tasks() const { return tasks_; }

  // Scores every task; the same on every rank. Keeps the results for last().
  std::vector<TaskResult> evaluate(Transformer& model);
  // Scores every task and returns {name: metrics} without keeping anything
  // (last(), the examples): other weights than the run's, such as its EMA.
  nlohmann::json evaluate_apart(Transformer& model);
  // The latest results, {name: metrics}; null before the first evaluation.
  const nlohmann::json& last() const { return last_; }
  // Per example of the latest evaluation: {"example", "gold", "pred", "ll": [...], "greedy": [...]}.
  std::string examples_jsonl(size_t task) const;

  void save_state(nlohmann::json& extra) const;
  void load_state(const nlohmann::json& extra);

 private:
  struct Request {
    TokenizedRequest tokens;
    size_t task;
  };
  std::vector<EvalTask> tasks_;
  std::vector<Request> requests_;            // every task's, in task, example, choice order
  std::vector<size_t> task_begin_;           // the first request of each task
  std::vector<std::vector<size_t>> batches_; // request indices, longest first
  Dist* dist_;                               // null: one process
  EvalDevice compute_;
  std::vector<RequestScore> scores_;         // of the latest evaluation
  std::vector<TaskResult> results_;
  nlohmann::json last_;
};

}  // namespace keel
