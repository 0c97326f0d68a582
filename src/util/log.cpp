#include "util/log.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdarg>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "util/append_file.h"

namespace keel {

namespace {

// train.log: each line one write(2) (util/append_file.h). spdlog's own file
// sink writes through a FILE buffer and hands errors to a handler that
// prints and goes on, so a full disk lost lines with no more than a note in
// the noise; here the first refused line is reported at once and remembered.
class CheckedFileSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit CheckedFileSink(const std::string& path) : path_(path) {
    if (const int err = file_.open(path))
      throw std::runtime_error(path + ": cannot open for appending: " + std::strerror(err));
  }
  int error() const { return error_.load(); }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (error_.load()) return;  // lines after a gap would read as a whole log
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    const int err = file_.append(line.data(), line.size());
    if (!err) return;
    error_.store(err);
    // Straight to stderr: this runs inside the logger, which must not be re-entered.
    const std::string text = "keel: error: " + path_ + ": cannot append a log line: " + std::strerror(err) +
                             " (errno " + std::to_string(err) + "); this file gets no more lines\n";
    const ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
    (void)ignored;
  }
  void flush_() override {}  // nothing is buffered

 private:
  std::string path_;
  AppendFile file_;
  std::atomic<int> error_{0};
};

}  // namespace

struct Logger::Impl {
  std::shared_ptr<spdlog::logger> logger;
  std::shared_ptr<CheckedFileSink> file;  // null without a file
};

Logger::Logger(const std::string& file_path) : impl_(std::make_unique<Impl>()) {
  static std::atomic<int> counter{0};
  std::vector<spdlog::sink_ptr> sinks;
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (!file_path.empty()) {
    impl_->file = std::make_shared<CheckedFileSink>(file_path);
    sinks.push_back(impl_->file);
  }
  impl_->logger = std::make_shared<spdlog::logger>("keel" + std::to_string(counter++), sinks.begin(), sinks.end());
  impl_->logger->set_pattern("%H:%M:%S %^%v%$");
  impl_->logger->flush_on(spdlog::level::info);
}

Logger::~Logger() = default;

void Logger::info(const std::string& m) { impl_->logger->info(m); }
void Logger::warn(const std::string& m) { impl_->logger->warn(m); }
void Logger::error(const std::string& m) { impl_->logger->error(m); }
int Logger::file_errno() const { return impl_->file ? impl_->file->error() : 0; }
void Logger::quiet(const std::string& tag) {
  impl_->logger->set_level(spdlog::level::warn);
  impl_->logger->set_pattern("%H:%M:%S " + tag + " %^%v%$");
}

std::string strf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, args);
  va_end(args);
  return out;
}

}  // namespace keel
