// kill -9 at random moments, resume after each, and the run must end where an
// uninterrupted one ends, bit for bit (issue 31, "rewind under fire"): with
// AdamW, with Muon, and with monitor.on_spike: rewind and a planted spike, so
// that the rewind happens between two kills. The moments differ every run;
// the seed is printed with any failure (KEEL_CHAOS_SEED=N repeats one).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "checkpoint/safetensors.h"
#include "test_util.h"
#include "util/fs.h"

namespace {

std::string g_dir;
constexpr int64_t kSteps = 24;

void write(const std::string &path, const std::string &text) {
  std::ofstream(path) << text;
}

std::vector<std::string> train_args(const std::string &name,
                                    const std::vector<std::string> &extra) {
  std::vector<std::string> a = {"train", g_dir + "/base.yaml",
                                "--set", "run.out_dir=" + g_dir + "/runs",
                                "--set", "run.name=" + name};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// The step of metrics.jsonl's last complete record (0 if none).
int64_t last_step(const std::string &run) {
  std::ifstream in(run + "/metrics.jsonl");
  int64_t step = 0;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step") &&
        j["step"].is_number_integer())
      step = j["step"].get<int64_t>();
  }
  return step;
}

bool has_rewound(const std::string &run) {
  return keel_test::read_file(run + "/spikes.jsonl")
             .find("\"event\":\"rewind\"") != std::string::npos;
}

std::map<std::string, std::pair<std::vector<int64_t>, std::string>>
final_weights(const std::string &run) {
  char dir[32];
  std::snprintf(dir, sizeof dir, "step_%08lld", static_cast<long long>(kSteps));
  std::map<std::string, std::pair<std::vector<int64_t>, std::string>> out;
  for (auto &[name, t] : keel::read_safetensors(run + "/checkpoints/" + dir +
                                                "/model.safetensors")) {
    auto c = t.contiguous();
    out[name] = {
        c.sizes().vec(),
        std::string(static_cast<const char *>(c.data_ptr()), c.nbytes())};
  }
  return out;
}

std::map<int64_t, double> losses(const std::string &run) {
  std::map<int64_t, double> out;
  std::ifstream in(run + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss") && j["loss"].is_number())
      out[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return out;
}

unsigned chaos_seed() {
  if (const char *s = std::getenv("KEEL_CHAOS_SEED"))
    return static_cast<unsigned>(std::strtoul(s, nullptr, 10));
  return static_cast<unsigned>(
      std::chrono::system_clock::now().time_since_epoch().count());
}

class Chaos : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    g_dir = keel_test::make_temp_dir("chaos");
    write(g_dir + "/corpus.txt", keel_test::make_sentence_corpus(3, 400));
    write(g_dir + "/base.yaml",
          "model: {vocab_size: 320, max_seq_len: 32, d_model: 32, n_layers: 2, "
          "n_heads: 2, n_kv_heads: 1}\n"
          "data: {dir: " +
              g_dir + "/data, sources: [" + g_dir +
              "/corpus.txt], doc_separator: '%', "
              "val_fraction: 0.1}\n"
              "train: {max_steps: " +
              std::to_string(kSteps) +
              ", batch_size: 4, lr: 3.0e-3, warmup_steps: 2, "
              "log_every: 1, eval_every: 0, threads: 1}\n"
              "checkpoint: {every: 3, keep_last: 3}\n"
              "monitor: {every: 4, sequences: 2}\n");
    std::string
        out; // prepare once, so no run's first kill lands in a shared data.dir
    keel_test::run_keel("prepare " + g_dir + "/base.yaml --quiet", &out);
  }
  static void TearDownTestSuite() { keel::remove_tree(g_dir); }

  // The uninterrupted run, then the same run killed at `kills.size()` random
  // moments (each at or after the step drawn for it, plus 0-40 ms) and resumed
  // after each; `after_rewind` holds back a kill until the rewind is on disk.
  void run_chaos(const std::string &name, const std::vector<std::string> &extra,
                 std::vector<std::pair<int, int>> kills,
                 bool rewind_between_kills = false) {
    const unsigned seed = chaos_seed();
    SCOPED_TRACE("KEEL_CHAOS_SEED=" + std::to_string(seed));
    std::mt19937 rng(seed);
    const std::string log = g_dir + "/" + name + ".log";
    ASSERT_EQ(keel_test::wait_exit(keel_test::spawn_keel(
                  train_args(name + "_straight", extra), log)),
              0)
        << keel_test::read_file(log);

    const std::string run = g_dir + "/runs/" + name;
    std::vector<std::string> first = train_args(name, extra), again = first;
    again.insert(again.end(), {"--resume", "auto"});
    bool started = false;
    int done_kills = 0;
    for (size_t k = 0; k < kills.size(); ++k) {
      const int64_t target = std::uniform_int_distribution<int>(
          kills[k].first, kills[k].second)(rng);
      const int delay_ms = std::uniform_int_distribution<int>(0, 40)(rng);
      const pid_t pid = keel_test::spawn_keel(started ? again : first, log);
      started = true;
      const bool need_rewind = rewind_between_kills && k + 1 == kills.size();
      const auto deadline =
          std::chrono::steady_clock::now() + std::chrono::seconds(120);
      int status = 0;
      bool exited = false;
      while (!exited && std::chrono::steady_clock::now() < deadline) {
        exited = waitpid(pid, &status, WNOHANG) == pid;
        if (exited ||
            (last_step(run) >= target && (!need_rewind || has_rewound(run))))
          break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (!exited) {
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
      }
      // A run that reached its end before the kill landed is a kill that
      // missed (a fast machine), not a failure; anything else is.
      const int code =
          WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      ASSERT_TRUE(code == 128 + SIGKILL || code == 0)
          << "kill " << k << " at step " << target << " + " << delay_ms
          << " ms: exit " << code << "\n"
          << keel_test::read_file(log);
      if (code == 128 + SIGKILL)
        ++done_kills;
      std::printf(
          "[chaos] %s kill %zu: step >= %lld + %d ms -> %s at step %lld\n",
          name.c_str(), k, static_cast<long long>(target), delay_ms,
          code == 0 ? "missed (run finished)" : "killed",
          static_cast<long long>(last_step(run)));
    }
    ASSERT_GE(done_kills, static_cast<int>(kills.size()) - 1)
        << "most kills must land before the run ends";
    ASSERT_EQ(keel_test::wait_exit(keel_test::spawn_keel(again, log)), 0)
        << keel_test::read_file(log);

    const auto a = final_weights(g_dir + "/runs/" + name + "_straight"),
               b = final_weights(run);
    ASSERT_FALSE(a.empty());
    ASSERT_EQ(a.size(), b.size());
    for (const auto &[tensor, value] : a) {
      ASSERT_TRUE(b.count(tensor)) << tensor;
      EXPECT_TRUE(value == b.at(tensor))
          << tensor << " differs after " << kills.size() << " kills";
    }
    EXPECT_EQ(losses(g_dir + "/runs/" + name + "_straight"), losses(run));
    if (rewind_between_kills) {
      EXPECT_TRUE(has_rewound(g_dir + "/runs/" + name + "_straight"));
      EXPECT_TRUE(has_rewound(run));
    }
  }
};

TEST_F(Chaos, AdamWEndsBitIdenticalAfterRandomKills) {
  run_chaos("adamw", {}, {{1, 7}, {8, 15}, {16, 22}});
}

TEST_F(Chaos, MuonEndsBitIdenticalAfterRandomKills) {
  run_chaos("muon", {"--set", "train.optimizer=muon", "--set", "train.lr=0.02"},
            {{1, 7}, {8, 15}, {16, 22}});
}

// The planted 10x loss in step 10's batch sends the run back to step 9's
// checkpoint; one kill lands before it, the next only once the rewind is
// recorded, so the resumed run must carry the skipped batch on.
TEST_F(Chaos, RewindBetweenKillsEndsBitIdentical) {
  setenv("KEEL_FAULT_INJECT", "loss_x10_at_step:10", 1);
  run_chaos("rewind",
            {"--set", "monitor.spike_window=8", "--set",
             "monitor.spike_warmup=4", "--set", "monitor.spike_threshold=20",
             "--set", "monitor.diverge_loss_factor=100", "--set",
             "monitor.on_spike=rewind"},
            {{2, 8}, {11, 20}}, /*rewind_between_kills=*/true);
  unsetenv("KEEL_FAULT_INJECT");
}

} // namespace
