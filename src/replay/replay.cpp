#include "replay/replay.h"

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <map>
#include <sstream>
#include <thread>

#include "checkpoint/checkpoint_store.h"
#include "analysis/run_files.h"
#include "analysis/sweep_report.h"
#include "train/run_dir.h"
#include "util/child_process.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/text.h"

namespace keel {

const std::vector<std::string>& replay_branch_names() {
  static const std::vector<std::string> names = {"identical", "skip", "reorder", "lr_half", "precision"};
  return names;
}

RunCompute read_run_compute(const std::string& run_dir) {
  RunCompute c;
  const std::string path = run_dir + "/compute.json";
  if (!path_exists(path)) return c;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_small_file(path, 1u << 16));
  } catch (const nlohmann::json::exception& e) {
    throw RunDirError(path + ": not JSON (" + std::string(e.what()).substr(0, 200) + ")");
  }
  const auto device = j.is_object() ? j.value("device", std::string()) : std::string();
  const auto precision = j.is_object() ? j.value("precision", std::string()) : std::string();
  if ((device != "cuda" && device != "cpu") || (precision != "bf16" && precision != "fp32" && precision != "fp64"))
    throw RunDirError(path + ": expected {\"device\": \"cpu\" or \"cuda\", \"precision\": \"bf16\", \"fp32\" "
                      "or \"fp64\"}");
  c.known = true;
  c.cuda = device == "cuda";
  c.precision = precision;
  return c;
}

std::vector<ReplayBranch> replay_branches(const Config& run, const RunCompute& compute, int64_t from, int64_t step,
                                          int64_t skip_batches, const std::vector<std::string>& wanted) {
  const auto& names = replay_branch_names();
  ConfigErrors errors;
  for (const auto& w : wanted)
    if (std::find(names.begin(), names.end(), w) == names.end())
      errors.add("--branches", "unknown branch '" + w + "' (branches: identical, skip, reorder, lr_half, precision)");
  if (!errors.empty()) throw ConfigError(errors);
  std::vector<ReplayBranch> out;
  for (const auto& name : names) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), name) == wanted.end()) continue;
    ReplayBranch b;
    b.name = name;
    if (name == "identical") {
      b.what = "nothing: the run's batches, settings and state";
    } else if (name == "skip") {
      const int64_t batches = skip_batches > 0 ? skip_batches : step - from;
      b.what = strf("%lld batch(es) after step %lld skipped (through the spike's)", static_cast<long long>(batches),
                    static_cast<long long>(from));
      b.fork_skips.push_back(strf("%lld:%lld", static_cast<long long>(from), static_cast<long long>(batches)));
    } else if (name == "reorder") {
      const int64_t seed = run.run.seed + 1;
      b.what = "another data order from the checkpoint on (run.seed " + std::to_string(run.run.seed) + " -> " +
               std::to_string(seed) + ")";
      b.sets.push_back("run.seed=" + std::to_string(seed));
      b.fork_changes.push_back("run.seed");
    } else if (name == "lr_half") {
      b.what = strf("train.lr %g -> %g and train.min_lr %g -> %g from the checkpoint on", run.train.lr, run.train.lr / 2,
                    run.train.min_lr, run.train.min_lr / 2);
      b.sets.push_back(strf("train.lr=%.17g", run.train.lr / 2));
      b.sets.push_back(strf("train.min_lr=%.17g", run.train.min_lr / 2));
      b.fork_changes.insert(b.fork_changes.end(), {"train.lr", "train.min_lr"});
    } else if (name == "precision") {
      // What the run computed in, not what its config says: "auto" is bf16
      // on a GPU and fp32 on the CPU, and only the run knew where it ran.
      const bool unresolved = run.train.device == DeviceChoice::automatic || run.train.precision == Precision::automatic;
      const bool cuda = compute.known ? compute.cuda : run.train.device == DeviceChoice::cuda;
      const bool bf16 = compute.known ? compute.precision == "bf16" : run.train.precision == Precision::bf16;
      if (!compute.known && unresolved && run.train.precision != Precision::bf16) {
        b.unavailable = "the run's config says train.device / train.precision auto and the run has no compute.json "
                        "saying what that was (an older keel): set the precision branch's run apart by hand";
      } else if (bf16) {
        b.what = "fp32 instead of bf16 autocast";
        b.sets.push_back("train.precision=fp32");
      } else if (compute.known ? compute.precision == "fp64" : run.train.precision == Precision::fp64) {
        b.unavailable = "the run is fp64 already";
      } else if (cuda) {
        b.unavailable = "the run is fp32 on a GPU, where keel has no higher precision (fp64 is CPU only)";
      } else {
        b.what = "fp64 instead of fp32 (CPU): weights, optimizer state and every computation";
        b.sets.push_back("train.precision=fp64");
      }
      b.fork_changes.push_back("train.precision");
    }
    out.push_back(b);
  }
  return out;
}

namespace {

// step -> training loss, for steps in [first, last].
std::map<int64_t, double> losses_between(const std::string& run_dir, int64_t first, int64_t last) {
  std::map<int64_t, double> out;
  for_each_log_record(run_dir + "/metrics.jsonl", [&](const nlohmann::json& r) {
    const int64_t s = json_int<int64_t>(r["step"]);
    if (s >= first && s <= last && r.contains("loss")) out[s] = r["loss"].is_number() ? r["loss"].get<double>() : NAN;
  });
  return out;
}

// Runs `args` with its output to `log_path`; returns its exit code.
int run_child(const std::vector<std::string>& args, const std::string& log_path) {
  const pid_t pid = start_logged_child(args, log_path);  // a replay killed with -9 stops its branch too
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return exit_code_of(status);
}

std::string comma_list(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// "loss at 25 (z 66.8), grad_norm at 25 (z 45.4)": the first four, then how many in all.
std::string spike_text(const std::vector<nlohmann::json>& spikes) {
  std::string out;
  for (size_t i = 0; i < spikes.size() && i < 4; ++i)
    out += (out.empty() ? "" : ", ") + strf("%s at %lld (z %.1f)", spikes[i].value("signal", std::string("?")).c_str(),
                                          static_cast<long long>(json_int<int64_t>(spikes[i]["step"])),
                                          spikes[i].value("z", static_cast<double>(NAN)));
  if (spikes.size() > 4) out += strf(", ... (%zu in all)", spikes.size());
  return out.empty() ? "-" : out;
}

// What the branches say together, in plain words.
// `diverged`: branches whose loss diverged anyway; `first_step`: the spike is
// at the first step after the checkpoint, whose gradient no branch setting
// but the data can change.
std::string reading(const std::map<std::string, bool>& reproduced, const std::map<std::string, bool>& diverged,
                    bool first_step) {
  auto has = [&](const std::string& b) { return reproduced.count(b) > 0; };
  auto did = [&](const std::string& b) { return has(b) && reproduced.at(b); };
  std::string m;
  if (has("identical") && !did("identical"))
    return "- The identical branch did not reproduce the spike: from the same checkpoint, batches and settings it "
           "did not come back, so no conclusion about its cause can rest on the other branches. Something outside "
           "the checkpoint differed (nondeterministic kernels, a different thread count or machine), or the spike "
           "was marginal for the detector.\n";
  if (did("identical")) m += "- The identical branch reproduced it: the spike follows from the checkpoint, the batches and the settings.\n";
  size_t changed = 0, gone = 0;
  for (const auto& [name, again] : reproduced)
    if (name != "identical") ++changed, gone += !again;
  if (did("identical") && changed >= 3 && gone == changed)
    m += "- Every change removed it, down to rounding: the spike belongs to this exact trajectory, as PaLM found "
         "of its spikes, and no single branch below names its cause. Read each line with that in mind.\n";
  if (has("skip")) {
    if (did("skip"))
      m += "- Skipping the batches from the checkpoint through the spike did not remove it: its cause was already in "
           "the state at the checkpoint (weights or optimizer moments), not in those batches.\n";
    else
      m += "- Skipping the batches from the checkpoint through the spike removed it: the data caused it.\n";
    if (!did("skip") && diverged.count("skip") && diverged.at("skip"))
      m += "- But the skip branch diverged all the same: the spike was one symptom of a run that was going to "
           "diverge, not the cause of its divergence.\n";
  }
  if (has("reorder"))
    m += did("reorder") ? "- Another data order spiked too: with the skip branch, a sign that the state at the checkpoint "
                          "would have spiked on other data as well.\n"
                        : "- Another data order did not spike.\n";
  if (first_step && (has("lr_half") || has("precision")))
    m += "- The spike is at the first step after the checkpoint, whose gradient comes from the checkpoint's weights "
         "and its batch alone: halving the LR cannot change it, and higher precision only by rounding. Replay "
         "from an earlier checkpoint (--from) to test them.\n";
  if (has("lr_half"))
    m += did("lr_half") ? "- Half the learning rate still spiked.\n" : "- Half the learning rate did not spike.\n";
  if (has("precision"))
    m += did("precision") ? "- Higher precision still spiked: rounding was not the cause.\n"
                          : "- Higher precision did not spike: rounding took part in it.\n";
  return m;
}

}  // namespace

std::vector<nlohmann::json> spikes_between(const std::string& run_dir, int64_t first, int64_t last) {
  std::vector<nlohmann::json> out;
  for_each_log_record(run_dir + "/spikes.jsonl", [&](const nlohmann::json& r) {
    const int64_t s = json_int<int64_t>(r["step"]);
    if (s >= first && s <= last) out.push_back(r);
  });
  return out;
}

bool reproduces(const std::vector<nlohmann::json>& branch_spikes, const std::vector<std::string>& signals) {
  for (const auto& s : branch_spikes)
    if (std::find(signals.begin(), signals.end(), s.value("signal", std::string())) != signals.end()) return true;
  return false;
}

ReplayStart replay_start(const std::string& run_dir_in, int64_t step, int64_t from_step) {
  ReplayStart start;
  std::string run_dir = run_dir_in;
  while (run_dir.size() > 1 && run_dir.back() == '/') run_dir.pop_back();
  const std::string config_path = run_dir + "/config.yaml";
  if (!path_exists(config_path))
    throw RunDirError(run_dir + " is not a keel run directory (no config.yaml); give the directory keel train wrote");
  // A live run prunes its checkpoints and appends to its logs: replay a run at rest.
  if (dir_is_locked(run_dir))
    throw RunDirError(run_dir + " is still being trained by another process; replay it once it has stopped");
  const Config cfg = load_config(config_path);
  if (step > cfg.train.end_step())
    throw RunDirError(strf("--step %lld is past the run's %s (%lld)", static_cast<long long>(step),
                           cfg.train.cooldown_steps > 0 ? "last step, train.cooldown_at + cooldown_steps"
                                                        : "train.max_steps",
                           static_cast<long long>(cfg.train.end_step())));
  check_run_logs(run_dir);

  // The newest valid checkpoint before the spike.
  CheckpointStore store(run_dir);
  int64_t from = -1;
  std::string from_dir, steps_on_disk;
  for (const auto& [s, dir] : store.list_valid(VerifyLevel::sizes)) {
    steps_on_disk += (steps_on_disk.empty() ? "" : ", ") + std::to_string(s);
    if (from_step >= 0 ? s == from_step : s < step && s > from) {
      from = s;
      from_dir = dir;
    }
  }
  if (from_step >= 0 && (from < 0 || from_step >= step))
    throw RunDirError(strf("--from %lld: %s has no valid checkpoint of that step before step %lld (checkpoints at: %s)",
                           static_cast<long long>(from_step), run_dir.c_str(), static_cast<long long>(step),
                           steps_on_disk.empty() ? "none" : steps_on_disk.c_str()));
  if (from < 0)
    throw RunDirError(strf("no valid checkpoint of %s before step %lld (checkpoints at: %s); a replay forks from one, so "
                           "train with checkpoint.every below the spike's step (and checkpoint.keep_last or keep_every "
                           "keeping it)", run_dir.c_str(), static_cast<long long>(step),
                           steps_on_disk.empty() ? "none" : steps_on_disk.c_str()));
  start.run_dir = run_dir;
  start.cfg = cfg;
  start.from = from;
  start.dir = from_dir;
  return start;
}

int run_replay(const ReplayOptions& o) {
  ConfigErrors errors;
  if (o.step < 1) errors.add("--step", "must be a training step, 1 or more");
  if (o.steps < 1) errors.add("--steps", "must be 1 or more: the steps each branch runs past the spike");
  if (o.skip_batches < 0) errors.add("--skip-batches", "must be 0 (through the spike) or more");
  if (!errors.empty()) throw ConfigError(errors);
  const ReplayStart start = replay_start(o.run_dir, o.step, o.from);
  const std::string& run_dir = start.run_dir;
  const Config& cfg = start.cfg;
  const int64_t from = start.from;
  const std::string& from_dir = start.dir;
  const std::string config_path = run_dir + "/config.yaml";
  const int64_t last = o.step + o.steps;
  const std::vector<ReplayBranch> branches =
      replay_branches(cfg, read_run_compute(run_dir), from, o.step, o.skip_batches, o.branches);

  // What the run itself recorded.
  const std::vector<nlohmann::json> original = spikes_between(run_dir, o.step, o.step);
  std::vector<std::string> signals;
  for (const auto& s : original) signals.push_back(s.value("signal", std::string()));
  if (signals.empty()) {
    std::fprintf(stderr, "keel replay: %s recorded no spike at step %lld (spikes.jsonl); the branches are checked for "
                         "a loss spike after step %lld\n", run_dir.c_str(), static_cast<long long>(o.step),
                 static_cast<long long>(from));
    signals.push_back("loss");
  }

  const std::string out = run_dir + "/branches/replay-" + std::to_string(o.step);
  ensure_directory(out);
  const int threads = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  const std::string exe = self_exe();
  std::printf("replay %s: the spike at step %lld, from checkpoint %lld, %zu branch(es) to step %lld, into %s\n",
              run_dir.c_str(), static_cast<long long>(o.step), static_cast<long long>(from), branches.size(),
              static_cast<long long>(last), out.c_str());
  nlohmann::json result = {{"format", "keel-replay"},
                           {"version", 1},
                           {"run_dir", run_dir},
                           {"step", o.step},
                           {"steps", o.steps},
                           {"checkpoint_step", from},
                           {"checkpoint", from_dir},
                           {"signals", signals},
                           {"original_spikes", spikes_between(run_dir, from + 1, last)},
                           {"branches", nlohmann::json::array()}};
  nlohmann::json losses = {{"original", nlohmann::json::object()}};
  for (const auto& [s, l] : losses_between(run_dir, from + 1, last)) losses["original"][std::to_string(s)] = l;
  int code = exit_code::ok;
  std::map<std::string, bool> reproduced, diverged;
  std::string rows;
  for (size_t i = 0; i < branches.size(); ++i) {
    const ReplayBranch& b = branches[i];
    nlohmann::json rec = {{"name", b.name}, {"what", b.what}};
    if (!b.unavailable.empty()) {
      std::printf("  %-10s not run: %s\n", b.name.c_str(), b.unavailable.c_str());
      rec["unavailable"] = b.unavailable;
      result["branches"].push_back(rec);
      rows += "| " + b.name + " | not run: " + b.unavailable + " | - | - | - | - | - |\n";
      continue;
    }
    const std::string dir = out + "/" + b.name;
    if (path_exists(dir)) {  // an earlier replay's branch: replaced, if it is keel's own run
      if (const std::string why = why_not_replaceable_run(dir); !why.empty())
        throw RunDirError("refusing to replace " + dir + ": " + why + "; move it away first");
      remove_tree(dir);
    }
    ensure_directory(dir);
    std::vector<std::string> args = {exe, "train", config_path, "--set", "run.out_dir=" + out, "--set", "run.name=" + b.name,
                                     "--set", "train.threads=" + std::to_string(threads), "--set", "monitor.on_spike=none",
                                     "--set", "monitor.skip_on_spike=false", "--set", "checkpoint.keep_last=1"};
    for (const auto& s : b.sets) args.insert(args.end(), {"--set", s});
    args.insert(args.end(), {"--resume", from_dir, "--stop-after-step", std::to_string(last)});
    for (const auto& k : b.fork_changes) args.insert(args.end(), {"--fork-change", k});
    for (const char* k : {"monitor.on_spike", "monitor.skip_on_spike"}) args.insert(args.end(), {"--fork-change", k});
    for (const auto& s : b.fork_skips) args.insert(args.end(), {"--fork-skip", s});
    std::printf("  [%zu/%zu] %-10s %s ...\n", i + 1, branches.size(), b.name.c_str(), b.what.c_str());
    std::fflush(stdout);
    const int rc = run_child(args, dir + "/stdout.log");
    rec["exit_code"] = rc;
    if (rc != exit_code::ok && rc != exit_code::stopped) {
      code = exit_code::sweep_failed;
      rec["failed"] = true;
      result["branches"].push_back(rec);
      std::fprintf(stderr, "keel replay: branch %s failed with exit code %d; see %s/stdout.log\n", b.name.c_str(), rc,
                   dir.c_str());
      rows += "| " + b.name + " | " + b.what + " | failed (exit " + std::to_string(rc) + ") | - | - | - | - |\n";
      continue;
    }
    check_run_logs(dir);
    const auto spikes = spikes_between(dir, from + 1, last);
    const bool again = reproduces(spikes, signals);
    reproduced[b.name] = again;
    const auto branch_losses = losses_between(dir, from + 1, last);
    double max_loss = NAN, at_spike = NAN;
    for (const auto& [s, l] : branch_losses) {
      if (!(max_loss >= l)) max_loss = l;
      losses[b.name][std::to_string(s)] = l;
    }
    if (branch_losses.count(o.step)) at_spike = branch_losses.at(o.step);
    const nlohmann::json summary = path_exists(dir + "/summary.json") ? read_summary_json(dir + "/summary.json")
                                                                      : nlohmann::json::object();
    const std::string stopped = summary.value("stopped_by", std::string("?"));
    diverged[b.name] = summary.value("diverged", false);
    rec.update({{"reproduced", again}, {"spikes", spikes}, {"loss_at_step", at_spike}, {"max_loss", max_loss},
                {"stopped_by", stopped}});
    result["branches"].push_back(rec);
    std::printf("  %-10s %s (%s)\n", b.name.c_str(), again ? "spiked again" : "no spike", spike_text(spikes).c_str());
    rows += "| " + b.name + " | " + b.what + " | " + (again ? "**yes**" : "no") + " | " + spike_text(spikes) + " | " +
            md_cell(at_spike) + " | " + md_cell(max_loss) + " | " + stopped + " |\n";
  }
  result["losses"] = losses;
  write_file_atomic(out + "/replay.json", result.dump(2) + "\n");

  std::string note;
  std::vector<std::string> plots;
  int plot_code = 0;
  if (o.plots)
    plot_code = draw_plots("scripts/plots/plot_replay.py", {out + "/replay.json", out}, out, o.python, {"replay"}, &plots, &note);
  const auto original_losses = losses_between(run_dir, o.step, o.step);
  std::string md = "# Replay of the spike at step " + std::to_string(o.step) + "\n\n";
  md += "Run `" + run_dir + "`, forked from its checkpoint at step " + std::to_string(from) + " (`" + from_dir +
        "`); every branch trains to step " + std::to_string(last) + " (" + std::to_string(o.steps) +
        " past the spike) with the run's spike detector, restored from the checkpoint, and `monitor.on_spike: none`. "
        "A branch reproduces the spike when that detector flags " + comma_list(signals) + " after step " +
        std::to_string(from) + ". Command: `keel replay " + run_dir + " --step " + std::to_string(o.step) + " --steps " +
        std::to_string(o.steps) + (o.from >= 0 ? " --from " + std::to_string(o.from) : std::string()) + "`.\n\n";
  md += "The run itself: " + spike_text(result["original_spikes"].get<std::vector<nlohmann::json>>()) +
        "; loss at step " + std::to_string(o.step) + ": " +
        md_cell(original_losses.count(o.step) ? original_losses.at(o.step) : NAN) + ".\n\n";
  md += "| branch | what it changes | spike again | spikes after the checkpoint | loss at step " +
        std::to_string(o.step) + " | largest loss | stopped by |\n|---|---|---|---|---|---|---|\n" + rows + "\n";
  md += "## Reading\n\n" + reading(reproduced, diverged, o.step == from + 1) + "\n";
  md += "A loss is the training loss logged at that step (every `train.log_every` steps); a branch that diverged stops "
        "there (`monitor.stop_on_divergence`).\n";
  if (!plots.empty()) md += "\n![replay](plots/replay.png)\n";
  else if (!note.empty()) md += "\n" + note + "\n";
  write_file_atomic(out + "/replay.md", md);
  std::printf("replay: %s/replay.md, %s/replay.json%s\n", out.c_str(), out.c_str(),
              plots.empty() ? "" : (", " + out + "/plots/replay.png").c_str());
  return code != exit_code::ok ? code : plot_code;
}

}  // namespace keel
