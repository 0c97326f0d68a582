// `keel validate` and `keel config --describe`.
#include <iostream>

#include "cli/commands.h"
#include "config/config.h"

namespace keel {

int report_config_error(const std::string& what) {
  std::cerr << "keel: invalid configuration:\n" << what;
  return 2;
}

int cmd_validate(const std::string& path, const std::vector<std::string>& overrides) {
  Config config = load_config(path, overrides);
  std::cout << "# resolved from " << path << "\n" << config_to_yaml(config);
  return 0;
}

int cmd_describe(bool markdown) {
  std::cout << describe_config(markdown);
  return 0;
}

}  // namespace keel
