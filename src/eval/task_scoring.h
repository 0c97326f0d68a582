// lm-evaluation-harness's metrics from the per-request log-likelihoods
// (lm_eval/api/task.py, process_results and the mean/stderr aggregations):
// acc = argmax of the summed log-likelihoods is the gold choice; acc_norm the
// same after dividing by each choice's length in characters, acc_bytes in
// UTF-8 bytes; ties go to the first choice, as numpy's argmax; the standard
// error of a mean of n 0/1 scores is sqrt(p (1 - p) / (n - 1)). LAMBADA:
// acc = the continuation is the greedy one, perplexity = exp(-mean ll).
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "eval/task_files.h"

namespace keel {

// One request's result: the continuation's summed log-probability, and
// whether every continuation token is the model's argmax.
struct RequestScore {
  double ll = 0;
  bool greedy = false;
};

struct TaskResult {
  std::string name;
  int64_t examples = 0;
  std::vector<int64_t> predictions;  // per example: the choice acc picked (last_word: 1 when greedy)
  nlohmann::json metrics;            // {"acc":, "acc_stderr":, ...}: what this kind reports
};

// `scores` holds every request of `task`, example by example, choice by choice.
TaskResult score_task(const EvalTask& task, const std::vector<RequestScore>& scores);

// The standard error of the mean of 0/1 (or any) scores, lm-eval's
// mean_stderr: sample standard deviation / sqrt(n); NaN below 2 scores.
double mean_stderr(const std::vector<double>& x);

}  // namespace keel
