#include "sweep/sweep_runner.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sched.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "data/prepare.h"
#include "sweep/point_source.h"
#include "sweep/sweep_manifest.h"
#include "train/run_dir.h"
#include "util/child_process.h"
#include "util/dir_lock.h"
#include "util/fs.h"
#include "util/host.h"
#include "util/log.h"
#include "util/text.h"
#include "util/utf8.h"
#include "util/json.h"

extern char** environ;

namespace keel {

namespace {

volatile sig_atomic_t g_sweep_signal = 0;
void on_sweep_signal(int sig) { g_sweep_signal = sig; }

using Clock = std::chrono::steady_clock;


// The step of the last record in a run's metrics.jsonl (0 if none), read
// from the file's tail so that long runs cost nothing.
int64_t last_logged_step(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return 0;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from = size > 65536 ? size - 65536 : 0;
  in.seekg(from);
  std::string tail(static_cast<size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  size_t end = tail.size();
  while (end > 0) {
    const size_t start = tail.rfind('\n', end - 1 == 0 ? 0 : end - 2);
    const std::string line = tail.substr(start == std::string::npos ? 0 : start + 1,
                                         end - (start == std::string::npos ? 0 : start + 1));
    auto rec = nlohmann::json::parse(line, nullptr, false);
    // A hostile or torn record is no step: progress, not a reason to stop.
    if (!rec.is_discarded() && rec.is_object() && rec.contains("step") && rec["step"].is_number_integer())
      return json_int<int64_t>(rec["step"]);
    if (start == std::string::npos || start == 0) break;
    end = start;
  }
  return 0;
}

std::string last_lines(const std::string& path, size_t n) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string out;
  for (size_t i = lines.size() > n ? lines.size() - n : 0; i < lines.size(); ++i) out += "\n    " + lines[i];
  return out;
}

struct Running {
  size_t point;
  pid_t pid;
  Clock::time_point started;
  int64_t start_step;   // checkpoint it resumed from
  int64_t step = 0;     // last logged step
};

class Runner {
 public:
  Runner(const SweepSpec& spec, std::vector<SweepPoint>& points, const SweepOptions& options, int threads, Logger& log)
      : spec_(spec), points_(points), opts_(options), threads_(threads), log_(log), exe_(self_exe()) {}

  // Runs what `source` hands out until it has nothing left; returns the exit code.
  // already_done / already_diverged: points finished (and of them, diverged)
  // in earlier sessions, so a resumed sweep's counts are the sweep's.
  int run(PointSource& source, size_t already_done, size_t already_diverged = 0) {
    source_ = &source;
    done_ = already_done;
    already_done_ = already_done;
    diverged_ = already_diverged;
    struct sigaction sa {};
    sa.sa_handler = on_sweep_signal;
    sigemptyset(&sa.sa_mask);
    struct sigaction old_int {}, old_term {};
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    start_ = Clock::now();
    bool forwarded = false;
    auto last_progress = Clock::now();
    while (true) {
      if (g_sweep_signal && !forwarded) {
        forwarded = true;
        log_.warn(strf("signal %d: asking %zu running point(s) to checkpoint and stop; re-run the same command to "
                       "continue", static_cast<int>(g_sweep_signal), running_.size()));
        for (const auto& r : running_) kill(r.pid, SIGTERM);
      }
      bool launched = false;
      while (!g_sweep_signal && running_.size() < static_cast<size_t>(opts_.parallel)) {
        const std::optional<size_t> i = source.next();
        if (!i) break;
        launch(*i, source.resume_step(*i));
        ++started_;
        launched = true;
      }
      // Nothing running and nothing to start: a grid's queue is empty, or
      // every search has ended (or waits for a point that failed).
      if (running_.empty()) break;
      if (reap() || launched) {
        print_progress();
        last_progress = Clock::now();
      } else if (std::chrono::duration<double>(Clock::now() - last_progress).count() >= opts_.progress_every_s) {
        print_progress();
        last_progress = Clock::now();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (g_sweep_signal) not_started_ = source.waiting();
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    const int sig = g_sweep_signal;
    g_sweep_signal = 0;
    log_.info(strf("sweep %s: %zu/%zu points finished (%zu diverged), %zu failed, %zu interrupted or not started; "
                   "%s this session",
                   spec_.name.c_str(), done_, total(), diverged_, failed_.size(), interrupted_ + not_started_,
                   hms(std::chrono::duration<double>(Clock::now() - start_).count()).c_str()));
    for (const auto& f : failed_) log_.error("failed: " + f);
    if (sig) return exit_code::signal_base + sig;
    // A diverged point is a result of the sweep, not a failure of it.
    return failed_.empty() ? exit_code::ok : exit_code::sweep_failed;
  }

 private:
  void launch(size_t i, int64_t resume_step) {
    const SweepPoint& p = points_[i];
    const std::string dir = spec_.out_dir + "/" + p.name;
    ensure_directory(dir);
    std::vector<std::string> args = {exe_, "train", spec_.base_config};
    for (const auto& o : p.overrides) args.insert(args.end(), {"--set", o});
    args.insert(args.end(), {"--set", "run.out_dir=" + spec_.out_dir, "--set", "run.name=" + p.name, "--set",
                             "train.threads=" + std::to_string(threads_), "--resume", "auto"});
    const pid_t pid = start_logged_child(args, dir + "/stdout.log",
                                         {"OMP_NUM_THREADS=" + std::to_string(threads_),
                                          "MKL_NUM_THREADS=" + std::to_string(threads_)});
    running_.push_back({i, pid, Clock::now(), resume_step, resume_step});
    log_.info(strf("start %s%s (pid %d, %d thread%s): %s", p.name.c_str(),
                   resume_step > 0 ? strf(", resuming at step %lld", static_cast<long long>(resume_step)).c_str() : "",
                   static_cast<int>(pid), threads_, threads_ == 1 ? "" : "s", (dir + "/train.log").c_str()));
  }

  // Collects finished children; true if any.
  bool reap() {
    bool any = false;
    for (size_t k = 0; k < running_.size();) {
      int status = 0;
      const pid_t r = waitpid(running_[k].pid, &status, WNOHANG);
      if (r == 0 || (r < 0 && errno == EINTR)) {
        ++k;
        continue;
      }
      any = true;
      finish(running_[k], status);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(k));
    }
    return any;
  }

  void finish(const Running& r, int status) {
    const SweepPoint& p = points_[r.point];
    const std::string dir = spec_.out_dir + "/" + p.name;
    const double secs = std::chrono::duration<double>(Clock::now() - r.started).count();
    const PointStatus st = point_status(dir);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    const bool result = st.state == PointState::finished && (code == exit_code::ok || code == exit_code::stopped);
    source_->ended(r.point, result);
    if (result) {
      ++done_;
      if (st.loss_diverged()) ++diverged_;
      child_seconds_ += secs;
      child_steps_ += static_cast<double>(std::max<int64_t>(1, st.step - r.start_step));
      log_.info(strf("done  %s: %s at step %lld/%lld in %s", p.name.c_str(), st.stopped_by.c_str(),
                     static_cast<long long>(st.step), static_cast<long long>(p.config.train.max_steps),
                     hms(secs).c_str()));
    } else if (g_sweep_signal && (code == 0 || code >= 128)) {
      ++interrupted_;
      log_.warn(strf("stopped %s at step %lld (%s)", p.name.c_str(),
                     static_cast<long long>(last_logged_step(dir + "/metrics.jsonl")),
                     st.state == PointState::resumable ? "checkpoint kept, resumes on re-run" : "starts over on re-run"));
    } else {
      const std::string what = code == 0 ? "stopped before its end (a signal sent to it alone?); re-run to resume it"
                                         : "exit code " + std::to_string(code);
      const std::string why = p.name + ": " + what + "; last lines of " + dir + "/stdout.log:" +
                              last_lines(dir + "/stdout.log", 6);
      failed_.push_back(why);
      log_.error("point " + why);
    }
  }

  // Points of this sweep as far as known: finished before, started in this
  // session, and still to start (a search adds to them as results come in).
  size_t total() const { return already_done_ + started_ + source_->waiting(); }

  void print_progress() {
    double remaining_steps = source_->remaining_steps();
    std::string running_text;
    for (auto& r : running_) {
      const SweepPoint& p = points_[r.point];
      r.step = std::max(r.step, last_logged_step(spec_.out_dir + "/" + p.name + "/metrics.jsonl"));
      remaining_steps += static_cast<double>(p.config.train.max_steps - r.step);
      running_text += strf("%s%s %lld/%lld", running_text.empty() ? "" : ", ", p.name.c_str(),
                           static_cast<long long>(r.step), static_cast<long long>(p.config.train.max_steps));
    }
    // Seconds per step of one point, from what ran in this session
    // (finished points and the progress of running ones).
    double secs = child_seconds_, steps = child_steps_;
    for (const auto& r : running_) {
      if (r.step <= r.start_step) continue;
      secs += std::chrono::duration<double>(Clock::now() - r.started).count();
      steps += static_cast<double>(r.step - r.start_step);
    }
    const size_t left = total() - done_;
    const double slots = static_cast<double>(std::max<size_t>(1, std::min<size_t>(opts_.parallel, left)));
    const double eta = steps > 0 ? remaining_steps * secs / steps / slots : NAN;
    const std::string extra = source_->progress();
    log_.info(strf("[%s] %zu/%zu done (%zu diverged, %zu failed) | running: %s | %zu waiting | %sETA %s",
                   hms(std::chrono::duration<double>(Clock::now() - start_).count()).c_str(), done_, total(), diverged_,
                   failed_.size(), running_text.empty() ? "-" : running_text.c_str(), source_->waiting(),
                   extra.empty() ? "" : (extra + " | ").c_str(), hms(eta).c_str()));
  }

  const SweepSpec& spec_;
  std::vector<SweepPoint>& points_;  // the source may add to them
  const SweepOptions& opts_;
  int threads_;
  Logger& log_;
  std::string exe_;
  std::vector<Running> running_;
  PointSource* source_ = nullptr;
  Clock::time_point start_;
  size_t done_ = 0, already_done_ = 0, started_ = 0, diverged_ = 0, interrupted_ = 0, not_started_ = 0;
  double child_seconds_ = 0, child_steps_ = 0;
  std::vector<std::string> failed_;
};


// Results of this sweep computed with other settings are never mixed in.
void refuse_conflicts(const Reconciliation& rec, const std::string& out_dir) {
  if (rec.conflicts.empty()) return;
  std::string list;
  for (const auto& c : rec.conflicts) list += "\n  " + c;
  throw RunDirError("refusing to run: " + out_dir + " holds results of this sweep computed with other settings, "
                    "and mixing them would compare incompatible runs. Changed (recorded -> now):" + list +
                    "\nUse another directory (--out DIR), or remove " + out_dir + " to start over.");
}

nlohmann::json read_old_manifest(const std::string& manifest_path) {
  nlohmann::json old_manifest = nlohmann::json::object();
  if (path_exists(manifest_path)) {
    old_manifest = nlohmann::json::parse(read_small_file(manifest_path), nullptr, false);
    if (old_manifest.is_discarded() || old_manifest.value("format", "") != "keel-sweep")
      throw RunDirError(manifest_path + " is not a keel sweep manifest; choose another directory (--out DIR)");
  }
  return old_manifest;
}

// One `keel sweep` invocation, as sweep.json's "sessions" lists it.
nlohmann::json session_record(const SweepOptions& options, int cores, int threads, size_t points_to_run) {
  return {{"started", utc_now()},      {"command", options.command_line}, {"host", host_name()},
          {"cpu", cpu_model()},        {"cpu_isa", cpu_isa()},            {"cores", cores},
          {"parallel", options.parallel}, {"threads_per_point", threads},  {"points_to_run", points_to_run}};
}

[[noreturn]] void usage_error(const std::string& option, const std::string& what) {
  ConfigErrors e;
  e.add(option, what);
  throw ConfigError(e);
}

// `search:` in the sweep file (edge_search.h): the grid's points are groups,
// and each group's points are made as its bisection asks for them.
int run_edge_search(const SweepSpec& spec, const SweepOptions& options) {
  if (!options.only.empty()) usage_error("--only", "does not apply to a sweep with `search:` (its points are not "
                                                   "known in advance); use --set or the sweep file to narrow it");
  const std::vector<SweepPoint> groups = expand_grid(spec);
  const std::string manifest_path = spec.out_dir + "/sweep.json";
  const nlohmann::json old_manifest = read_old_manifest(manifest_path);
  // The points run before (by an earlier search or a grid in this
  // directory), rebuilt with today's settings: any that changed is refused.
  std::vector<SweepPoint> points = reusable_points(spec, groups, old_manifest);
  const Reconciliation rec = reconcile(old_manifest, points);
  refuse_conflicts(rec, spec.out_dir);
  for (const auto& p : points)
    if (dir_is_locked(spec.out_dir + "/" + p.name))
      throw RunDirError("point " + spec.out_dir + "/" + p.name + " is still being trained by another process (a "
                        "child of an earlier keel sweep?); wait for it to stop, then run the sweep again");
  std::vector<EdgeSearchSource::Group> state = search_groups(spec, groups, points, spec.out_dir);

  const EdgeSearchSpec& s = spec.search;
  const std::string plan = strf("%zu group(s), %s searched in [%s, %s] to a factor %s for %s: at most %zu runs per "
                                "group (a log grid at that resolution: %zu)", groups.size(), s.key.c_str(),
                                edge_value_label(s.low).c_str(), edge_value_label(s.high).c_str(),
                                edge_value_label(s.factor).c_str(), s.criterion.c_str(), edge_max_runs(s),
                                edge_grid_runs(s));
  const int cores = available_cores();
  const int threads = options.threads > 0 ? options.threads : std::max(1, cores / options.parallel);
  if (options.dry_run) {
    std::printf("sweep %s: %s; base %s, directory %s\n", spec.name.c_str(), plan.c_str(), spec.base_config.c_str(),
                spec.out_dir.c_str());
    for (const auto& g : state) {
      const EdgeBracket b = edge_bracket(s, g.known);
      std::string next;
      for (double v : next_edge_values(s, g.known)) next += (next.empty() ? "" : ", ") + edge_value_label(v);
      std::printf("  %-32s %zu result(s); %s%s%s\n", spec.axes.empty() ? "all" : g.base.name.c_str(), g.known.size(), edge_state_name(b.state),
                  std::isfinite(b.stable) ? (", trains at " + edge_value_label(b.stable)).c_str() : "",
                  next.empty() ? "" : ("; next: " + next).c_str());
    }
    std::printf("%d thread(s) per point, %d at once\n", threads, options.parallel);
    return 0;
  }
  try {
    (void)make_manifest(spec, points, old_manifest).dump();
  } catch (const nlohmann::json::type_error& e) {
    usage_error(spec.file, std::string("holds a value sweep.json cannot record (JSON is UTF-8 only): ") + e.what());
  }

  DirLock sweep_lock(spec.out_dir, "sweep directory");
  Logger log(spec.out_dir + "/sweep.log");
  log.info(strf("sweep %s: %s; base %s, directory %s", spec.name.c_str(), plan.c_str(), spec.base_config.c_str(),
                spec.out_dir.c_str()));
  size_t results = 0;
  for (const auto& g : state) results += g.known.size();
  log.info(strf("%zu result(s) already in the directory are reused; %d at once, %d thread(s) each (%d cores)", results,
                options.parallel, threads, cores));
  nlohmann::json sessions = old_manifest.value("sessions", nlohmann::json::array());
  sessions.push_back(session_record(options, cores, threads, 0));
  auto write_manifest = [&] {
    nlohmann::json m = make_manifest(spec, points, old_manifest);
    m["sessions"] = sessions;
    write_file_atomic(manifest_path, m.dump(2) + "\n");
  };
  write_manifest();
  std::set<std::string> prepared;
  for (const auto& g : groups)
    if (prepared.insert(g.config.data.dir).second) ensure_prepared(g.config);

  const auto t0 = Clock::now();
  const size_t points_before = points.size();
  EdgeSearchSource source(spec, spec.out_dir, points, std::move(state), write_manifest);
  Runner runner(spec, points, options, threads, log);
  int code = runner.run(source, 0);
  for (const auto& g : source.groups()) {
    const EdgeBracket b = edge_bracket(s, g.known);
    log.info(strf("edge %s: %s%s (%zu run(s))%s", spec.axes.empty() ? "all" : g.base.name.c_str(), edge_state_name(b.state),
                  b.state == EdgeState::found ? strf(", trains at %s, not at %s", edge_value_label(b.stable).c_str(),
                                                     edge_value_label(b.unstable).c_str()).c_str() : "",
                  g.known.size(), g.stuck.empty() ? "" : ("; stopped short: " + g.stuck).c_str()));
    // A group left short by something other than a failed run (a refused
    // directory, an invalid value) is a failure of the sweep too.
    if (!g.stuck.empty() && code == exit_code::ok) code = exit_code::sweep_failed;
  }
  if (code == 0) log.info("report: keel report " + spec.out_dir);
  sessions.back()["points_to_run"] = points.size() - points_before;  // made by this session's search
  sessions.back()["finished"] = utc_now();
  sessions.back()["wall_s"] = std::chrono::duration<double>(Clock::now() - t0).count();
  sessions.back()["exit_code"] = code;
  write_manifest();
  return code;
}
}  // namespace

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int run_sweep(const std::string& sweep_file, const SweepOptions& options) {
  SweepSpec spec = load_sweep_spec(sweep_file, options.overrides);
  if (!options.out_dir.empty()) spec.out_dir = options.out_dir;
  while (spec.out_dir.size() > 1 && spec.out_dir.back() == '/') spec.out_dir.pop_back();
  if (options.parallel < 1) usage_error("--parallel", "must be at least 1");
  if (options.threads < 0) usage_error("--threads", "must be 0 (cores / --parallel) or more");
  // Every point's run.out_dir, which keel train refuses unless it is UTF-8:
  // refused here, before a directory is made (keel sweep checks --out too).
  if (const size_t bad = first_invalid_utf8(spec.out_dir); bad != std::string::npos)
    usage_error(options.out_dir.empty() ? "out_dir (" + spec.file + ")" : "--out",
                "is not valid UTF-8 (byte " + std::to_string(bad) + "); use a UTF-8 directory name");
  if (spec.has_search) return run_edge_search(spec, options);
  std::vector<SweepPoint> points = expand_grid(spec);

  // What the directory already holds.
  const std::string manifest_path = spec.out_dir + "/sweep.json";
  const nlohmann::json old_manifest = read_old_manifest(manifest_path);
  Reconciliation rec = reconcile(old_manifest, points);
  // A point directory the manifest does not know (sweep.json deleted, or
  // the directory made by hand) is compared through its own config.yaml.
  std::map<std::string, const SweepPoint*> by_name;  // a lookup per point, not a scan: planning stays linear
  for (const auto& p : points) by_name.emplace(p.name, &p);
  for (const auto& name : rec.added) {
    const std::string cfg = spec.out_dir + "/" + name + "/config.yaml";
    if (!path_exists(cfg)) continue;
    const SweepPoint& point = *by_name.at(name);
    const FlatConfig on_disk = result_config(load_config(cfg)), now = result_config(point.config);
    for (const auto& [k, v] : on_disk) {
      auto it = now.find(k);
      if (it != now.end() && it->second != v)
        rec.conflicts.push_back(k + ": " + v + " -> " + it->second + " (" + name + ", from its config.yaml)");
    }
  }
  refuse_conflicts(rec, spec.out_dir);

  // Which points this invocation runs.
  std::vector<size_t> selected;
  for (size_t i = 0; i < points.size(); ++i) {
    bool match = options.only.empty();
    for (const auto& pattern : options.only) match = match || fnmatch(pattern.c_str(), points[i].name.c_str(), 0) == 0;
    if (match) selected.push_back(i);
  }
  if (selected.empty())
    usage_error("--only", "matches none of the sweep's " + std::to_string(points.size()) + " points (see --dry-run)");

  const int cores = available_cores();
  const int threads = options.threads > 0 ? options.threads : std::max(1, cores / options.parallel);
  std::vector<size_t> queue;
  std::map<size_t, int64_t> resume_steps;
  size_t finished = 0, finished_diverged = 0;
  std::vector<std::string> state_lines;
  std::vector<std::string> refused;  // points whose directory starting over would empty, but is not keel's
  for (size_t i : selected) {
    const std::string dir = spec.out_dir + "/" + points[i].name;
    const PointStatus st = point_status(dir);
    std::string what;
    if (st.state == PointState::finished) {
      ++finished;
      if (st.loss_diverged()) ++finished_diverged;
      what = st.stopped_by + " at step " + std::to_string(st.step);
    } else if (st.state == PointState::resumable) {
      queue.push_back(i);
      resume_steps[i] = st.step;
      what = "resume from step " + std::to_string(st.step);
    } else {
      queue.push_back(i);
      what = path_exists(dir) ? "start over (no valid checkpoint)" : "to run";
      if (const std::string why = why_not_replaceable_run(dir); !why.empty()) {
        refused.push_back(dir + ": " + why);
        what = "refused: " + why;
      }
    }
    state_lines.push_back(strf("  %-32s %s", points[i].name.c_str(), what.c_str()));
  }

  std::string axes_text;
  for (const auto& a : spec.axes)
    axes_text += (axes_text.empty() ? "" : " x ") + std::to_string(a.values.size()) + " " + (a.key == "variant" ? "variants" : a.key);
  if (options.dry_run) {
    std::printf("sweep %s: %zu points (%s), base %s, directory %s\n", spec.name.c_str(), points.size(),
                axes_text.c_str(), spec.base_config.c_str(), spec.out_dir.c_str());
    for (const auto& line : state_lines) std::printf("%s\n", line.c_str());
    std::printf("%zu finished, %zu to run (%zu resuming); %d thread(s) per point, %d at once\n", finished, queue.size(),
                resume_steps.size(), threads, options.parallel);
    if (!old_manifest.empty())
      std::printf("sweep.json: %zu points with the same settings reused, %zu new, %zu no longer in the sweep file\n",
                  rec.reused.size(), rec.added.size(), rec.retired.size());
    return 0;
  }

  // sweep.json holds only UTF-8: a value that is not (the sweep's name, a
  // string its `set` gives) is refused before anything is created.
  try {
    (void)make_manifest(spec, points, old_manifest).dump();
  } catch (const nlohmann::json::type_error& e) {
    usage_error(spec.file, std::string("holds a value sweep.json cannot record (JSON is UTF-8 only): ") + e.what());
  }
  // Before anything is created: a point starts over in an emptied
  // directory, and keel empties only its own runs (train/run_dir.h).
  if (!refused.empty()) {
    std::string list;
    for (const auto& r : refused) list += "\n  " + r;
    throw RunDirError("refusing to run: these points would start over in an emptied directory, and keel empties "
                      "only its own runs:" + list +
                      "\nMove or remove them yourself, or use another directory (--out DIR).");
  }

  // One sweep process per directory; its points are locked by their own keel
  // train children (util/dir_lock.h).
  DirLock sweep_lock(spec.out_dir, "sweep directory");
  Logger log(spec.out_dir + "/sweep.log");
  log.info(strf("sweep %s: %zu points (%s), base %s, directory %s", spec.name.c_str(), points.size(), axes_text.c_str(),
                spec.base_config.c_str(), spec.out_dir.c_str()));
  if (!old_manifest.empty()) {
    log.info(strf("sweep.json: reusing %zu point(s) recorded with identical settings; %zu new", rec.reused.size(),
                  rec.added.size()));
    if (!rec.retired.empty()) {
      std::string list;
      for (const auto& r : rec.retired) list += " " + r;
      log.warn(strf("%zu point(s) are no longer in the sweep file; kept on disk, left out of the report:%s",
                    rec.retired.size(), list.c_str()));
    }
  }
  log.info(strf("%zu finished (skipped), %zu to resume from checkpoints, %zu to run; %d at once, %d thread(s) each "
                "(%d cores)", finished, resume_steps.size(), queue.size() - resume_steps.size(), options.parallel,
                threads, cores));

  nlohmann::json manifest = make_manifest(spec, points, old_manifest);
  manifest["sessions"].push_back(session_record(options, cores, threads, queue.size()));
  write_file_atomic(manifest_path, manifest.dump(2) + "\n");

  // Prepare the data once here, not in several children at the same time.
  std::set<std::string> prepared;
  for (size_t i : queue)
    if (prepared.insert(points[i].config.data.dir).second) ensure_prepared(points[i].config);

  // Points with no valid checkpoint start over in an empty directory, so no
  // metrics of an earlier attempt remain.
  // A point still locked is being trained by a child of an earlier sweep
  // that outlived it: never empty a live run.
  for (size_t i : queue) {
    const std::string point_dir = spec.out_dir + "/" + points[i].name;
    if (dir_is_locked(point_dir))
      throw RunDirError("point " + point_dir + " is still being trained by another process (a child of an "
                        "earlier keel sweep?); wait for it to stop, then run the sweep again");
    if (resume_steps.count(i) || !path_exists(point_dir)) continue;
    if (const std::string why = why_not_replaceable_run(point_dir); !why.empty())  // changed since the plan
      throw RunDirError("refusing to empty point " + point_dir + ": " + why);
    remove_tree(point_dir);
  }

  const auto t0 = Clock::now();
  Runner runner(spec, points, options, threads, log);
  GridSource source(points, queue, resume_steps);
  const int code = queue.empty() ? 0 : runner.run(source, finished, finished_diverged);
  if (queue.empty()) log.info("every selected point is finished; nothing to run. Report: keel report " + spec.out_dir);
  else if (code == 0) log.info("report: keel report " + spec.out_dir);
  auto& last = manifest["sessions"].back();
  last["finished"] = utc_now();
  last["wall_s"] = std::chrono::duration<double>(Clock::now() - t0).count();
  last["exit_code"] = code;
  write_file_atomic(manifest_path, manifest.dump(2) + "\n");
  return code;
}

}  // namespace keel
