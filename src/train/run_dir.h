// The run directory runs/<name>/: resolved config, train.log, metrics.jsonl,
// spikes.jsonl, summary.json, checkpoints/. Only rank 0 writes here.
#pragma once

#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>
#include <string>

#include "config/config.h"
#include "util/error.h"
#include "util/log.h"

namespace keel {

class DirLock;
class TensorBoardWriter;

class RunDir {
 public:
  // Creates (or, when resuming, reopens) out_dir/name. Refuses an existing
  // run directory unless resuming or run.overwrite is set, and one that
  // another process holds (util/dir_lock.h) in any case. writer=false on
  // ranks other than 0: nothing is written, everything is a no-op.
  RunDir(const Config& config, bool resuming, bool writer);
  ~RunDir();

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  bool writer() const { return writer_; }

  void write_config(const Config& config);
  // One line of metrics.jsonl, flushed; with run.tensorboard also one event
  // of scalars in the TensorBoard file (monitor/tensorboard_writer.h).
  void append_metrics(const nlohmann::json& record);
  // Replace metrics.jsonl (resume), keep appending. The TensorBoard files are
  // rewritten from `content` too, so they never hold the dropped steps.
  void reopen_metrics(const std::string& content);
  void append_event(const std::string& file_name, const nlohmann::json& record);
  void write_json_atomic(const std::string& name, const nlohmann::json& value);

  std::unique_ptr<Logger> log;  // stderr + train.log (stderr only when not the writer)

 private:
  std::string path_;
  bool writer_;
  std::unique_ptr<DirLock> lock_;  // held for the run's lifetime (writer only)
  std::ofstream metrics_;
  bool tensorboard_ = false;
  std::unique_ptr<TensorBoardWriter> tensorboard_writer_;  // opened at the first record
  void tensorboard_append(const nlohmann::json& record);
};


}  // namespace keel
