// Subcommand entry points. Each returns the process exit code:
// 0 ok, 2 bad input (config, files), 3 training halted on a non-finite value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

int cmd_validate(const std::string& config_path, const std::vector<std::string>& overrides);
int cmd_describe(bool markdown);
int cmd_smoke(const std::string& config_path, const std::vector<std::string>& overrides);
int cmd_train(const std::string& config_path, const std::vector<std::string>& overrides,
              const std::string& resume, int64_t stop_after_step);

struct SampleOptions;
int cmd_sample(const std::string& path, const std::string& prompt, const SampleOptions& options);

// Prints "error: ..." lines for a config problem and returns 2.
int report_config_error(const std::string& what);

}  // namespace keel
