#include "train/run_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

#include "checkpoint/posix_io.h"
#include "monitor/tensorboard_writer.h"

namespace keel {

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + tmp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(err) +
                               (err == ENOSPC ? " (disk full)" : ""));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot flush " + tmp + ": " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
}

RunDir::RunDir(const Config& config, bool resuming, bool writer)
    : path_(config.run.out_dir + "/" + config.run.name), writer_(writer), tensorboard_(config.run.tensorboard) {
  // POSIX calls rather than std::filesystem: libtorch.so exports its own
  // std::filesystem symbols, which our calls would bind to (posix_io.h).
  if (writer_) {
    try {
      const bool exists = is_directory(path_) && !list_directory(path_).empty();
      if (exists && !resuming) {
        if (!config.run.overwrite)
          throw RunDirError("run directory " + path_ +
                            " already holds a run; continue it with --resume auto, replace it with "
                            "--set run.overwrite=true, or choose another run.name");
        remove_tree(path_);
      }
      ensure_directory(path_);
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
