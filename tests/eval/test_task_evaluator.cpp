// The task evaluator against the definition: each request's log-likelihood
// equals a forward of that request alone, whatever the batch; two Gloo ranks
// (threads here; processes in tests/eval/test_eval_cli.cpp) give exactly one
// rank's numbers; bf16 autocast stays within its rounding.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "../data/test_data_util.h"
#include "data/sources.h"
#include "data/tokenizer_train.h"
#include "distributed/launcher.h"
#include "eval/builtin_task.h"
#include "eval/task_evaluator.h"
#include "train/evaluator.h"
#include "model/init.h"
#include "test_util.h"

using namespace keel;
using namespace keel_test;

namespace {

const Tokenizer& tok() { return small_tokenizer(); }

ModelConfig tiny_model() {
  ModelConfig m;
  m.vocab_size = 400;
  m.max_seq_len = 48;
  m.d_model = 32;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  return m;
}

// The builtin task over made-up documents, plus a jsonl-like task whose
// requests are longer than the model's window (truncated) and of mixed lengths.
std::vector<EvalTask> tasks() {
  std::vector<EvalTask> out{builtin_task(make_documents(30, 5), 12)};
  EvalTask t;
  t.spec = {"long", "jsonl", "f"};
  const auto docs = make_documents(6, 9);
  for (size_t i = 0; i < docs.size(); ++i) {
    EvalDoc d;
    d.choices = {"the model learns", "loss falls slowly when rate is high", "a"};
    for (const auto& c : d.choices) d.requests.push_back({docs[i], " " + c});
    d.gold = static_cast<int64_t>(i % 3);
    d.line = static_cast<int64_t>(i) + 1;
    t.docs.push_back(d);
  }
  out.push_back(t);
  return out;
}

// Each example's log-likelihoods as the evaluator wrote them.
std::vector<std::vector<double>> lls_of(const TaskEvaluator& ev, size_t task) {
  std::vector<std::vector<double>> out;
  std::istringstream in(ev.examples_jsonl(task));
  for (std::string line; std::getline(in, line);)
    out.push_back(nlohmann::json::parse(line)["ll"].get<std::vector<double>>());
  return out;
}

// Initialised as training initialises it (a Transformer's own constructor
// leaves its parameters uninitialised).
Transformer seeded_model() { return build_model(tiny_model(), 3); }

}  // namespace

TEST(TaskEvaluator, EachRequestScoresAsAForwardOfItAlone) {
  torch::set_num_threads(1);
  Transformer model = seeded_model();
  TaskEvaluator ev(tasks(), tok(), tiny_model().max_seq_len, 5, nullptr, EvalDevice{});
  ev.evaluate(model);
  torch::NoGradGuard no_grad;
  int64_t checked = 0, truncated = 0;
  for (size_t t = 0; t < ev.tasks().size(); ++t) {
    const auto lls = lls_of(ev, t);
    ASSERT_EQ(lls.size(), ev.tasks()[t].docs.size());
    for (size_t e = 0; e < lls.size(); ++e)
      for (size_t c = 0; c < lls[e].size(); ++c) {
        const auto r = tokenize_request(tok(), ev.tasks()[t].docs[e].requests[c], tiny_model().max_seq_len, "t");
        auto logits = model->forward(torch::tensor(r.input).unsqueeze(0)).squeeze(0);  // shape: [T, V]
        auto logp = torch::log_softmax(logits.to(torch::kFloat64), -1);
        const int64_t n = static_cast<int64_t>(r.input.size()), m = static_cast<int64_t>(r.target.size());
        double want = 0;
        for (int64_t j = 0; j < m; ++j) want += logp[n - m + j][r.target[static_cast<size_t>(j)]].item<double>();
        EXPECT_NEAR(lls[e][c], want, 1e-4) << "task " << t << " example " << e << " choice " << c;
        ++checked;
        truncated += n == tiny_model().max_seq_len;
      }
  }
  EXPECT_EQ(checked, 12 * 4 + 6 * 3);
  EXPECT_GT(truncated, 0);  // the long task's contexts were cut to the window
  // acc follows the log-likelihoods: the argmax of each example.
  const auto lls = lls_of(ev, 0);
  int64_t right = 0;
  for (size_t e = 0; e < lls.size(); ++e)
    right += std::max_element(lls[e].begin(), lls[e].end()) - lls[e].begin() == ev.tasks()[0].docs[e].gold;
  EXPECT_DOUBLE_EQ(ev.last()["builtin"]["acc"].get<double>(), static_cast<double>(right) / 12);
}


TEST(TaskEvaluator, TwoGlooRanksGiveExactlyOneRanksScores) {
  torch::set_num_threads(1);
  Transformer one = seeded_model(), r0 = seeded_model(), r1 = seeded_model();
  TaskEvaluator single(tasks(), tok(), tiny_model().max_seq_len, 4, nullptr, EvalDevice{});
  single.evaluate(one);
  const int port = find_free_port();
  std::string out0, out1;
  auto rank = [&](int r, Transformer& model, std::string* out) {
    torch::set_num_threads(1);  // per thread (OpenMP)
    Dist dist(thread_rank_env(r, 2, port), DistBackend::gloo, 30);
    TaskEvaluator ev(tasks(), tok(), tiny_model().max_seq_len, 4, &dist, EvalDevice{});
    ev.evaluate(model);
    *out = ev.examples_jsonl(0) + ev.examples_jsonl(1) + ev.last().dump();
  };
  std::thread t1([&] { rank(1, r1, &out1); });
  rank(0, r0, &out0);
  t1.join();
  const std::string want = single.examples_jsonl(0) + single.examples_jsonl(1) + single.last().dump();
  EXPECT_EQ(out0, want);  // bit for bit: the printed doubles round-trip
  EXPECT_EQ(out1, want);
}

// Under bf16 autocast (the CPU's form of the CUDA path) the same requests
// score within bf16's rounding of the fp32 numbers.
TEST(TaskEvaluator, Bf16AutocastScoresCloseToFp32) {
  torch::set_num_threads(1);
  Transformer model = seeded_model();
  TaskEvaluator fp32(tasks(), tok(), tiny_model().max_seq_len, 8, nullptr, EvalDevice{});
  EvalDevice bf16;
  bf16.bf16_autocast = true;
  TaskEvaluator low(tasks(), tok(), tiny_model().max_seq_len, 8, nullptr, bf16);
  fp32.evaluate(model);
  low.evaluate(model);
  for (size_t t = 0; t < fp32.tasks().size(); ++t) {
    const auto a = lls_of(fp32, t), b = lls_of(low, t);
    ASSERT_EQ(a.size(), b.size());
    double worst = 0;
    bool differs = false;
    for (size_t e = 0; e < a.size(); ++e)
      for (size_t c = 0; c < a[e].size(); ++c) {
        worst = std::max(worst, std::abs(a[e][c] - b[e][c]) / std::max(1.0, std::abs(a[e][c])));
        differs = differs || a[e][c] != b[e][c];
      }
    EXPECT_LT(worst, 0.02) << "task " << t;  // bf16 keeps 8 bits of mantissa
    EXPECT_TRUE(differs) << "task " << t << ": bf16 gave the fp32 numbers exactly (autocast not applied?)";
  }
}

// eval.sets names: the base name, a later set of the same base name numbered.
TEST(HeldOutSets, NamesAreBaseNamesMadeUnique) {
  Config cfg;
  cfg.eval.sets = {"/d/a/web", "/d/b/web/", "/d/code.jsonl.zst", "web"};
  EXPECT_EQ(eval_set_name(cfg, 0), "web");
  EXPECT_EQ(eval_set_name(cfg, 1), "web_1");
  EXPECT_EQ(eval_set_name(cfg, 2), "code.jsonl.zst");
  EXPECT_EQ(eval_set_name(cfg, 3), "web_3");
}
