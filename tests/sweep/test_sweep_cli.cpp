// `keel sweep` and `keel report` end to end on a tiny model and corpus: a 2x2
// grid runs, re-runs skip finished points and resume interrupted ones, a
// changed sweep file is refused (or its reuse spelled out), a signal stops
// the sweep resumably, and the report (CSV, LR sensitivity, markdown, plots)
// builds.
#include <gtest/gtest.h>

#include <regex>

#include <cmath>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "test_util.h"
#include "util/dir_lock.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/text.h"

using keel_test::read_file;
using keel_test::run_keel;
using keel_test::write_file;

namespace {

std::string g_dir;  // corpus, prepared data, base config

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_file(path)); }

std::vector<int64_t> logged_steps(const std::string& run) {
  std::vector<int64_t> steps;
  std::istringstream in(read_file(run + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) steps.push_back(nlohmann::json::parse(line)["step"].get<int64_t>());
  return steps;
}

std::vector<int64_t> range(int64_t from, int64_t to) {
  std::vector<int64_t> v;
  for (int64_t i = from; i <= to; ++i) v.push_back(i);
  return v;
}

size_t count_lines(const std::string& text) { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); }

class SweepCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_dir = keel_test::make_temp_dir("sweep_cli");
    write_file(g_dir + "/corpus.txt", keel_test::make_sentence_corpus(11, 300));
    write_file(g_dir + "/base.yaml",
               "model: {vocab_size: 320, max_seq_len: 32, d_model: 32, n_layers: 1, n_heads: 2, n_kv_heads: 1}\n"
               "data: {dir: " + g_dir + "/data, sources: [" + g_dir + "/corpus.txt], doc_separator: '%', "
               "val_fraction: 0.1}\n"
               "train: {max_steps: 6, batch_size: 4, lr: 1e-3, min_lr: 1e-5, warmup_steps: 1, log_every: 1, "
               "eval_every: 3, eval_batches: 1}\n"
               "checkpoint: {every: 3, keep_last: 2}\n"
               "monitor: {every: 2, sequences: 1}\n");
  }
  static void TearDownTestSuite() { keel::remove_tree(g_dir); }

  // A 2 x 2 sweep file writing to g_dir/<tag>.
  std::string sweep_file(const std::string& tag, const std::string& lrs = "[1e-3, 1e-2]",
                         const std::string& extra_set = "") {
    const std::string path = g_dir + "/" + tag + ".yaml";
    write_file(path, "base: base.yaml\nout_dir: " + g_dir + "/" + tag + "\n" + "set: {train.eval_every: 3" + extra_set +
                         "}\nvariants:\n  none: {model.qk_norm.type: none}\n  rms: {model.qk_norm.type: rms}\n"
                         "grid:\n  train.lr: " + lrs + "\n");
    return path;
  }
  std::string out(const std::string& tag) { return g_dir + "/" + tag; }
};

const std::vector<std::string> kPoints = {"none_lr=1e-3", "none_lr=1e-2", "rms_lr=1e-3", "rms_lr=1e-2"};

// A sweep directory of one point, lr=1e-3 (its run files are the caller's),
// as keel sweep would have written its manifest.
void write_one_point_sweep(const std::string& sweep, const std::string& name, int max_steps) {
  keel::ensure_directory(sweep + "/lr=1e-3");
  write_file(sweep + "/sweep.json",
             R"({"format": "keel-sweep", "version": 1, "name": ")" + name +
                 R"(", "axes": [{"key": "train.lr", "short": "lr", "values": [{"label": "1e-3", "overrides":)"
                 R"( ["train.lr=1e-3"]}]}], "config": {}, "points": [{"name": "lr=1e-3", "active": true, "labels":)"
                 R"( {"train.lr": "1e-3"}, "max_steps": )" + std::to_string(max_steps) +
                 R"(, "lr": 0.001, "seed": 1, "differs": {}}], "sessions": []})");
}

}  // namespace

TEST_F(SweepCli, TinyGridRunsAndTheReportBuilds) {
  std::string log;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(run_keel("sweep " + sweep_file("e2e") + " --parallel 2", &log), 0) << log;
  EXPECT_NE(log.find("4/4 done"), std::string::npos) << log;
  EXPECT_NE(log.find("ETA"), std::string::npos) << log;
  for (const auto& p : kPoints) {
    const std::string dir = out("e2e") + "/" + p;
    auto summary = read_json(dir + "/summary.json");
    EXPECT_EQ(summary["stopped_by"], "completed") << p;
    EXPECT_EQ(logged_steps(dir), range(1, 6)) << p;
    bool events = false;
    for (const auto& name : keel::list_directory(dir)) events = events || name.find("tfevents") != std::string::npos;
    EXPECT_TRUE(events) << "no TensorBoard file in " << dir;
    // The point's values reached the run; the sweep set the directory and threads.
    const std::string cfg = read_file(dir + "/config.yaml");
    EXPECT_NE(cfg.find(p.rfind("rms", 0) == 0 ? "type: rms" : "type: none"), std::string::npos) << cfg;
    EXPECT_NE(cfg.find("threads: 1"), std::string::npos) << cfg;  // 2 cores / --parallel 2, or 1 core
    EXPECT_NE(cfg.find("stop_on_divergence: true"), std::string::npos) << cfg;
  }
  EXPECT_DOUBLE_EQ(read_json(out("e2e") + "/rms_lr=1e-2/summary.json").contains("final_val_loss"), true);
  const auto manifest = read_json(out("e2e") + "/sweep.json");
  EXPECT_EQ(manifest["points"].size(), 4u);
  EXPECT_EQ(manifest["sessions"].size(), 1u);
  EXPECT_EQ(manifest["sessions"][0]["exit_code"], 0);
  std::cerr << "[sweep of 4 points: "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s]\n";

  ASSERT_EQ(run_keel("report " + out("e2e"), &log), 0) << log;
  const std::string csv = read_file(out("e2e") + "/summary.csv");
  EXPECT_EQ(count_lines(csv), 5u) << csv;
  EXPECT_EQ(csv.rfind("point,variant,lr,seed,status,steps,max_steps,final_loss,final_val_loss,best_val_loss,", 0), 0u);
  EXPECT_NE(csv.find("\nrms_lr=1e-2,rms,0.01,1337,completed,6,6,"), std::string::npos) << csv;
  const std::string sens = read_file(out("e2e") + "/lr_sensitivity.csv");
  EXPECT_EQ(count_lines(sens), 3u) << sens;
  EXPECT_NE(sens.find("\nnone,2,2,0,"), std::string::npos) << sens;
  const std::string md = read_file(out("e2e") + "/report.md");
  for (const char* s : {"## Learning-rate sensitivity per variant", "| rms | 2/2 | 1 | 0 |", "![loss_vs_lr](plots/loss_vs_lr.png)",
                        "![attn_logit](plots/attn_logit.png)", "![grad_norm](plots/grad_norm.png)",
                        "![loss_curves](plots/loss_curves.png)", "| none_lr=1e-2 | none | 0.01 | completed | 6/6 |",
                        "![layer_update_ratio](plots/layer_update_ratio.png)", "![adam_eps_share](plots/adam_eps_share.png)",
                        "--parallel 2"})
    EXPECT_NE(md.find(s), std::string::npos) << s << "\n" << md;
  for (const char* p : {"loss_vs_lr", "loss_curves", "attn_logit", "grad_norm", "layer_update_ratio", "adam_eps_share"})
    for (const char* ext : {".png", ".svg"}) {
      const std::string f = out("e2e") + "/plots/" + p + ext;
      EXPECT_TRUE(keel::path_exists(f) && keel::file_size(f) > 1000) << f;
    }
  EXPECT_EQ(read_file(out("e2e") + "/plots/loss_vs_lr.png").substr(1, 3), "PNG");
  // No size axis: no size section or scaling plots; nothing diverged: no early-warning section.
  EXPECT_EQ(md.find("## Model size"), std::string::npos);
  EXPECT_EQ(md.find("## What warned first"), std::string::npos);
  EXPECT_FALSE(keel::path_exists(out("e2e") + "/plots/lr_sensitivity_vs_params.png"));

  // --out puts the report elsewhere; --no-plots skips matplotlib.
  ASSERT_EQ(run_keel("report " + out("e2e") + " --out " + g_dir + "/report2 --no-plots", &log), 0) << log;
  EXPECT_TRUE(keel::path_exists(g_dir + "/report2/report.md"));
  EXPECT_FALSE(keel::path_exists(g_dir + "/report2/plots/loss_vs_lr.png"));
  // A missing interpreter still leaves the CSVs and report.md, says why, and
  // exits 4: the machine lacks something, the sweep's files were fine.
  keel::remove_file(g_dir + "/report2/report.md");
  EXPECT_EQ(run_keel("report " + out("e2e") + " --out " + g_dir + "/report2 --python /nonexistent/python", &log), 4)
      << log;
  EXPECT_NE(read_file(g_dir + "/report2/report.md").find("Plots not drawn"), std::string::npos);
  // A hand-written reading in the output directory (README.md, as in
  // docs/results/; notes.md in older folders) heads the regenerated report.
  write_file(g_dir + "/report2/README.md", "# What we found\n\nA reading.\n");
  ASSERT_EQ(run_keel("report " + out("e2e") + " --out " + g_dir + "/report2 --no-plots", &log), 0) << log;
  const std::string with_reading = read_file(g_dir + "/report2/report.md");
  EXPECT_LT(with_reading.find("# What we found\n\nA reading.\n"), with_reading.find("\n## ")) << with_reading;
}

// The edge search (issue 34, part 3): a grid run first in the same directory
// gives both ends of the range; the search reuses them, bisects each seed's
// bracket down to its factor with real runs, records what it did, and a
// re-run runs nothing. The report's edge rows agree with the runs' own
// summaries: the value below the edge trained, the one above diverged.
TEST_F(SweepCli, EdgeSearchReusesTheGridAndBracketsTheEdgeOfEverySeed) {
  const std::string dir = out("edge");
  const std::string head = "base: base.yaml\nout_dir: " + dir + "\nseeds: [1, 2]\n";
  write_file(g_dir + "/edge-grid.yaml", head + "grid:\n  train.lr: [1e-3, 100]\n");
  write_file(g_dir + "/edge.yaml", head + "search: {key: train.lr, low: 1e-3, high: 100, factor: 4}\n");
  std::string log;
  ASSERT_EQ(run_keel("sweep " + g_dir + "/edge-grid.yaml --parallel 2", &log), 0) << log;
  ASSERT_EQ(run_keel("sweep " + g_dir + "/edge.yaml --dry-run", &log), 0) << log;
  EXPECT_NE(log.find("2 group(s), train.lr searched in [0.001, 100] to a factor 4 for loss_divergence: at most 6 runs "
                     "per group (a log grid at that resolution: 10)"), std::string::npos) << log;
  EXPECT_NE(log.find("seed=1                           2 result(s); searching, trains at 0.001; next: 0.316"),
            std::string::npos) << log;
  ASSERT_EQ(run_keel("sweep " + g_dir + "/edge.yaml --parallel 2", &log), 0) << log;
  EXPECT_NE(log.find("4 result(s) already in the directory are reused"), std::string::npos) << log;
  EXPECT_EQ(log.find("start lr=0.001"), std::string::npos) << log;  // the grid's 1e-3 and 100 serve
  EXPECT_EQ(log.find("start lr=100"), std::string::npos) << log;
  EXPECT_NE(log.find("start lr=0.316_seed=1"), std::string::npos) << log;
  const auto manifest = read_json(dir + "/sweep.json");
  EXPECT_EQ(manifest["search"]["key"], "train.lr");
  EXPECT_EQ(manifest["search"]["factor"], 4.0);

  ASSERT_EQ(run_keel("report " + dir + " --no-plots", &log), 0) << log;
  const std::string md = read_file(dir + "/report.md");
  EXPECT_NE(md.find("## Stability edge"), std::string::npos) << md;
  EXPECT_NE(md.find("Search: `train.lr` bisected in [0.001, 100] to a factor 4"), std::string::npos) << md;
  // Each seed's bracket, checked against the runs themselves.
  std::istringstream csv(read_file(dir + "/edge.csv"));
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "group,seed,state,stable,unstable,runs,non_monotone");
  int rows = 0;
  auto run_at = [&](const std::string& seed, double lr) {
    for (const auto& p : manifest["points"])
      if (p["labels"]["run.seed"] == seed &&
          std::fabs(std::strtod(p["labels"]["train.lr"].get<std::string>().c_str(), nullptr) - lr) <= 1e-9 * lr)
        return read_json(dir + "/" + p["name"].get<std::string>() + "/summary.json");
    ADD_FAILURE() << "no point at lr " << lr << " seed " << seed;
    return nlohmann::json::object();
  };
  while (std::getline(csv, line)) {
    ++rows;
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string field; std::getline(fields, field, ',');) f.push_back(field);
    ASSERT_EQ(f.size(), 7u) << line;
    EXPECT_EQ(f[0], "all");
    EXPECT_EQ(f[2], "found") << line;
    const double stable = std::stod(f[3]), unstable = std::stod(f[4]);
    EXPECT_LE(unstable / stable, 4.0 * (1 + 1e-9)) << line;
    EXPECT_GE(std::stoi(f[5]), 3) << line;
    EXPECT_LE(std::stoi(f[5]), 7) << line;
    const auto trained = run_at(f[1], stable), failed = run_at(f[1], unstable);
    EXPECT_EQ(trained["stopped_by"], "completed") << line;
    EXPECT_LT(trained["final_val_loss"].get<double>(), std::log(320.0)) << line;
    const bool diverged = failed.value("diverged", false) ||
                          !(failed.contains("final_val_loss") && failed["final_val_loss"].is_number() &&
                            failed["final_val_loss"].get<double>() < std::log(320.0));
    EXPECT_TRUE(diverged) << line << "\n" << failed.dump();
  }
  EXPECT_EQ(rows, 2);
  // The three criteria side by side (issue 51): the table, its CSV, and the
  // lines keel report prints; loss divergence's brackets are the search's own.
  EXPECT_NE(md.find("## Stability edge by criterion"), std::string::npos) << md;
  EXPECT_NE(log.find("stability edge (largest LR that passed"), std::string::npos) << log;
  EXPECT_TRUE(std::regex_search(log, std::regex("loss divergence +logit instability +degradation"))) << log;
  const std::string edge_csv = read_file(dir + "/edge.csv"), criteria_csv = read_file(dir + "/edge_criteria.csv");
  EXPECT_EQ(criteria_csv.rfind("group,criterion,seed,state,passed,failed\n", 0), 0u) << criteria_csv;
  for (const char* seed : {"1", "2"}) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(edge_csv, m, std::regex(std::string("all,") + seed + ",found,([^,]+),([^,]+),")))
        << edge_csv;
    EXPECT_NE(criteria_csv.find(std::string("all,loss_divergence,") + seed + ",found," + m[1].str() + "," + m[2].str()),
              std::string::npos)
        << criteria_csv;
    EXPECT_NE(criteria_csv.find(std::string("all,degradation,") + seed + ","), std::string::npos) << criteria_csv;
  }

  // A re-run finds every search ended and starts nothing.
  ASSERT_EQ(run_keel("sweep " + g_dir + "/edge.yaml", &log), 0) << log;
  EXPECT_EQ(log.find("start "), std::string::npos) << log;
  EXPECT_NE(log.find("edge seed=2: found, trains at"), std::string::npos) << log;
}

// Cooldown branches as a sweep (issue 54): a grid over the branch point and
// the cooldown's length, every point a branch of one trunk; keel report draws
// the trunk and its branches against tokens.
TEST_F(SweepCli, CooldownBranchesAreAGridAndTheReportDrawsThem) {
  std::string log;
  const std::string trunk = g_dir + "/cd_trunk";
  ASSERT_EQ(run_keel("train " + g_dir + "/base.yaml --set run.out_dir=" + g_dir + " --set run.name=cd_trunk "
                     "--set train.schedule=constant --set train.max_steps=6 --set checkpoint.every=2 --set checkpoint.keep_last=5 "
                     "--set train.eval_every=1",
                     &log),
            0)
      << log;
  write_file(g_dir + "/cooldown.yaml", "base: base.yaml\nout_dir: " + out("cooldown") +
                                          "\nset: {train.schedule: constant, train.max_steps: 6, train.cooldown_from: " +
                                          trunk + "}\ngrid:\n  train.cooldown_at: [2, 4]\n  train.cooldown_steps: [1, 2]\n");
  ASSERT_EQ(run_keel("sweep " + g_dir + "/cooldown.yaml --parallel 2", &log), 0) << log;
  for (const char* p : {"cooldown_at=2_cooldown_steps=1", "cooldown_at=4_cooldown_steps=2"}) {
    const auto s = read_json(out("cooldown") + "/" + p + "/summary.json");
    EXPECT_EQ(s["cooldown"]["parent_run"], trunk) << p;
  }
  EXPECT_EQ(read_json(out("cooldown") + "/cooldown_at=4_cooldown_steps=2/summary.json")["steps"], 6);
  ASSERT_EQ(run_keel("report " + out("cooldown"), &log), 0) << log;
  EXPECT_TRUE(keel::path_exists(out("cooldown") + "/plots/cooldown.png")) << log;
  const std::string md = read_file(out("cooldown") + "/report.md");
  EXPECT_NE(md.find("![cooldown](plots/cooldown.png)"), std::string::npos);
  // One LR: no LR-sensitivity table; the branches beside their trunk at the step each ends.
  EXPECT_NE(md.find("the sweep has no LR axis"), std::string::npos) << md;
  EXPECT_EQ(md.find("## Learning-rate sensitivity per variant"), std::string::npos) << md;
  EXPECT_NE(md.find("## Cooldown branches"), std::string::npos) << md;
  double trunk_val_at_6 = NAN;
  std::ifstream metrics(trunk + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto rec = nlohmann::json::parse(line);
    if (rec["step"] == 6 && rec.contains("val_loss")) trunk_val_at_6 = rec["val_loss"].get<double>();
  }
  ASSERT_TRUE(std::isfinite(trunk_val_at_6));
  const std::string csv = read_file(out("cooldown") + "/cooldown.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5) << csv;  // header and 4 branches
  const auto branch = read_json(out("cooldown") + "/cooldown_at=4_cooldown_steps=2/summary.json");
  const double branch_val = branch["final_val_loss"].get<double>();
  const std::string row = "cooldown_at=4_cooldown_steps=2," + trunk + ",4,2,linear,6," + keel::strf("%.6g", branch_val) +
                          "," + keel::strf("%.6g", trunk_val_at_6) + "," + keel::strf("%.6g", branch_val - trunk_val_at_6) + ",";
  EXPECT_NE(csv.find(row), std::string::npos) << row << "\n" << csv;
}

// Seeds (issue 17, section 2): divergence as k/N with a Wilson interval, loss
// and perplexity as mean ± sd, bootstrap intervals over seeds, and the plot's
// error band.
TEST_F(SweepCli, SeedsGiveFrequenciesIntervalsAndBands) {
  const std::string path = g_dir + "/seeds.yaml";
  write_file(path, "base: base.yaml\nout_dir: " + out("seeds") + "\nset: {train.eval_every: 3}\n"
                   "grid:\n  train.lr: [1e-3, 1e-2]\nseeds: [1, 2]\n");
  std::string log;
  ASSERT_EQ(run_keel("sweep " + path + " --parallel 2", &log), 0) << log;
  ASSERT_EQ(run_keel("report " + out("seeds"), &log), 0) << log;
  const std::string md = read_file(out("seeds") + "/report.md");
  for (const char* s : {"## Divergence and final perplexity by condition and learning rate",
                        "| all | 0.001 | 2 | 0/2 runs (0.00–0.66) | 0/2 | ", "| all | 4/4 | 2 | 0 | 0 |",
                        "bootstrap"})
    EXPECT_NE(md.find(s), std::string::npos) << s << "\n" << md;
  // Mean ± sd of two seeds' perplexities in the condition table.
  EXPECT_NE(md.find(" ± "), std::string::npos) << md;
  const std::string csv = read_file(out("seeds") + "/summary.csv");
  // A column of the header (its place moves as columns are added).
  const std::string header = csv.substr(0, csv.find('\n')) + ",";
  EXPECT_NE(header.find(",final_val_ppl,"), std::string::npos) << csv;
  auto summary = read_json(out("seeds") + "/lr=1e-2_seed=2/summary.json");
  EXPECT_NEAR(summary["final_val_ppl"].get<double>(), std::exp(summary["final_val_loss"].get<double>()), 1e-6);
  EXPECT_TRUE(keel::path_exists(out("seeds") + "/plots/loss_vs_lr.png"));
}

// The model-size axis (issue 17, section 3; Wortsman et al. 2023, Fig. 1):
// non-embedding parameters per run, a per-size table of LR sensitivity and
// layer-0 attention logits, and the three scaling plots.
TEST_F(SweepCli, SizesGiveTheScalingTableAndPlots) {
  const std::string path = g_dir + "/sizes.yaml";
  write_file(path, "base: base.yaml\nout_dir: " + out("sizes") + "\nset: {train.eval_every: 3}\n"
                   "variants: {none: {model.qk_norm.type: none}, rms: {model.qk_norm.type: rms}}\n"
                   "sizes: {d32: {}, d64: {model.d_model: 64, model.n_heads: 4, model.n_kv_heads: 2}}\n"
                   "grid:\n  train.lr: [1e-3, 1e-2]\n");
  std::string log;
  ASSERT_EQ(run_keel("sweep " + path + " --parallel 2", &log), 0) << log;
  ASSERT_EQ(run_keel("report " + out("sizes"), &log), 0) << log;
  // Non-embedding parameters: all but the (untied) embedding table and head, vocab 320.
  int64_t params[2];
  for (int i = 0; i < 2; ++i) {
    const int64_t d = i == 0 ? 32 : 64;
    auto summary = read_json(out("sizes") + "/none_size=d" + std::to_string(d) + "_lr=1e-3/summary.json");
    params[i] = summary["non_embedding_parameters"].get<int64_t>();
    EXPECT_EQ(params[i], summary["parameters"].get<int64_t>() - 2 * 320 * d);
  }
  EXPECT_GT(params[1], 3 * params[0]);  // twice the width: about four times the matmul weights
  // The output logits as the run ended: the last monitor record's (monitor.every 2, 6 steps).
  {
    const std::string run = out("sizes") + "/rms_size=d64_lr=1e-2";
    auto summary = read_json(run + "/summary.json");
    nlohmann::json last;
    std::istringstream in(read_file(run + "/metrics.jsonl"));
    for (std::string line; std::getline(in, line);) {
      auto rec = nlohmann::json::parse(line);
      if (rec.contains("output")) last = rec["output"];
    }
    ASSERT_TRUE(last.is_object());
    EXPECT_DOUBLE_EQ(summary["final_mean_log_z"].get<double>(), last["mean_log_z"].get<double>());
    EXPECT_DOUBLE_EQ(summary["final_max_output_logit"].get<double>(), last["max_logit"].get<double>());
  }
  const std::string csv = read_file(out("sizes") + "/summary.csv");
  EXPECT_NE(csv.find(",condition,size,parameters,non_embedding_parameters,final_mean_log_z,final_max_output_logit,"
                     "output_logit_unstable,output_logit_unstable_step,first_failure,first_failure_step\n"),
            std::string::npos)
      << csv;
  EXPECT_NE(csv.find(",rms,d64,"), std::string::npos) << csv;
  const std::string sens = read_file(out("sizes") + "/lr_sensitivity.csv");
  EXPECT_NE(sens.find("\nnone_size=d64,2,2,0,"), std::string::npos) << sens;
  EXPECT_NE(sens.find(",none,d64," + std::to_string(params[1]) + ","), std::string::npos) << sens;
  const std::string md = read_file(out("sizes") + "/report.md");
  for (const std::string& s : {std::string("## Model size"), std::string("| rms | d64 | "),
                               std::string("| none | d32 | ") + keel::si(static_cast<double>(params[0])) + " | 2/2 |",
                               std::string("Largest layer-0 attention logit over the run"),
                               std::string("| LR 0.001 | LR 0.01 |"), std::string("![lr_sensitivity_vs_params]"),
                               std::string("## Output logits"), std::string("| rms_size=d64 | 0.01 | 1 | ")})
    EXPECT_NE(md.find(s), std::string::npos) << s << "\n" << md;
  for (const char* p : {"loss_vs_lr_by_size", "lr_sensitivity_vs_params", "attn_logit_vs_params", "output_logit"})
    EXPECT_TRUE(keel::path_exists(out("sizes") + "/plots/" + p + ".png")) << p;
}

TEST_F(SweepCli, RerunSkipsFinishedPointsAndResumesInterruptedOnes) {
  std::string log;
  const std::string file = sweep_file("resume");
  ASSERT_EQ(run_keel("sweep " + file + " --parallel 2", &log), 0) << log;
  const std::string a = out("resume") + "/none_lr=1e-3", c = out("resume") + "/rms_lr=1e-3",
                    d = out("resume") + "/rms_lr=1e-2";
  const std::string a_metrics = read_file(a + "/metrics.jsonl"), a_log = read_file(a + "/train.log");
  // c as an interrupted run leaves it: the checkpoint of step 3, a summary
  // that says it was stopped by a signal. d never started.
  keel::remove_tree(c + "/checkpoints/step_00000006");
  auto summary = read_json(c + "/summary.json");
  summary["stopped_by"] = "signal";
  write_file(c + "/summary.json", summary.dump());
  keel::remove_tree(d);

  ASSERT_EQ(run_keel("sweep " + file + " --dry-run", &log), 0) << log;
  EXPECT_NE(log.find("rms_lr=1e-3                      resume from step 3"), std::string::npos) << log;
  EXPECT_NE(log.find("none_lr=1e-3                     completed at step 6"), std::string::npos) << log;

  ASSERT_EQ(run_keel("sweep " + file, &log), 0) << log;
  EXPECT_NE(log.find("reusing 4 point(s) recorded with identical settings"), std::string::npos) << log;
  EXPECT_NE(log.find("2 finished (skipped), 1 to resume from checkpoints, 1 to run"), std::string::npos) << log;
  EXPECT_NE(log.find("start rms_lr=1e-3, resuming at step 3"), std::string::npos) << log;
  EXPECT_EQ(log.find("start none_lr=1e-3"), std::string::npos) << log;
  EXPECT_EQ(read_file(a + "/metrics.jsonl"), a_metrics);  // untouched
  EXPECT_EQ(read_file(a + "/train.log"), a_log);
  EXPECT_NE(read_file(c + "/train.log").find("resumed from"), std::string::npos);
  EXPECT_EQ(logged_steps(c), range(1, 6));  // steps 4..6 once, after the resume
  EXPECT_EQ(read_json(c + "/summary.json")["stopped_by"], "completed");
  EXPECT_EQ(read_json(d + "/summary.json")["stopped_by"], "completed");

  ASSERT_EQ(run_keel("sweep " + file, &log), 0) << log;
  EXPECT_NE(log.find("4 finished (skipped), 0 to resume from checkpoints, 0 to run"), std::string::npos) << log;
  EXPECT_NE(log.find("nothing to run"), std::string::npos) << log;
  EXPECT_EQ(read_json(out("resume") + "/sweep.json")["sessions"].size(), 3u);
}

TEST_F(SweepCli, ChangedSweepFileIsRefusedOrItsReuseSpelledOut) {
  std::string log;
  ASSERT_EQ(run_keel("sweep " + sweep_file("changed") + " --parallel 2", &log), 0) << log;
  const std::string before = read_file(out("changed") + "/sweep.json");

  // Longer runs would mix with the finished 6-step ones: refused, exit 2.
  EXPECT_EQ(run_keel("sweep " + sweep_file("changed", "[1e-3, 1e-2]", ", train.max_steps: 8"), &log), 2) << log;
  EXPECT_NE(log.find("refusing to run"), std::string::npos) << log;
  EXPECT_NE(log.find("train.max_steps: 6 -> 8 (4 (all) points"), std::string::npos) << log;
  EXPECT_EQ(read_file(out("changed") + "/sweep.json"), before);  // nothing touched
  // The same through --set.
  EXPECT_EQ(run_keel("sweep " + sweep_file("changed") + " --set train.warmup_steps=2", &log), 2) << log;
  EXPECT_NE(log.find("train.warmup_steps: 1 -> 2"), std::string::npos) << log;
  // Even without sweep.json, a point directory's own config.yaml is compared.
  keel::rename_path(out("changed") + "/sweep.json", g_dir + "/changed-sweep.json");
  EXPECT_EQ(run_keel("sweep " + sweep_file("changed", "[1e-3, 1e-2]", ", train.max_steps: 8"), &log), 2) << log;
  EXPECT_NE(log.find("from its config.yaml"), std::string::npos) << log;
  keel::rename_path(g_dir + "/changed-sweep.json", out("changed") + "/sweep.json");

  // One more LR, one dropped: the finished points are reused, and said so.
  ASSERT_EQ(run_keel("sweep " + sweep_file("changed", "[1e-2, 3e-2]") + " --parallel 2", &log), 0) << log;
  EXPECT_NE(log.find("reusing 2 point(s) recorded with identical settings; 2 new"), std::string::npos) << log;
  EXPECT_NE(log.find("2 point(s) are no longer in the sweep file; kept on disk, left out of the report: none_lr=1e-3 "
                     "rms_lr=1e-3"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("2 finished (skipped), 0 to resume from checkpoints, 2 to run"), std::string::npos) << log;
  ASSERT_EQ(run_keel("report " + out("changed") + " --no-plots", &log), 0) << log;
  const std::string csv = read_file(out("changed") + "/summary.csv");
  EXPECT_EQ(count_lines(csv), 5u) << csv;
  EXPECT_EQ(csv.find("lr=1e-3"), std::string::npos) << csv;
  // Bringing a dropped point back with its old settings is fine too.
  ASSERT_EQ(run_keel("sweep " + sweep_file("changed", "[1e-3, 1e-2, 3e-2]") + " --dry-run", &log), 0) << log;
  EXPECT_NE(log.find("6 finished, 0 to run"), std::string::npos) << log;
}

TEST_F(SweepCli, SweepFileErrorsExitTwoWithFileAndLine) {
  const std::string path = g_dir + "/bad.yaml";
  write_file(path, "base: base.yaml\ngrid:\n  train.lr: [1e-3]\n  model.qk_norm.typ: [rms]\n");
  std::string log;
  EXPECT_EQ(run_keel("sweep " + path, &log), 2) << log;
  EXPECT_NE(log.find("grid.model.qk_norm.typ: unknown config key (" + path + ":4); did you mean model.qk_norm.type?"),
            std::string::npos)
      << log;
  EXPECT_EQ(run_keel("report " + g_dir, &log), 2) << log;  // not a sweep directory
  EXPECT_NE(log.find("no sweep.json"), std::string::npos) << log;
}

TEST_F(SweepCli, DivergedPointsStopAndCountAsInitialLoss) {
  // Every child sees the injected non-finite loss at step 3: each halts
  // there (exit 3), which the sweep records as diverged, not failed.
  const std::string path = g_dir + "/nan.yaml";
  write_file(path, "base: base.yaml\nout_dir: " + out("nan") + "\ngrid:\n  train.lr: [1e-3, 1e-2]\n");
  setenv("KEEL_FAULT_INJECT", "nan_loss_at_step:3", 1);
  std::string log;
  const int rc = run_keel("sweep " + path, &log);
  unsetenv("KEEL_FAULT_INJECT");
  ASSERT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("2/2 done (2 diverged, 0 failed)"), std::string::npos) << log;
  ASSERT_EQ(run_keel("report " + out("nan") + " --no-plots", &log), 0) << log;
  const std::string csv = read_file(out("nan") + "/summary.csv");
  EXPECT_NE(csv.find("lr=1e-3,all,0.001,1337,nonfinite,3,6,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",true,3,non-finite loss or gradient"), std::string::npos) << csv;
  EXPECT_NE(read_file(out("nan") + "/report.md").find("| all | 2/2 | 1 | 2 |"), std::string::npos);
  EXPECT_NE(read_file(out("nan") + "/report.md").find("all diverged"), std::string::npos);
  // What warned first (sweep/early_warning.h): the section and every row in early_warning.csv.
  const std::string md = read_file(out("nan") + "/report.md");
  EXPECT_NE(md.find("## What warned first"), std::string::npos) << md;
  EXPECT_NE(md.find("### Before loss divergence (2 of 2 runs)"), std::string::npos) << md;
  const std::string warn = read_file(out("nan") + "/early_warning.csv");
  EXPECT_NE(warn.find("\nloss_divergence,grad_norm,1.5,2,2,"), std::string::npos) << warn;
  EXPECT_NE(warn.find("\nloss_divergence,attn_l0_max_logit,"), std::string::npos) << warn;

  // A later session counts the points that diverged in an earlier one: run
  // one point again without the fault; the other stays diverged.
  keel::remove_tree(out("nan") + "/lr=1e-2");
  ASSERT_EQ(run_keel("sweep " + path, &log), 0) << log;
  EXPECT_NE(log.find("2/2 done (1 diverged, 0 failed)"), std::string::npos) << log;
  EXPECT_NE(log.find("2/2 points finished (1 diverged)"), std::string::npos) << log;
}

TEST_F(SweepCli, SignalStopsTheSweepResumably) {
  const std::string path = g_dir + "/long.yaml";
  write_file(path, "base: base.yaml\nout_dir: " + out("long") +
                       "\nset: {train.max_steps: 1000, train.log_every: 20, train.eval_every: 0, checkpoint.every: 0,"
                       " monitor.every: 0}\ngrid:\n  train.lr: [1e-3, 2e-3]\n");
  const std::string log_path = g_dir + "/long.log";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    freopen(log_path.c_str(), "w", stdout);
    freopen(log_path.c_str(), "a", stderr);
    execl(KEEL_BINARY, "keel", "sweep", path.c_str(), "--parallel", "2", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until both points have logged a few steps, then SIGTERM the sweep.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  auto logged = [&](const std::string& p) {
    return keel::path_exists(out("long") + "/" + p + "/metrics.jsonl") &&
           !read_file(out("long") + "/" + p + "/metrics.jsonl").empty();
  };
  while (!(logged("lr=1e-3") && logged("lr=2e-3")) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string log = read_file(log_path);
  ASSERT_TRUE(WIFEXITED(status)) << log;
  ASSERT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << log;
  EXPECT_NE(log.find("re-run the same command to continue"), std::string::npos) << log;
  std::string dry;
  ASSERT_EQ(run_keel("sweep " + path + " --dry-run", &dry), 0) << dry;
  EXPECT_NE(dry.find("2 to run (2 resuming)"), std::string::npos) << log << dry;
  for (const char* p : {"lr=1e-3", "lr=2e-3"})
    EXPECT_EQ(read_json(out("long") + "/" + p + "/summary.json")["stopped_by"], "signal") << log;
  // Finishing is cheap: the same command with fewer steps would be refused,
  // so let the resumed points run to their end.
  std::string rest;
  ASSERT_EQ(run_keel("sweep " + path + " --parallel 2", &rest), 0) << rest;
  for (const char* p : {"lr=1e-3", "lr=2e-3"}) {
    EXPECT_EQ(read_json(out("long") + "/" + p + "/summary.json")["stopped_by"], "completed") << rest;
    auto steps = logged_steps(out("long") + "/" + p);
    std::vector<int64_t> expected;
    for (int64_t s = 20; s <= 1000; s += 20) expected.push_back(s);
    // The stop step (not a multiple of 20) is logged too.
    steps.erase(std::remove_if(steps.begin(), steps.end(), [](int64_t s) { return s % 20 != 0; }), steps.end());
    EXPECT_EQ(steps, expected) << p;
  }
}

// A sweep directory has one sweep process, and a point still being trained
// by a child of an earlier sweep is never emptied (issue 20, defect 4).
TEST_F(SweepCli, ALiveSweepOrPointIsNotTouched) {
  std::string log;
  const std::string file = sweep_file("locked");
  {
    keel::DirLock live(out("locked"), "sweep directory");
    EXPECT_EQ(run_keel("sweep " + file, &log), 2) << log;
    EXPECT_NE(log.find("is in use by keel pid"), std::string::npos) << log;
  }
  keel::ensure_directory(out("locked") + "/" + kPoints[0]);
  write_file(out("locked") + "/" + kPoints[0] + "/metrics.jsonl", "{\"step\": 1, \"loss\": 5.0}\n");
  {
    keel::DirLock child(out("locked") + "/" + kPoints[0], "run directory");
    EXPECT_EQ(run_keel("sweep " + file, &log), 2) << log;
    EXPECT_NE(log.find("still being trained"), std::string::npos) << log;
    EXPECT_TRUE(keel::path_exists(out("locked") + "/" + kPoints[0] + "/metrics.jsonl"));
  }
}

// A point that starts over is run in an emptied directory, and keel empties
// only its own runs (issue 31): a point directory holding someone's files,
// or a link, refuses the sweep (exit 2) before anything is created; what a
// failed earlier attempt left (stdout.log alone) still starts over.
TEST_F(SweepCli, APointDirectoryThatIsNotARunIsNotEmptied) {
  std::string log;
  const std::string file = sweep_file("foreign");
  const std::string plain = out("foreign") + "/" + kPoints[0], linked = out("foreign") + "/" + kPoints[1];
  keel::ensure_directory(plain);
  write_file(plain + "/a.txt", "not keel's");
  keel::ensure_directory(g_dir + "/foreign-target");
  write_file(g_dir + "/foreign-target/b.txt", "not keel's");
  ASSERT_EQ(::symlink((g_dir + "/foreign-target").c_str(), linked.c_str()), 0);

  ASSERT_EQ(run_keel("sweep " + file + " --dry-run", &log), 0) << log;
  EXPECT_NE(log.find("refused: it does not look like a keel run"), std::string::npos) << log;
  EXPECT_EQ(run_keel("sweep " + file, &log), 2) << log;
  EXPECT_NE(log.find(plain + ": it does not look like a keel run"), std::string::npos) << log;
  EXPECT_NE(log.find(linked + ": it is a symbolic link"), std::string::npos) << log;
  EXPECT_EQ(keel::list_directory(out("foreign")), (std::vector<std::string>{kPoints[1], kPoints[0]}));  // nothing new
  EXPECT_EQ(keel::list_directory(plain), std::vector<std::string>{"a.txt"});
  EXPECT_EQ(keel::list_directory(g_dir + "/foreign-target"), std::vector<std::string>{"b.txt"});

  // Only the leftovers of a failed attempt: keel's own, so the point runs.
  keel::remove_tree(plain);
  keel::remove_tree(linked);
  keel::ensure_directory(plain);
  write_file(plain + "/stdout.log", "keel: invalid configuration: ...\n");
  ASSERT_EQ(run_keel("sweep " + file + " --only " + kPoints[0], &log), 0) << log;
  EXPECT_EQ(read_json(plain + "/summary.json")["stopped_by"], "completed");
  EXPECT_EQ(read_file(plain + "/stdout.log").find("invalid configuration"), std::string::npos);
}

// sweep.json and runs.json are JSON, which holds UTF-8 only: a path that is
// not is refused by name and byte offset (exit 2) before anything is made.
TEST_F(SweepCli, NonUtf8PathsAreRefusedBeforeAnythingIsCreated) {
  std::string log;
  const std::string bad = g_dir + "/bad\xff" + "dir";
  EXPECT_EQ(run_keel("sweep " + sweep_file("utf8") + " --out '" + bad + "'", &log), 2) << log;
  EXPECT_NE(log.find("--out: is not valid UTF-8 (byte " + std::to_string(g_dir.size() + 4) + " "), std::string::npos)
      << log;
  EXPECT_FALSE(keel::path_exists(bad));
  EXPECT_FALSE(keel::path_exists(out("utf8")));

  EXPECT_EQ(run_keel("compare '" + bad + "' --out " + g_dir + "/utf8-compare", &log), 2) << log;
  EXPECT_NE(log.find("run_dirs: is not valid UTF-8"), std::string::npos) << log;
  EXPECT_FALSE(keel::path_exists(g_dir + "/utf8-compare"));
}

// keel compare on ad-hoc runs (issue 19): two finished runs that differ in one
// key and a third whose lock is held, as while it still trains, read from its
// metrics so far; one table, the differing key as the runs' labels, the CSV
// and the plots.
TEST_F(SweepCli, CompareRunsSideBySide) {
  std::string log;
  const std::string runs = g_dir + "/adhoc";
  auto train = [&](const std::string& name, const std::string& extra) {
    return run_keel("train " + g_dir + "/base.yaml --set run.out_dir=" + runs + " --set run.name=" + name + " " + extra,
                    &log);
  };
  ASSERT_EQ(train("plain", ""), 0) << log;
  ASSERT_EQ(train("qk", "--set model.qk_norm.type=rms"), 0) << log;
  ASSERT_EQ(train("partial", "--stop-after-step 3"), 0) << log;
  keel::remove_file(runs + "/partial/summary.json");
  keel::DirLock live(runs + "/partial", "run directory");
  const std::string cmd = "compare " + runs + "/plain " + runs + "/qk " + runs + "/partial";
  ASSERT_EQ(run_keel(cmd + " --out " + g_dir + "/cmp", &log), 0) << log;
  for (const char* s : {"| `" , "| model.qk_norm.type=none | completed | 6/6 |", "| model.qk_norm.type=rms | completed | 6/6 |",
                        "| model.qk_norm.type=none | running | 3/6 |"})
    EXPECT_NE(log.find(s), std::string::npos) << s << "\n" << log;
  const auto plain = read_json(runs + "/plain/summary.json");
  const std::string csv = read_file(g_dir + "/cmp/compare.csv");
  EXPECT_EQ(count_lines(csv), 4u) << csv;
  char val[32];
  std::snprintf(val, sizeof val, "%.6g", plain["final_val_loss"].get<double>());
  EXPECT_NE(csv.find(val), std::string::npos) << val << "\n" << csv;
  const std::string md = read_file(g_dir + "/cmp/compare.md");
  for (const char* p : {"loss", "val_loss", "attn_logit", "grad_norm", "output_logits", "update_ratio", "adam_eps_share"}) {
    EXPECT_NE(md.find(std::string("![") + p + "](plots/" + p + ".png)"), std::string::npos) << p << "\n" << md;
    EXPECT_TRUE(keel::path_exists(g_dir + "/cmp/plots/" + p + ".png")) << p;
  }
  // A directory that is no run: exit 2, naming it.
  EXPECT_EQ(run_keel("compare " + g_dir, &log), 2) << log;
  EXPECT_NE(log.find("is not a run directory"), std::string::npos) << log;
}

// Downstream task results in compare and report (eval.tasks, eval.sets), on
// run directories written by hand: one finished (its summary.json's "tasks"
// and "sets" count, not its log's), one interrupted (the last record of its
// metrics.jsonl with "tasks" counts; odd entries are skipped, never thrown
// on). One "<task> acc" column per task any run has, "-" where a run has
// none, the CSV's task_ and set_ columns; runs without tasks get none of them.
TEST_F(SweepCli, CompareAndReportShowTaskAccuracy) {
  const std::string runs = g_dir + "/tasks", cmp = g_dir + "/tasks_cmp";
  for (const char* d : {"/done", "/cut", "/plain"}) keel::ensure_directory(runs + d);
  auto task = [](double acc, double stderr_) {
    return nlohmann::json{{"acc", acc}, {"acc_stderr", stderr_}, {"acc_norm", acc + 0.01}, {"examples", 250}};
  };
  nlohmann::json rec = {{"step", 10}, {"tokens", 1000}, {"loss", 5.0}, {"tasks", {{"builtin", task(0.4, 0.03)}}}};
  write_file(runs + "/done/metrics.jsonl", rec.dump() + "\n");
  write_file(runs + "/done/summary.json",
             nlohmann::json{{"stopped_by", "completed"}, {"steps", 20}, {"final_loss", 4.5},
                            {"tasks", {{"builtin", task(0.528, 0.032)}}},
                            {"sets", {{"web", {{"loss", 3.9}, {"ppl", 49.4}}}}}}.dump());
  std::string cut;
  rec["tasks"] = {{"builtin", task(0.3, 0.029)}};
  cut += rec.dump() + "\n";
  rec = {{"step", 20}, {"tokens", 2000}, {"loss", 4.8},
         {"tasks", {{"builtin", task(0.412, 0.031)}, {"arc", task(0.25, 0.04)}, {"bad", 7}}},
         {"sets", {{"web", {{"loss", nullptr}}}}}};
  cut += rec.dump() + "\n";
  cut += nlohmann::json{{"step", 25}, {"tokens", 2500}, {"tasks", "oops"}, {"sets", {1, 2}}}.dump() + "\n";
  cut += nlohmann::json{{"step", 30}, {"tokens", 3000}, {"loss", 4.7}}.dump() + "\n";
  write_file(runs + "/cut/metrics.jsonl", cut);
  write_file(runs + "/plain/metrics.jsonl", nlohmann::json{{"step", 1}, {"loss", 5.0}}.dump() + "\n");

  std::string log;
  ASSERT_EQ(run_keel("compare " + runs + "/done " + runs + "/cut --out " + cmp, &log), 0) << log;
  const std::string md = read_file(cmp + "/compare.md");
  for (const char* s : {"| tokens/s | arc acc | builtin acc | web loss |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
                        "| completed | 20 | 4.5000 (90.0) |", "| - | - | 0.528 ± 0.032 | 3.9000 |\n",
                        "| interrupted | 30 | 4.7000 (109.9) |", "| - | 0.250 ± 0.040 | 0.412 ± 0.031 | - |\n",
                        "![tasks](plots/tasks.png)"})
    EXPECT_NE(md.find(s), std::string::npos) << s << "\n" << md;
  EXPECT_TRUE(keel::path_exists(cmp + "/plots/tasks.png"));
  const std::string csv = read_file(cmp + "/compare.csv");
  EXPECT_NE(csv.find(",final_max_output_logit,output_logit_unstable,output_logit_unstable_step,first_failure,"
                     "first_failure_step,task_arc_acc,task_arc_acc_stderr,task_arc_acc_norm,task_builtin_acc,"
                     "task_builtin_acc_stderr,task_builtin_acc_norm,set_web_loss\n"),
            std::string::npos)
      << csv;
  EXPECT_NE(csv.find(",,,,0.528,0.032,0.538,3.9\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",0.25,0.04,0.26,0.412,0.031,0.422,\n"), std::string::npos) << csv;

  // No run with tasks: the table and the CSV as before, and no tasks plot.
  keel::remove_tree(cmp);
  ASSERT_EQ(run_keel("compare " + runs + "/plain --out " + cmp, &log), 0) << log;
  EXPECT_NE(log.find("| tokens/s |\n|---|---|---|---|---|---|---|---|---|---|---|\n"), std::string::npos) << log;
  EXPECT_EQ(log.find(" acc |"), std::string::npos) << log;
  EXPECT_EQ(read_file(cmp + "/compare.csv").find("task_"), std::string::npos);
  EXPECT_FALSE(keel::path_exists(cmp + "/plots/tasks.png"));

  // keel report: the same columns in its point table and summary.csv.
  const std::string sweep = g_dir + "/tasks_sweep";
  write_one_point_sweep(sweep, "tasks", 20);
  write_file(sweep + "/lr=1e-3/metrics.jsonl", read_file(runs + "/done/metrics.jsonl"));
  write_file(sweep + "/lr=1e-3/summary.json", read_file(runs + "/done/summary.json"));
  ASSERT_EQ(run_keel("report " + sweep + " --no-plots", &log), 0) << log;
  const std::string report = read_file(sweep + "/report.md");
  EXPECT_NE(report.find("| tokens/s | builtin acc | web loss |\n|---|"), std::string::npos) << report;
  EXPECT_NE(report.find("| 0.528 ± 0.032 | 3.9000 |\n"), std::string::npos) << report;
  EXPECT_NE(read_file(sweep + "/summary.csv").find(",task_builtin_acc,task_builtin_acc_stderr,task_builtin_acc_norm,"
                                                   "set_web_loss\n"),
            std::string::npos);
}

// Issue 31: a 1000 x 100 x 10-seed grid under --dry-run was still planning
// after 120 s at 1.2 GB. It is refused at once from its axis sizes (exit 2,
// the count and the key that raises the limit), and nothing is created; a
// grid at the limit a file sets is planned.
TEST_F(SweepCli, AGridAboveMaxPointsIsRefusedBeforeItIsPlanned) {
  std::string lrs, batches;
  for (int i = 1; i <= 1000; ++i) lrs += (i > 1 ? ", " : "") + std::to_string(i) + "e-6";
  for (int i = 1; i <= 100; ++i) batches += (i > 1 ? ", " : "") + std::to_string(i);
  const std::string path = g_dir + "/huge.yaml";
  write_file(path, "base: base.yaml\nout_dir: " + out("huge") + "\ngrid:\n  train.lr: [" + lrs +
                       "]\n  train.batch_size: [" + batches + "]\nseeds: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n");
  std::string log;
  EXPECT_EQ(run_keel("sweep " + path + " --dry-run", &log), 2) << log;
  EXPECT_NE(log.find("max_points: the grid has 1000000 points (1000 train.lr x 100 train.batch_size x 10 run.seed), "
                     "more than max_points = 10000 (the default)"),
            std::string::npos)
      << log;
  EXPECT_FALSE(keel::path_exists(out("huge")));

  const std::string small = g_dir + "/limited.yaml";
  write_file(small, "base: base.yaml\nout_dir: " + out("limited") + "\nmax_points: 4\n" +
                        "grid:\n  train.lr: [1e-3, 1e-2]\n  train.batch_size: [2, 4]\n");
  ASSERT_EQ(run_keel("sweep " + small + " --dry-run", &log), 0) << log;
  EXPECT_NE(log.find(": 4 points ("), std::string::npos) << log;
  write_file(small, "base: base.yaml\nout_dir: " + out("limited") + "\nmax_points: 3\n" +
                        "grid:\n  train.lr: [1e-3, 1e-2]\n  train.batch_size: [2, 4]\n");
  EXPECT_EQ(run_keel("sweep " + small + " --dry-run", &log), 2) << log;
  EXPECT_NE(log.find("the grid has 4 points (2 train.lr x 2 train.batch_size), more than max_points = 3;"),
            std::string::npos)
      << log;
}

// Issue 31: a run's files that keel did not write intact are errors naming
// the file and line or key (exit 2), found before any plot script runs: a
// metrics.jsonl line nested a million deep ended in a Python RecursionError
// (exit 1); a null or unparsable summary.json read as "interrupted", and
// {"steps": -5} as "-5/6". A line being written (not JSON yet) still passes.
TEST_F(SweepCli, DamagedRunFilesAreErrorsNamingThemBeforeAnyPlot) {
  const std::string runs = g_dir + "/damaged", cmp = g_dir + "/damaged_cmp";
  const std::string good = "{\"step\": 1, \"loss\": 5.0}\n";
  std::string log;
  auto compare = [&](const std::string& run, const std::string& extra) {
    return run_keel("compare " + runs + "/" + run + extra, &log);
  };
  for (const char* d : {"/deep", "/sum"}) keel::ensure_directory(runs + d);

  write_file(runs + "/deep/metrics.jsonl", good + std::string(1000000, '[') + std::string(1000000, ']') + "\n");
  EXPECT_EQ(compare("deep", " --out " + cmp), 2) << log.substr(0, 2000);
  EXPECT_NE(log.find(runs + "/deep/metrics.jsonl:2: a line of 2000000 bytes"), std::string::npos) << log.substr(0, 2000);
  EXPECT_EQ(log.find("Traceback"), std::string::npos) << log.substr(0, 2000);
  EXPECT_FALSE(keel::path_exists(cmp + "/plots"));
  write_file(runs + "/deep/metrics.jsonl", good + std::string(100, '[') + std::string(100, ']') + "\n");
  EXPECT_EQ(compare("deep", " --out " + cmp), 2) << log;
  EXPECT_NE(log.find(runs + "/deep/metrics.jsonl:2: nested deeper than 64 levels"), std::string::npos) << log;
  write_file(runs + "/deep/metrics.jsonl", good);
  write_file(runs + "/deep/spikes.jsonl", "{\"signal\": \"grad_norm\", \"value\": 3}\n");
  EXPECT_EQ(compare("deep", ""), 2) << log;
  EXPECT_NE(log.find(runs + "/deep/spikes.jsonl:1: the record has no \"step\""), std::string::npos) << log;

  const std::vector<std::pair<std::string, std::string>> summaries = {
      {"null", "summary.json: expected a JSON object, got null"},
      {"{\"stopped_by\": \"completed\", \"ste", "summary.json: not valid JSON"},
      {"{\"stopped_by\": \"completed\", \"steps\": -5}", "summary.json: steps: expected a non-negative whole number, got -5"},
      {"{\"stopped_by\": 7, \"steps\": 5}", "summary.json: stopped_by: expected a string, got 7"},
      {"{\"stopped_by\": \"completed\", \"steps\": 5, \"final_loss\": \"low\"}", "summary.json: final_loss: expected a number"}};
  write_file(runs + "/sum/metrics.jsonl", good);
  for (const auto& [text, says] : summaries) {
    SCOPED_TRACE(text);
    write_file(runs + "/sum/summary.json", text);
    EXPECT_EQ(compare("sum", ""), 2) << log;
    EXPECT_NE(log.find(runs + "/sum/" + says), std::string::npos) << log;
  }
  // Without summary.json the run was interrupted; a torn last line is skipped.
  keel::remove_file(runs + "/sum/summary.json");
  write_file(runs + "/sum/metrics.jsonl", good + "{\"step\": 2, \"lo");
  ASSERT_EQ(compare("sum", ""), 0) << log;
  EXPECT_NE(log.find("| interrupted | 1 |"), std::string::npos) << log;

  // keel report reads the same files through the sweep's manifest.
  const std::string sweep = g_dir + "/damaged_sweep";
  write_one_point_sweep(sweep, "damaged", 6);
  write_file(sweep + "/lr=1e-3/metrics.jsonl", good);
  write_file(sweep + "/lr=1e-3/summary.json", "{\"stopped_by\": \"completed\", \"steps\": -5}");
  EXPECT_EQ(run_keel("report " + sweep + " --no-plots", &log), 2) << log;
  EXPECT_NE(log.find(sweep + "/lr=1e-3/summary.json: steps: expected a non-negative whole number"), std::string::npos)
      << log;
  EXPECT_FALSE(keel::path_exists(sweep + "/report.md"));
  write_file(sweep + "/lr=1e-3/summary.json", "{\"stopped_by\": \"completed\", \"steps\": 6}");
  write_file(sweep + "/lr=1e-3/metrics.jsonl", good + std::string(100, '{') + "\n");
  EXPECT_EQ(run_keel("report " + sweep + " --no-plots", &log), 2) << log;
  EXPECT_NE(log.find(sweep + "/lr=1e-3/metrics.jsonl:2: nested deeper than 64 levels"), std::string::npos) << log;
}
