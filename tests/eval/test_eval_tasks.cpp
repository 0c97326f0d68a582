// Downstream tasks without a model: each published format read into
// lm-evaluation-harness's requests (the texts its task configs build), the
// errors a bad file gets, Python's string rules, the boundary rule of
// request tokenization, the metrics, and the builtin task.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "../data/test_data_util.h"
#include "config/config.h"
#include "config/eval_config.h"
#include "data/sources.h"
#include "data/tokenizer.h"
#include "data/tokenizer_train.h"
#include "eval/builtin_task.h"
#include "eval/task_files.h"
#include "eval/task_requests.h"
#include "eval/task_scoring.h"
#include "test_util.h"

using namespace keel;
using namespace keel_test;

namespace {

std::string temp_file(const std::string& name, const std::string& text) {
  static const std::string dir = make_temp_dir("evaltasks");
  write_text(dir + "/" + name, text);
  return dir + "/" + name;
}

EvalTask read(const std::string& kind, const std::string& text, int64_t limit = 0,
              const std::string& name = "task.jsonl") {
  return read_task_file({kind, kind, temp_file(name, text)}, limit);
}

// The message of the TaskFileError `f` throws (fails the test when it throws none).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const TaskFileError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no TaskFileError";
  return "";
}

const Tokenizer& tok() { return small_tokenizer(); }

std::vector<int64_t> encode64(const std::string& s) {
  std::vector<int64_t> out;
  for (int32_t id : tok().encode(s)) out.push_back(id);
  return out;
}

}  // namespace

// ------------------------------------------------------------ Python's str

TEST(PythonStr, StripAndCapitalizeFollowPython) {
  EXPECT_EQ(python_strip(" \t\x1c a b \n\xc2\xa0"), "a b");  // \x1c and U+00A0 are spaces to Python
  EXPECT_EQ(python_rstrip("  a  "), "  a");
  EXPECT_EQ(python_strip("   "), "");
  EXPECT_EQ(python_capitalize("hELLO World"), "Hello world");
  EXPECT_EQ(python_capitalize("\xc3\xa9" "COLE"), "\xc3\x89" "cole");  // "éCOLE" -> "École"
  EXPECT_EQ(python_capitalize(""), "");
  EXPECT_EQ(utf8_length("\xc3\xa9t\xc3\xa9"), 3);
}

TEST(PythonStr, HellaswagPreprocessAsLmEval) {
  // utils.preprocess: strip, " [title]" -> ". ", drop [...], "  " -> " ".
  EXPECT_EQ(hellaswag_preprocess(" How to cook [title] Boil water. [step] Add salt.  "),
            "How to cook. Boil water. Add salt.");
  EXPECT_EQ(hellaswag_preprocess("a [x\ny] b"), "a [x\ny] b");  // '.' in \[.*?\] stops at a newline
  EXPECT_EQ(hellaswag_preprocess("a   b"), "a  b");            // str.replace is one pass
}

// ------------------------------------------------------------ the formats

TEST(TaskFiles, HellaswagAsLmEvalBuildsIt) {
  auto t = read("hellaswag",
                R"({"ind": 4, "activity_label": "Removing ice from car", "ctx_a": "Then, the man writes over the snow.", "ctx_b": "then", "ctx": "ignored", "endings": [", the man adds wax [title] to the windshield.", ", a woman is seen.", ", the man continues.", ", the man stops."], "label": "3", "split": "val"})"
                "\n");
  ASSERT_EQ(t.docs.size(), 1u);
  const auto& d = t.docs[0];
  EXPECT_EQ(d.gold, 3);
  ASSERT_EQ(d.requests.size(), 4u);
  EXPECT_EQ(d.requests[0].context, "Removing ice from car: Then, the man writes over the snow. Then");
  EXPECT_EQ(d.choices[0], ", the man adds wax. to the windshield.");
  EXPECT_EQ(d.requests[0].continuation, " , the man adds wax. to the windshield.");
  EXPECT_EQ(t.scoring, TaskScoring::multiple_choice);
}

TEST(TaskFiles, ArcInBothReleasedLayouts) {
  auto ai2 = read("arc",
                  R"({"id": "x", "question": {"stem": "Which is a gas?", "choices": [{"text": "ice", "label": "A"}, {"text": "steam", "label": "B"}, {"text": "rock", "label": "C"}]}, "answerKey": "B"})"
                  "\n",
                  0, "arc_ai2.jsonl");
  auto hf = read("arc",
                 R"({"id": "x", "question": "Which is a gas?", "choices": {"text": ["ice", "steam", "rock"], "label": ["1", "2", "3"]}, "answerKey": "2"})"
                 "\n",
                 0, "arc_hf.jsonl");
  for (const auto* t : {&ai2, &hf}) {
    ASSERT_EQ(t->docs.size(), 1u);
    EXPECT_EQ(t->docs[0].gold, 1);
    EXPECT_EQ(t->docs[0].requests[1].context, "Question: Which is a gas?\nAnswer:");
    EXPECT_EQ(t->docs[0].requests[1].continuation, " steam");
  }
}

TEST(TaskFiles, PiqaReadsItsSeparateLabelsFile) {
  const std::string text = R"({"goal": "Open a jar", "sol1": "twist the lid", "sol2": "eat the lid"})"
                           "\n"
                           R"({"goal": "Dry hair", "sol1": "use water", "sol2": "use a towel"})"
                           "\n";
  const std::string path = temp_file("valid.jsonl", text);
  write_text(path.substr(0, path.size() - 6) + "-labels.lst", "0\n1\n");
  auto t = read_task_file({"piqa", "piqa", path}, 0);
  ASSERT_EQ(t.docs.size(), 2u);
  EXPECT_EQ(t.docs[0].gold, 0);
  EXPECT_EQ(t.docs[1].gold, 1);
  EXPECT_EQ(t.docs[1].requests[1].context, "Question: Dry hair\nAnswer:");
  EXPECT_EQ(t.docs[1].requests[1].continuation, " use a towel");
  // One label short: named, with the file.
  write_text(path.substr(0, path.size() - 6) + "-labels.lst", "0\n");
  const std::string e = error_of([&] { read_task_file({"piqa", "piqa", path}, 0); });
  EXPECT_NE(e.find(path + ":2"), std::string::npos) << e;
  // No labels file at all: its expected path is named.
  const std::string lone = temp_file("lone.jsonl", text);
  EXPECT_NE(error_of([&] { read_task_file({"piqa", "piqa", lone}, 0); }).find("lone-labels.lst"), std::string::npos);
}

TEST(TaskFiles, WinograndeScoresThePartAfterTheBlank) {
  auto t = read("winogrande",
                R"({"qID": "q", "sentence": "Sarah was a better surgeon than Maria so _ always got the easier cases.", "option1": "Sarah", "option2": "Maria", "answer": "2"})"
                "\n");
  ASSERT_EQ(t.docs.size(), 1u);
  const auto& d = t.docs[0];
  EXPECT_EQ(t.scoring, TaskScoring::partial);
  EXPECT_EQ(d.gold, 1);
  EXPECT_EQ(d.requests[0].context, "Sarah was a better surgeon than Maria so Sarah");
  EXPECT_EQ(d.requests[1].context, "Sarah was a better surgeon than Maria so Maria");
  EXPECT_EQ(d.requests[0].continuation, " always got the easier cases.");
  EXPECT_EQ(d.requests[1].continuation, d.requests[0].continuation);
}

TEST(TaskFiles, LambadaSplitsOffTheLastWord) {
  auto t = read("lambada", R"({"text": "he opened the door and saw  the dog"})" "\n" R"({"text": "alone"})" "\n");
  ASSERT_EQ(t.docs.size(), 2u);
  EXPECT_EQ(t.scoring, TaskScoring::last_word);
  EXPECT_EQ(t.docs[0].requests[0].context, "he opened the door and saw  the");
  EXPECT_EQ(t.docs[0].requests[0].continuation, " dog");
  EXPECT_EQ(t.docs[1].requests[0].context, "");
  EXPECT_EQ(t.docs[1].requests[0].continuation, " alone");
}

TEST(TaskFiles, GenericJsonlAndLimit) {
  std::string text;
  for (int i = 0; i < 5; ++i)
    text += R"({"context": "c)" + std::to_string(i) + R"(", "choices": ["a", "b"], "label": )" +
            std::to_string(i % 2) + "}\n\n";  // blank lines are skipped
  auto t = read("jsonl", text, 3);
  ASSERT_EQ(t.docs.size(), 3u);
  EXPECT_EQ(t.docs[2].requests[0].context, "c2");
  EXPECT_EQ(t.docs[2].line, 5);  // the file's line, blank lines counted
  EXPECT_EQ(t.docs[1].gold, 1);
}

TEST(TaskFiles, BadFilesNameTheFileAndLine) {
  const std::string ok = R"({"context": "c", "choices": ["a", "b"], "label": 0})";
  struct Case {
    std::string kind, text, expect;
  };
  const std::vector<Case> cases = {
      {"jsonl", ok + "\n{not json\n", ":2: not valid JSON"},
      {"jsonl", ok + "\n" + R"({"context": "c", "choices": ["a"], "label": 1})" + "\n", ":2: \"label\" is 1, outside"},
      {"jsonl", R"({"context": "c", "choices": "ab", "label": 0})", ":1: \"choices\" is string, not a list"},
      {"jsonl", R"({"choices": ["a"], "label": 0})", ":1: no \"context\" field"},
      {"jsonl", "[1, 2]", ":1: not a JSON object"},
      {"jsonl", std::string(40, '[') + std::string(40, ']'), "nested deeper"},
      {"jsonl", "", "no examples"},
      {"jsonl", "\xff\xfe", "not UTF-8 at byte offset 0"},
      {"hellaswag", R"({"activity_label": "a", "ctx_a": "b", "ctx_b": "c", "endings": ["x"], "label": ""})",
       "publishes none"},
      {"arc", R"({"question": {"stem": "q", "choices": [{"text": "a", "label": "A"}]}, "answerKey": "E"})",
       "\"answerKey\" \"E\" is none"},
      {"winogrande", R"({"sentence": "no blank", "option1": "a", "option2": "b", "answer": "1"})", "no blank"},
      {"winogrande", R"({"sentence": "a _ b", "option1": "a", "option2": "b", "answer": "0"})", "answer"},
      {"lambada", R"({"text": 5})", "\"text\" is number, not a string"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string name = "bad" + std::to_string(i) + ".jsonl";
    const std::string e = error_of([&] { read(cases[i].kind, cases[i].text, 0, name); });
    EXPECT_NE(e.find(name), std::string::npos) << i << ": " << e;
    EXPECT_NE(e.find(cases[i].expect), std::string::npos) << i << ": " << e;
  }
  const std::string missing = error_of([] { read_task_file({"arc", "arc", "/nonexistent/arc.jsonl"}, 0); });
  EXPECT_NE(missing.find("/nonexistent/arc.jsonl"), std::string::npos) << missing;
}

// ------------------------------------------------------------ the config entries

TEST(TaskSpecs, EntriesAndTheirErrors) {
  TaskSpec t;
  std::string why;
  ASSERT_TRUE(parse_task_spec("builtin", &t, &why));
  EXPECT_EQ(t.name, "builtin");
  ASSERT_TRUE(parse_task_spec("arc_c=arc:/d/ARC-Challenge-Dev.jsonl", &t, &why));
  EXPECT_EQ(t.name, "arc_c");
  EXPECT_EQ(t.kind, "arc");
  EXPECT_EQ(t.path, "/d/ARC-Challenge-Dev.jsonl");
  ASSERT_TRUE(parse_task_spec("jsonl:/d/a=b.jsonl", &t, &why));  // '=' after the ':' is the path's
  EXPECT_EQ(t.path, "/d/a=b.jsonl");
  EXPECT_FALSE(parse_task_spec("mmlu:/x", &t, &why));
  EXPECT_NE(why.find("unknown task kind \"mmlu\""), std::string::npos);
  EXPECT_FALSE(parse_task_spec("hellaswag", &t, &why));
  EXPECT_FALSE(parse_task_spec("builtin:/x", &t, &why));
  EXPECT_FALSE(parse_task_spec("a b=jsonl:/x", &t, &why));

  try {
    config_from_yaml_text("eval:\n  tasks: [builtin, builtin, 'x:y']\n  sets: [d, d]\n");
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("eval.tasks[1]"), std::string::npos) << m;  // the second builtin
    EXPECT_NE(m.find("eval.tasks[2]"), std::string::npos) << m;
    EXPECT_NE(m.find("eval.sets[1]"), std::string::npos) << m;
  }
}

// ------------------------------------------------------------ tokenization

TEST(TaskRequests, ContinuationIsWhatFollowsTheContextsOwnTokens) {
  const std::string ctx = "the cat sat on", cont = " the mat";
  const auto whole = encode64(ctx + cont), alone = encode64(ctx);
  auto r = tokenize_request(tok(), {ctx, cont}, 1000, "here");
  ASSERT_EQ(r.target.size(), whole.size() - alone.size());
  EXPECT_EQ(r.target, std::vector<int64_t>(whole.end() - static_cast<long>(r.target.size()), whole.end()));
  EXPECT_EQ(r.input, std::vector<int64_t>(whole.begin(), whole.end() - 1));
  // The context's trailing spaces move into the continuation: the same tokens.
  auto moved = tokenize_request(tok(), {ctx + " ", "the mat"}, 1000, "here");
  EXPECT_EQ(moved.input, r.input);
  EXPECT_EQ(moved.target, r.target);
}

TEST(TaskRequests, EmptyContextAndTruncation) {
  auto r = tokenize_request(tok(), {"", " the mat"}, 1000, "here");
  ASSERT_FALSE(r.input.empty());
  EXPECT_EQ(r.input[0], tok().bos_id());  // the prefix token
  EXPECT_EQ(r.target, encode64(" the mat"));
  // A window of max_len: the last max_len + 1 tokens minus the final one.
  const std::string ctx = "a long context of many words that will not all fit", cont = " at all";
  const auto whole = encode64(ctx + cont);
  auto cut = tokenize_request(tok(), {ctx, cont}, 6, "here");
  EXPECT_EQ(cut.input, std::vector<int64_t>(whole.end() - 7, whole.end() - 1));
  EXPECT_EQ(cut.target.back(), whole.back());
  const std::string too_long =
      error_of([&] { tokenize_request(tok(), {"x", " many more words than the window holds"}, 3, "f.jsonl:9"); });
  EXPECT_NE(too_long.find("f.jsonl:9"), std::string::npos) << too_long;
}

// ------------------------------------------------------------ metrics

TEST(TaskScoring, AccAccNormAndStderrAsLmEval) {
  EvalTask t;
  t.spec = {"t", "jsonl", "f"};
  auto doc = [](std::vector<std::string> choices, int64_t gold) {
    EvalDoc d;
    for (auto& c : choices) d.requests.push_back({"c", " " + c});
    d.choices = choices;
    d.gold = gold;
    return d;
  };
  t.docs = {doc({"a", "bbbb"}, 1), doc({"a", "bbbb"}, 0), doc({"xx", "yy"}, 1)};
  // Doc 0: raw prefers "a" (-2 > -3); per character "bbbb" (-0.75 > -2): acc 0, acc_norm 1.
  // Doc 1: the same scores, gold 0: acc 1, acc_norm 0. Doc 2: a tie goes to the first: acc 0.
  auto r = score_task(t, {{-2, false}, {-3, false}, {-2, false}, {-3, false}, {-1, false}, {-1, false}});
  EXPECT_EQ(r.predictions, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_DOUBLE_EQ(r.metrics["acc"].get<double>(), 1.0 / 3);
  EXPECT_DOUBLE_EQ(r.metrics["acc_norm"].get<double>(), 1.0 / 3);
  const double p = 1.0 / 3;
  EXPECT_NEAR(r.metrics["acc_stderr"].get<double>(), std::sqrt(p * (1 - p) / 2), 1e-12);
  // Bytes and characters differ for non-ASCII choices: "é" is 1 character, 2 bytes.
  EvalTask u = t;
  u.docs = {doc({"\xc3\xa9\xc3\xa9", "abc"}, 0)};
  auto v = score_task(u, {{-2.2, false}, {-3, false}});  // per char: -1.1 vs -1; per byte: -0.55 vs -1
  EXPECT_EQ(v.metrics["acc_norm"].get<double>(), 0.0);
  EXPECT_EQ(v.metrics["acc_bytes"].get<double>(), 1.0);
  EXPECT_TRUE(v.metrics["acc_stderr"].is_null());  // one example: no standard error
}

TEST(TaskScoring, LastWordIsGreedyAccuracyAndPerplexity) {
  EvalTask t;
  t.spec = {"l", "lambada", "f"};
  t.scoring = TaskScoring::last_word;
  t.docs.resize(2);
  for (auto& d : t.docs) d.requests.push_back({"c", " w"});
  auto r = score_task(t, {{-1.0, true}, {-3.0, false}});
  EXPECT_DOUBLE_EQ(r.metrics["acc"].get<double>(), 0.5);
  EXPECT_NEAR(r.metrics["perplexity"].get<double>(), std::exp(2.0), 1e-12);
  EXPECT_FALSE(r.metrics.contains("acc_norm"));
}

// ------------------------------------------------------------ the builtin task

TEST(BuiltinTask, DeterministicFourChoicesOneTrue) {
  const auto docs = make_documents(40, 3);
  auto a = builtin_task(docs, 50), b = builtin_task(docs, 50);
  ASSERT_EQ(a.docs.size(), 50u);
  EXPECT_EQ(task_to_jsonl(a), task_to_jsonl(b));  // a fixed seed: every run asks the same questions
  std::set<int64_t> golds;
  for (const auto& d : a.docs) {
    ASSERT_EQ(d.choices.size(), 4u);
    std::set<std::string> distinct(d.choices.begin(), d.choices.end());
    EXPECT_EQ(distinct.size(), 4u);
    golds.insert(d.gold);
    // The true continuation follows the context in one of the documents.
    const std::string joined = d.requests[0].context;
    bool found = false;
    for (const auto& text : docs) {
      const size_t at = text.find(joined);
      if (at == std::string::npos) continue;
      const size_t next = text.find_first_not_of(" \n\t", at + joined.size());
      found = found || (next != std::string::npos && text.compare(next, d.choices[d.gold].size(), d.choices[d.gold]) == 0);
    }
    EXPECT_TRUE(found) << d.requests[0].context;
    EXPECT_EQ(d.requests[d.gold].continuation, " " + d.choices[d.gold]);
  }
  EXPECT_EQ(golds.size(), 4u);  // the right answer is not always in one place
  // Read back through the generic format: the same requests.
  auto back = read_task_file({"builtin", "jsonl", temp_file("builtin.jsonl", task_to_jsonl(a))}, 0);
  ASSERT_EQ(back.docs.size(), a.docs.size());
  EXPECT_EQ(back.docs[7].requests[2].context, a.docs[7].requests[2].context);
  EXPECT_EQ(back.docs[7].requests[2].continuation, a.docs[7].requests[2].continuation);
  EXPECT_EQ(back.docs[7].gold, a.docs[7].gold);
}

TEST(BuiltinTask, TooLittleTextIsAnError) {
  EXPECT_NE(error_of([] { builtin_task({"too short"}, 10); }).find("too little text"), std::string::npos);
}
