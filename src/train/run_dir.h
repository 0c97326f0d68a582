// The run directory runs/<name>/: resolved config, train.log, metrics.jsonl,
// spikes.jsonl, summary.json, checkpoints/. Only rank 0 writes here.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>

#include "config/config.h"
#include "util/append_file.h"
#include "util/error.h"
#include "util/log.h"

namespace keel {

class DirLock;
class TensorBoardWriter;

class RunDir {
 public:
  // Creates (or, when resuming, reopens) out_dir/name. Refuses an existing
  // run directory unless resuming or run.overwrite is set, and one that
  // another process holds (util/dir_lock.h) in any case. run.overwrite
  // empties only what why_not_replaceable_run() accepts. writer=false on
  // ranks other than 0: nothing is written, everything is a no-op.
  RunDir(const Config& config, bool resuming, bool writer);
  ~RunDir();

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  bool writer() const { return writer_; }

  void write_config(const Config& config);
  // One line of metrics.jsonl, written at once (util/append_file.h); with
  // run.tensorboard also one event of scalars in the TensorBoard file
  // (monitor/tensorboard_writer.h). An append the disk refuses (full, a
  // quota) is reported on stderr at once, naming the file and the errno,
  // and leaves the file as it was; that record and every later one are kept
  // in unwritten() instead, for the checkpoint the trainer saves before it
  // stops (docs/reliability.md#a-full-disk).
  void append_metrics(const nlohmann::json& record);
  // Replace metrics.jsonl (resume), keep appending. The TensorBoard files are
  // rewritten from `content` too, so they never hold the dropped steps.
  void reopen_metrics(const std::string& content);
  // One line of an event log (spikes.jsonl, nonfinite.jsonl), as append_metrics.
  void append_event(const std::string& file_name, const nlohmann::json& record);
  // A record or a train.log line was refused: the run's logs have a gap from here.
  bool write_failed() const { return write_errno() != 0; }
  int write_errno() const;
  std::string write_error() const;  // "PATH: cannot append ...: <errno text>", or ""
  // The records refused so far, in order: [{"file": name, "record": {...}}].
  const nlohmann::json& unwritten() const { return unwritten_; }
  // Appends the records an earlier attempt could not (from its checkpoint),
  // but none the file already holds (a rewind back to that checkpoint).
  void restore_unwritten(const nlohmann::json& records);
  void write_json_atomic(const std::string& name, const nlohmann::json& value);

  std::unique_ptr<Logger> log;  // stderr + train.log (stderr only when not the writer)

 private:
  std::string path_;
  bool writer_;
  std::unique_ptr<DirLock> lock_;  // held for the run's lifetime (writer only)
  AppendFile metrics_file_;  // opened by the constructor (a check), again by the first record after reopen_metrics
  int write_errno_ = 0;      // the first refused record's
  std::string write_error_;
  nlohmann::json unwritten_ = nlohmann::json::array();
  std::map<std::string, int64_t> appended_;  // records written per file (fault injection counts them)
  // True when written; otherwise the record is in unwritten_.
  bool append_record(const std::string& file_name, AppendFile& out, const nlohmann::json& record);
  bool tensorboard_ = false;
  std::unique_ptr<TensorBoardWriter> tensorboard_writer_;  // opened at the first record
  void tensorboard_append(const nlohmann::json& record);
};

// What run.overwrite, or a sweep point that starts over, may delete: "" if
// `dir` may be emptied for a new run, else why not (for a RunDirError that
// names `dir`). It may when it is missing, empty but for keel's lock file, or
// recognisably a keel run: config.yaml beside a train.log or metrics.jsonl
// (a run writes them before its first step), or nothing but the files a run
// or a sweep point writes before config.yaml (keel.lock, train.log,
// metrics.jsonl, stdout.log). Inside a run, links are removed, not followed
// (remove_tree). A symbolic link at `dir` itself never: emptying it would
// delete wherever it points.
std::string why_not_replaceable_run(const std::string& dir);

}  // namespace keel
