#include "train/run_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "checkpoint/posix_io.h"

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
    : path_(config.run.out_dir + "/" + config.run.name), writer_(writer) {
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

void RunDir::write_config(const Config& config) {
  if (writer_) write_file_atomic(file("config.yaml"), config_to_yaml(config));
}

void RunDir::append_metrics(const nlohmann::json& record) {
  if (!writer_) return;
  metrics_ << record.dump() << "\n";
  metrics_.flush();
}

void RunDir::reopen_metrics(const std::string& content) {
  if (!writer_) return;
  metrics_.close();
  write_file_atomic(file("metrics.jsonl"), content);
  metrics_.open(file("metrics.jsonl"), std::ios::app);
  if (!metrics_) throw RunDirError("cannot reopen " + file("metrics.jsonl"));
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
