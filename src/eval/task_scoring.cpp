#include "eval/task_scoring.h"

#include <cmath>

#include "util/error.h"

namespace keel {

double mean_stderr(const std::vector<double>& x) {
  const size_t n = x.size();
  if (n < 2) return NAN;
  double mean = 0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(n);
  double ss = 0;
  for (double v : x) ss += (v - mean) * (v - mean);
  return std::sqrt(ss / static_cast<double>(n - 1)) / std::sqrt(static_cast<double>(n));
}

namespace {

double mean_of(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v;
  return x.empty() ? NAN : s / static_cast<double>(x.size());
}

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

// numpy's argmax: the first of equal maxima.
int64_t argmax(const std::vector<double>& v) {
  int64_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[static_cast<size_t>(best)]) best = static_cast<int64_t>(i);
  return best;
}

}  // namespace

TaskResult score_task(const EvalTask& task, const std::vector<RequestScore>& scores) {
  TaskResult r;
  r.name = task.spec.name;
  r.examples = static_cast<int64_t>(task.docs.size());
  std::vector<double> acc, acc_norm, acc_bytes, lls;
  size_t at = 0;
  for (const EvalDoc& d : task.docs) {
    if (at + d.requests.size() > scores.size()) throw Error("score_task: fewer scores than requests", "internal error");
    if (task.scoring == TaskScoring::last_word) {
      const RequestScore& s = scores[at++];
      acc.push_back(s.greedy ? 1.0 : 0.0);
      lls.push_back(s.ll);
      r.predictions.push_back(s.greedy);
      continue;
    }
    std::vector<double> ll, by_chars, by_bytes;
    for (size_t i = 0; i < d.requests.size(); ++i) {
      const double v = scores[at++].ll;
      ll.push_back(v);
      by_chars.push_back(v / static_cast<double>(utf8_length(d.choices[i])));
      by_bytes.push_back(v / static_cast<double>(d.choices[i].size()));
    }
    const int64_t pred = argmax(ll);
    r.predictions.push_back(pred);
    acc.push_back(pred == d.gold);
    acc_norm.push_back(argmax(by_chars) == d.gold);
    acc_bytes.push_back(argmax(by_bytes) == d.gold);
  }
  r.metrics["acc"] = mean_of(acc);
  r.metrics["acc_stderr"] = finite_or_null(mean_stderr(acc));
  if (task.scoring == TaskScoring::multiple_choice) {
    r.metrics["acc_norm"] = mean_of(acc_norm);
    r.metrics["acc_norm_stderr"] = finite_or_null(mean_stderr(acc_norm));
    r.metrics["acc_bytes"] = mean_of(acc_bytes);
  }
  if (task.scoring == TaskScoring::last_word) r.metrics["perplexity"] = finite_or_null(std::exp(-mean_of(lls)));
  r.metrics["examples"] = r.examples;
  return r;
}

}  // namespace keel
