#include "train/run_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

namespace fs = std::filesystem;

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
    : path_((fs::path(config.run.out_dir) / config.run.name).string()), writer_(writer) {
  if (writer_) {
    std::error_code ec;
    const bool exists = fs::exists(path_) && !fs::is_empty(path_, ec);
    if (exists && !resuming) {
      if (!config.run.overwrite)
        throw RunDirError("run directory " + path_ +
                          " already holds a run; continue it with --resume auto, replace it with "
                          "--set run.overwrite=true, or choose another run.name");
      fs::remove_all(path_, ec);
      if (ec) throw RunDirError("cannot clear " + path_ + ": " + ec.message());
    }
    fs::create_directories(path_, ec);
    if (ec) throw RunDirError("cannot create run directory " + path_ + ": " + ec.message());
    // Probe writability now rather than at the first checkpoint.
    const std::string probe = path_ + "/.write-test";
    std::ofstream(probe) << "ok";
    if (!fs::exists(probe)) throw RunDirError("run directory " + path_ + " is not writable");
    fs::remove(probe);
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

void RunDir::append_event(const std::string& file_name, const nlohmann::json& record) {
  if (!writer_) return;
  std::ofstream out(file(file_name), std::ios::app);
  out << record.dump() << "\n";
}

void RunDir::write_json_atomic(const std::string& name, const nlohmann::json& value) {
  if (writer_) write_file_atomic(file(name), value.dump(2) + "\n");
}

}  // namespace keel
