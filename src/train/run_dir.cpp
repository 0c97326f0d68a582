#include "train/run_dir.h"

#include <sys/stat.h>

#include <algorithm>
#include <sstream>

#include "monitor/tensorboard_writer.h"
#include "util/dir_lock.h"
#include "util/fault_inject.h"
#include "util/fs.h"

namespace keel {

namespace {

bool is_regular_file(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// What a run holds before it writes config.yaml (a run stopped in its first
// moments), and what a sweep writes into a point's directory before the
// point's keel train starts (stdout.log): keel's own, so they may go.
bool is_early_run_file(const std::string& name) {
  return name == kLockFileName || name == "train.log" || name == "metrics.jsonl" || name == "stdout.log" ||
         name == ".write-test";
}

}  // namespace

std::string why_not_replaceable_run(const std::string& dir) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return "";  // missing (or unreadable: creating it will say)
  if (S_ISLNK(st.st_mode))
    return "it is a symbolic link (to " + real_path(dir) + "), and keel never deletes through a link";
  if (!S_ISDIR(st.st_mode)) return "it is not a directory";
  const std::vector<std::string> entries = list_directory(dir);
  if (is_regular_file(dir + "/config.yaml") &&
      (is_regular_file(dir + "/train.log") || is_regular_file(dir + "/metrics.jsonl")))
    return "";
  if (std::all_of(entries.begin(), entries.end(), is_early_run_file)) return "";
  return "it does not look like a keel run (no config.yaml beside a train.log or metrics.jsonl), and keel deletes "
         "only its own runs";
}

RunDir::RunDir(const Config& config, bool resuming, bool writer)
    : path_(config.run.out_dir + "/" + config.run.name), writer_(writer), tensorboard_(config.run.tensorboard) {
  // POSIX calls rather than std::filesystem: libtorch.so exports its own
  // std::filesystem symbols, which our calls would bind to (util/fs.h).
  if (writer_) {
    try {
      std::vector<std::string> entries;
      if (is_directory(path_))
        for (const auto& name : list_directory(path_))
          if (name != kLockFileName) entries.push_back(name);
      const bool exists = !entries.empty();
      const std::string why_not = exists && !resuming ? why_not_replaceable_run(path_) : "";
      if (exists && !resuming && !config.run.overwrite)
        throw RunDirError("run directory " + path_ +
                          (why_not.empty() ? " already holds a run; continue it with --resume auto, replace it with "
                                             "--set run.overwrite=true, or choose another run.name"
                                           : " is not empty, and run.overwrite would not empty it either: " +
                                                 why_not + "; choose another run.name or run.out_dir"));
      // Checked before the lock, whose file would be one more thing left in
      // a directory that is not keel's.
      if (!why_not.empty())
        throw RunDirError("run.overwrite: refusing to empty " + path_ + ": " + why_not +
                          "; move or remove it yourself, or choose another run.name or run.out_dir");
      // One writer at a time, before anything here changes: a second keel
      // (a requeued job, the same command twice) stops with exit 2.
      lock_ = std::make_unique<DirLock>(path_, "run directory");
      if (exists && !resuming)  // run.overwrite: empty it, keeping the lock file we hold
        for (const auto& name : entries) remove_tree(path_ + "/" + name);
      // Probe writability now rather than at the first checkpoint.
      write_file_durably(path_ + "/.write-test", "ok");
      remove_file(path_ + "/.write-test");
    } catch (const RunDirError&) {
      throw;
    } catch (const std::exception& e) {
      throw RunDirError(std::string("run directory unusable: ") + e.what());
    }
    if (const int err = metrics_file_.open(file("metrics.jsonl")))
      throw RunDirError("cannot open " + file("metrics.jsonl") + " for appending: " + errno_text(err));
  }
  log = std::make_unique<Logger>(writer_ ? file("train.log") : "");
}

RunDir::~RunDir() = default;

void RunDir::write_config(const Config& config) {
  if (writer_) write_file_atomic(file("config.yaml"), config_to_yaml(config));
}

void RunDir::append_metrics(const nlohmann::json& record) {
  if (!writer_) return;
  if (append_record("metrics.jsonl", metrics_file_, record)) tensorboard_append(record);
}

// A record the disk refuses is reported at once, and it and every later one
// wait in unwritten_ rather than follow a gap; the trainer stops at the end
// of the step (Trainer::stop_on_write_failure), so a run never goes on with
// records missing and nobody told.
bool RunDir::append_record(const std::string& name, AppendFile& out, const nlohmann::json& record) {
  int err = write_errno_ ? -1 : injected_append_errno(name, appended_[name]);
  if (!err && !out.is_open()) err = out.open(file(name));
  if (!err) err = out.append(record.dump() + "\n");
  if (!err) {
    ++appended_[name];
    return true;
  }
  unwritten_.push_back({{"file", name}, {"record", record}});
  if (write_errno_) return false;  // reported with the first
  write_errno_ = err;
  write_error_ = file(name) + ": cannot append a record: " + errno_text(err);
  if (log) log->error(write_error_ + "; the run stops after this step (docs/reliability.md#a-full-disk)");
  return false;
}

int RunDir::write_errno() const {
  if (write_errno_) return write_errno_;
  return log ? log->file_errno() : 0;
}

std::string RunDir::write_error() const {
  if (!write_error_.empty()) return write_error_;
  const int err = write_errno();
  return err ? file("train.log") + ": cannot append a log line: " + errno_text(err) : "";
}

void RunDir::restore_unwritten(const nlohmann::json& records) {
  if (!writer_) return;
  for (const auto& r : records) {
    if (!r.is_object() || !r.contains("file") || !r["file"].is_string() || !r.contains("record")) continue;
    const std::string name = r["file"].get<std::string>();
    if (name != "metrics.jsonl" && name != "spikes.jsonl" && name != "nonfinite.jsonl") continue;  // ours alone
    const std::string path = file(name);
    if (path_exists(path) && read_small_file(path, 1ull << 30).find(r["record"].dump() + "\n") != std::string::npos)
      continue;
    if (name == "metrics.jsonl") append_metrics(r["record"]);
    else append_event(name, r["record"]);
  }
}

// TensorBoard is a view of metrics.jsonl: a failure to write it is reported
// once and turns it off rather than ending the run.
void RunDir::tensorboard_append(const nlohmann::json& record) {
  if (!tensorboard_ || !record.contains("step") || !record["step"].is_number_integer()) return;
  try {
    if (!tensorboard_writer_) tensorboard_writer_ = std::make_unique<TensorBoardWriter>(path_);
    tensorboard_writer_->add_scalars(record["step"].get<int64_t>(), metrics_to_scalars(record));
  } catch (const std::exception& e) {
    tensorboard_ = false;
    tensorboard_writer_.reset();
    if (log) log->warn(std::string("TensorBoard events off for this run: ") + e.what());
  }
}

void RunDir::reopen_metrics(const std::string& content) {
  if (!writer_) return;
  metrics_file_.close();  // the next record opens the new file
  write_file_atomic(file("metrics.jsonl"), content);
  if (!tensorboard_) return;
  // A resumed run redoes the steps after its checkpoint; TensorBoard would
  // show both copies, so the event files are replaced by one rebuilt from
  // the kept records (their wall times become now).
  tensorboard_writer_.reset();
  for (const auto& name : list_directory(path_))
    if (is_tensorboard_event_file(name)) remove_file(path_ + "/" + name);
  std::istringstream in(content);
  for (std::string line; std::getline(in, line);) {
    auto rec = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!rec.is_discarded()) tensorboard_append(rec);
  }
}

void RunDir::append_event(const std::string& file_name, const nlohmann::json& record) {
  if (!writer_) return;
  AppendFile out;  // events are rare: opened for each
  append_record(file_name, out, record);
}

void RunDir::write_json_atomic(const std::string& name, const nlohmann::json& value) {
  if (writer_) write_file_atomic(file(name), value.dump(2) + "\n");
}

}  // namespace keel
