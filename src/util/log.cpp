#include "util/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdarg>
#include <vector>

namespace keel {

struct Logger::Impl {
  std::shared_ptr<spdlog::logger> logger;
};

Logger::Logger(const std::string& file_path) : impl_(std::make_unique<Impl>()) {
  static std::atomic<int> counter{0};
  std::vector<spdlog::sink_ptr> sinks;
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (!file_path.empty())
    sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(file_path, /*truncate=*/false));
  impl_->logger = std::make_shared<spdlog::logger>("keel" + std::to_string(counter++), sinks.begin(), sinks.end());
  impl_->logger->set_pattern("%H:%M:%S %^%v%$");
  impl_->logger->flush_on(spdlog::level::info);
}

Logger::~Logger() = default;

void Logger::info(const std::string& m) { impl_->logger->info(m); }
void Logger::warn(const std::string& m) { impl_->logger->warn(m); }
void Logger::error(const std::string& m) { impl_->logger->error(m); }
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
