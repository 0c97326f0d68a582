#include "train/run_dir.h"

#include <sstream>

#include "monitor/tensorboard_writer.h"
#include "util/dir_lock.h"
#include "util/fs.h"

namespace keel {

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
      if (exists && !resuming && !config.run.overwrite)
        throw RunDirError("run directory " + path_ +
                          " already holds a run; continue it with --resume auto, replace it with "
                          "--set run.overwrite=true, or choose another run.name");
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
    metrics_.open(file("metrics.jsonl"), std::ios::app);
    if (!metrics_) throw RunDirError("cannot open " + file("metrics.jsonl") + " for appending");
  }
  log = std::make_unique<Logger>(writer_ ? file("train.log") : "");
}

RunDir::~RunDir() = default;

void RunDir::write_config(const Config& config) {
  if (writer_) write_file_atomic(file("config.yaml"), config_to_yaml(config));
}

void RunDir::append_metrics(const nlohmann::json& record) {
  if (!writer_) return;
  metrics_ << record.dump() << "\n";
  metrics_.flush();
  tensorboard_append(record);
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
  metrics_.close();
  write_file_atomic(file("metrics.jsonl"), content);
  metrics_.open(file("metrics.jsonl"), std::ios::app);
  if (!metrics_) throw RunDirError("cannot reopen " + file("metrics.jsonl"));
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
  std::ofstream out(file(file_name), std::ios::app);
  out << record.dump() << "\n";
}

void RunDir::write_json_atomic(const std::string& name, const nlohmann::json& value) {
  if (writer_) write_file_atomic(file(name), value.dump(2) + "\n");
}

}  // namespace keel
