#include "eval/task_evaluator.h"

#include <algorithm>
#include <numeric>

#include "config/eval_config.h"
#include "eval/builtin_task.h"

namespace keel {

std::vector<EvalTask> load_eval_tasks(const Config& cfg, const DataManifest& data, const Tokenizer& tok) {
  std::vector<EvalTask> tasks;
  const auto specs = task_specs(cfg);
  for (size_t i = 0; i < specs.size(); ++i) {
    try {
      if (specs[i].kind == "builtin") {
        EvalTask t = builtin_task(validation_documents(cfg.data.dir, data, tok, kBuiltinMaxTokens),
                                  cfg.eval.builtin_examples);
        t.spec = specs[i];
        if (cfg.eval.limit > 0 && static_cast<int64_t>(t.docs.size()) > cfg.eval.limit) t.docs.resize(cfg.eval.limit);
        tasks.push_back(std::move(t));
      } else {
        tasks.push_back(read_task_file(specs[i], cfg.eval.limit));
      }
    } catch (const std::exception& e) {
      ConfigErrors errors;
      errors.add("eval.tasks[" + std::to_string(i) + "]", e.what());
      throw ConfigError(errors);
    }
  }
  return tasks;
}

TaskEvaluator::TaskEvaluator(std::vector<EvalTask> tasks, const Tokenizer& tok, int64_t max_len,
                             int64_t batch_size, Dist* dist, EvalDevice compute)
    : tasks_(std::move(tasks)), dist_(dist), compute_(compute) {
  for (size_t t = 0; t < tasks_.size(); ++t) {
    task_begin_.push_back(requests_.size());
    const EvalTask& task = tasks_[t];
    for (const EvalDoc& d : task.docs)
      for (size_t c = 0; c < d.requests.size(); ++c) {
        const std::string where = (task.spec.path.empty() ? "the builtin task" : task.spec.path) + ":" +
                                  std::to_string(d.line) + " (choice " + std::to_string(c) + ")";
        try {
          requests_.push_back({tokenize_request(tok, d.requests[c], max_len, where), t});
        } catch (const std::exception& e) {
          ConfigErrors errors;
          errors.add("eval.tasks[" + std::to_string(t) + "]", e.what());
          throw ConfigError(errors);
        }
      }
  }
  task_begin_.push_back(requests_.size());
  // Longest first (as lm-eval orders them), ties by position: the same batches on every rank and world size.
  std::vector<size_t> order(requests_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests_[a].tokens.input.size() > requests_[b].tokens.input.size();
  });
  for (size_t i = 0; i < order.size(); i += static_cast<size_t>(batch_size))
    batches_.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(i),
                          order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), i + batch_size)));
}

std::vector<TaskResult> TaskEvaluator::evaluate(Transformer& model) {
  torch::NoGradGuard no_grad;
  const int rank = dist_ ? dist_->rank() : 0, world = dist_ ? dist_->world() : 1;
  // Row 0: each request's log-likelihood; row 1: 1 where it is the greedy continuation.
  auto sums = torch::zeros({2, static_cast<int64_t>(requests_.size())}, torch::kFloat64);
  auto ll_out = sums.accessor<double, 2>();
  for (size_t b = static_cast<size_t>(rank); b < batches_.size(); b += static_cast<size_t>(world)) {
    const auto& batch = batches_[b];
    const int64_t B = static_cast<int64_t>(batch.size());
    const int64_t L = static_cast<int64_t>(requests_[batch[0]].tokens.input.size());  // longest first
    auto idx = torch::zeros({B, L}, torch::kInt64);  // right-padded: causal attention never reads the padding
    std::vector<int64_t> positions, targets;
    for (int64_t r = 0; r < B; ++r) {
      const TokenizedRequest& q = requests_[batch[static_cast<size_t>(r)]].tokens;
      const int64_t n = static_cast<int64_t>(q.input.size()), m = static_cast<int64_t>(q.target.size());
      std::copy(q.input.begin(), q.input.end(), idx.data_ptr<int64_t>() + r * L);
      for (int64_t j = 0; j < m; ++j) {
        positions.push_back(r * L + n - m + j);  // the position whose logits predict target j
        targets.push_back(q.target[static_cast<size_t>(j)]);
      }
    }
    torch::Tensor logp, hit;
    {
      AutocastScope autocast(compute_.bf16_autocast, compute_.device.type());
      auto hidden = model->forward_hidden(idx.to(compute_.device));    // shape: [B, L, d_model]
      hidden = hidden.reshape({B * L, hidden.size(-1)})                 // shape: [B*L, d_model]
                   .index_select(0, torch::tensor(positions).to(compute_.device));  // shape: [N, d_model]
      auto logits = model->head_logits(hidden);                         // shape: [N, padded_vocab]
      logits = logits.to(at::promote_types(logits.scalar_type(), torch::kFloat32));
      auto tgt = torch::tensor(targets).to(compute_.device).unsqueeze(1);
      logp = torch::log_softmax(logits, -1).gather(1, tgt).squeeze(1).to(torch::kCPU, torch::kFloat64);
      hit = (logits.argmax(-1) == tgt.squeeze(1)).to(torch::kCPU);
    }
    auto lp = logp.accessor<double, 1>();
    auto h = hit.accessor<bool, 1>();
    int64_t k = 0;
    for (int64_t r = 0; r < B; ++r) {
      const size_t req = batch[static_cast<size_t>(r)];
      const int64_t m = static_cast<int64_t>(requests_[req].tokens.target.size());
      double ll = 0;
      bool greedy = true;
      for (int64_t j = 0; j < m; ++j, ++k) {
        ll += lp[k];
        greedy = greedy && h[k];
      }
      ll_out[0][static_cast<int64_t>(req)] = ll;
      ll_out[1][static_cast<int64_t>(req)] = greedy ? 1.0 : 0.0;
    }
  }
  if (dist_ && world > 1) {  // every other rank adds exact zeros: the sums are one rank's numbers
    auto on_device = sums.to(compute_.device);
    dist_->all_reduce_sum(on_device, "the task evaluation's all-reduce");
    sums = on_device.to(torch::kCPU);
  }
  auto all = sums.accessor<double, 2>();
  scores_.assign(requests_.size(), {});
  for (size_t i = 0; i < requests_.size(); ++i)
    scores_[i] = {all[0][static_cast<int64_t>(i)], all[1][static_cast<int64_t>(i)] > 0.5};
  results_.clear();
  last_ = nlohmann::json::object();
  for (size_t t = 0; t < tasks_.size(); ++t) {
    std::vector<RequestScore> mine(scores_.begin() + static_cast<std::ptrdiff_t>(task_begin_[t]),
                                   scores_.begin() + static_cast<std::ptrdiff_t>(task_begin_[t + 1]));
    results_.push_back(score_task(tasks_[t], mine));
    last_[results_.back().name] = results_.back().metrics;
  }
  return results_;
}

nlohmann::json TaskEvaluator::evaluate_apart(Transformer& model) {
  auto scores = scores_;
  auto results = results_;
  auto last = last_;
  evaluate(model);
  nlohmann::json out = last_;
  scores_ = std::move(scores);
  results_ = std::move(results);
  last_ = std::move(last);
  return out;
}

std::string TaskEvaluator::examples_jsonl(size_t t) const {
  std::string out;
  if (t >= results_.size()) return out;
  size_t at = task_begin_[t];
  const EvalTask& task = tasks_[t];
  for (size_t e = 0; e < task.docs.size(); ++e) {
    const EvalDoc& d = task.docs[e];
    nlohmann::json j = {{"example", d.line}, {"gold", d.gold}, {"pred", results_[t].predictions[e]}};
    j["ll"] = nlohmann::json::array();
    j["greedy"] = nlohmann::json::array();
    for (size_t c = 0; c < d.requests.size(); ++c, ++at) {
      j["ll"].push_back(scores_[at].ll);
      j["greedy"].push_back(scores_[at].greedy);
    }
    out += j.dump() + "\n";
  }
  return out;
}

void TaskEvaluator::save_state(nlohmann::json& extra) const {
  if (!last_.is_null()) extra["last_task_results"] = last_;
}

void TaskEvaluator::load_state(const nlohmann::json& extra) {
  if (extra.contains("last_task_results") && extra["last_task_results"].is_object()) last_ = extra["last_task_results"];
}

}  // namespace keel
