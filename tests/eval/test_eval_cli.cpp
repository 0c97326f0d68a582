// Downstream tasks and held-out sets through the binary: a run records them
// (metrics.jsonl, summary.json, tasks/), a bad task file stops it before the
// first step naming the entry, file and line, and `keel eval` on one rank
// and on two gives the training run's own per-example numbers, bit for bit.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "test_util.h"
#include "util/fs.h"

using keel_test::read_file;
using keel_test::run_keel;
using keel_test::write_file;

namespace {

std::string g_dir;

std::string config() { return g_dir + "/base.yaml"; }

std::vector<nlohmann::json> records(const std::string& run) {
  std::vector<nlohmann::json> out;
  std::ifstream in(g_dir + "/runs/" + run + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

class EvalCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_dir = keel_test::make_temp_dir("eval_cli");
    write_file(g_dir + "/corpus.txt", keel_test::make_sentence_corpus(11, 300));
    write_file(g_dir + "/other.txt", keel_test::make_sentence_corpus(29, 60));
    // A generic task file: two choices, one the corpus's kind of text.
    std::string task;
    for (int i = 0; i < 9; ++i)
      task += R"({"context": "The model learns", "choices": [" to predict the next token.", " zq xv qz."], "label": )" +
              std::to_string(i % 2 == 0 ? 0 : 1) + "}\n";
    write_file(g_dir + "/task.jsonl", task);
    write_file(config(),
               "model: {vocab_size: 320, max_seq_len: 32, d_model: 32, n_layers: 2, n_heads: 2, n_kv_heads: 1}\n"
               "data: {dir: " + g_dir + "/data, sources: [" + g_dir + "/corpus.txt], doc_separator: '%', "
               "val_fraction: 0.2}\n"
               "train: {max_steps: 8, batch_size: 4, lr: 3.0e-3, warmup_steps: 2, log_every: 2, eval_every: 4, "
               "eval_batches: 2, threads: 1}\n"
               "checkpoint: {every: 0}\n"
               "monitor: {every: 0}\n"
               "eval: {tasks: [builtin, 'mine=jsonl:" + g_dir + "/task.jsonl'], every: 4, builtin_examples: 20, "
               "batch_size: 7}\n"
               "run: {out_dir: " + g_dir + "/runs}\n");
    std::string out;
    ASSERT_EQ(run_keel("prepare " + config() + " --quiet", &out), 0) << out;
    // A second held-out set, with the first one's tokenizer.
    ASSERT_EQ(run_keel("prepare " + config() + " --quiet --set data.dir=" + g_dir + "/other --set data.sources=[" +
                           g_dir + "/other.txt] --set data.tokenizer=" + g_dir + "/data/tokenizer.model",
                       &out),
              0)
        << out;
    // Held out twice: as a prepared directory, and as a raw source keel prepares itself.
    ASSERT_EQ(run_keel("train " + config() + " --set run.name=tasks --set eval.sets=[" + g_dir + "/other," + g_dir +
                           "/other.txt]",
                       &out),
              0)
        << out;
  }
  static void TearDownTestSuite() { keel::remove_tree(g_dir); }
};

}  // namespace

TEST_F(EvalCli, ARunRecordsTasksAndSets) {
  std::vector<int64_t> steps;
  for (const auto& r : records("tasks")) {
    if (!r.contains("tasks")) continue;
    steps.push_back(r["step"].get<int64_t>());
    const auto& b = r["tasks"]["builtin"];
    EXPECT_EQ(b["examples"], 20);
    EXPECT_GE(b["acc"].get<double>(), 0.0);
    EXPECT_LE(b["acc"].get<double>(), 1.0);
    EXPECT_TRUE(b.contains("acc_norm") && b.contains("acc_stderr")) << b;
    EXPECT_EQ(r["tasks"]["mine"]["examples"], 9);
    EXPECT_GT(r["sets"]["other"]["loss"].get<double>(), 0.0);
    EXPECT_NEAR(r["sets"]["other"]["ppl"].get<double>(), std::exp(r["sets"]["other"]["loss"].get<double>()), 1e-6);
    EXPECT_GT(r["sets"]["other.txt"]["loss"].get<double>(), 0.0);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{4, 8}));  // eval.every and the last step
  auto summary = nlohmann::json::parse(read_file(g_dir + "/runs/tasks/summary.json"));
  EXPECT_EQ(summary["tasks"], records("tasks").back()["tasks"]);
  EXPECT_EQ(summary["sets"], records("tasks").back()["sets"]);
  // The raw source was prepared inside data.dir, with its tokenizer, held out whole.
  bool prepared = false;
  for (const auto& name : keel::list_directory(g_dir + "/data/eval_sets"))
    prepared = prepared || (name.rfind("other.txt-", 0) == 0 && keel::path_exists(g_dir + "/data/eval_sets/" + name +
                                                                                    "/manifest.json"));
  EXPECT_TRUE(prepared);
  // The builtin task as a file, and each example's scores of the last evaluation.
  EXPECT_TRUE(keel::path_exists(g_dir + "/runs/tasks/tasks/builtin.jsonl"));
  const std::string scores = read_file(g_dir + "/runs/tasks/tasks/mine.scores.jsonl");
  EXPECT_EQ(std::count(scores.begin(), scores.end(), '\n'), 9);
}

TEST_F(EvalCli, OneAndTwoRanksGiveTheRunsOwnScores) {
  std::string out;
  const std::string run = g_dir + "/runs/tasks";
  ASSERT_EQ(run_keel("eval " + run + " --out " + g_dir + "/one", &out), 0) << out;
  EXPECT_NE(out.find("builtin"), std::string::npos) << out;
  ASSERT_EQ(run_keel("launch --nproc 2 -- eval " + run + " --out " + g_dir + "/two", &out), 0) << out;
  EXPECT_NE(out.find("2 rank(s)"), std::string::npos) << out;
  for (const std::string task : {"builtin", "mine"}) {
    const std::string trained = read_file(run + "/tasks/" + task + ".scores.jsonl");
    ASSERT_FALSE(trained.empty());
    EXPECT_EQ(read_file(g_dir + "/one/" + task + ".scores.jsonl"), trained) << task;
    EXPECT_EQ(read_file(g_dir + "/two/" + task + ".scores.jsonl"), trained) << task;
  }
  // The validation loss and held-out sets of the final weights, on the
  // windows training evaluated: the run's own last evaluation.
  const auto summary = nlohmann::json::parse(read_file(run + "/summary.json"));
  for (const std::string ranks : {"one", "two"}) {
    const auto v = nlohmann::json::parse(read_file(g_dir + "/" + ranks + "/results.json"))["validation"];
    ASSERT_TRUE(v.is_object()) << ranks;
    EXPECT_NEAR(v["loss"].get<double>(), summary["final_val_loss"].get<double>(), 1e-5) << ranks;
    EXPECT_EQ(v["batches"], 2) << ranks;
    for (const std::string set : {"other", "other.txt"})
      EXPECT_NEAR(v["sets"][set]["loss"].get<double>(), summary["sets"][set]["loss"].get<double>(), 1e-5) << set;
  }
  EXPECT_NE(out.find("validation loss "), std::string::npos) << out;
  ASSERT_EQ(run_keel("eval " + run + " --val-batches 0 --task builtin", &out), 0) << out;
  EXPECT_NE(out.find("no validation loss: --val-batches 0"), std::string::npos) << out;
  // --out is not written over without --force.
  EXPECT_EQ(run_keel("eval " + run + " --task builtin --out " + g_dir + "/one", &out), 2) << out;
  EXPECT_NE(out.find("--force"), std::string::npos) << out;
}

TEST_F(EvalCli, BadTaskFileStopsTheRunBeforeItsFirstStep) {
  write_file(g_dir + "/bad.jsonl", R"({"context": "c", "choices": ["a"], "label": 0})" "\n{oops\n");
  std::string out;
  EXPECT_EQ(run_keel("train " + config() + " --set run.name=bad --set 'eval.tasks=[builtin, jsonl:" + g_dir +
                         "/bad.jsonl]'",
                     &out),
            2)
      << out;
  EXPECT_NE(out.find("eval.tasks[1]"), std::string::npos) << out;
  EXPECT_NE(out.find(g_dir + "/bad.jsonl:2"), std::string::npos) << out;
  EXPECT_TRUE(records("bad").empty());  // no step ran
  // Unknown kinds and a set of another tokenizer are config errors too.
  EXPECT_EQ(run_keel("train " + config() + " --set run.name=bad2 --set 'eval.tasks=[mmlu:x]'", &out), 2) << out;
  EXPECT_NE(out.find("unknown task kind"), std::string::npos) << out;
  ASSERT_EQ(run_keel("prepare " + config() + " --quiet --set data.dir=" + g_dir + "/alien --set data.sources=[" +
                         g_dir + "/other.txt] --set model.vocab_size=300",
                     &out),
            0)
      << out;
  EXPECT_EQ(run_keel("train " + config() + " --set run.name=bad3 --set eval.sets=[" + g_dir + "/alien]", &out), 2)
      << out;
  EXPECT_NE(out.find("eval.sets[0]"), std::string::npos) << out;
  EXPECT_NE(out.find("another tokenizer"), std::string::npos) << out;
}
