#include "cli/cmd_prepare.h"

#include <iostream>

#include "cli/commands.h"
#include "config/config.h"
#include "data/manifest.h"
#include "data/prepare.h"

namespace keel {

int cmd_prepare(const std::string& path, const std::vector<std::string>& overrides, const PrepareCliOptions& cli) {
  Config config = load_config(path, overrides);
  {
    if (cli.verify) {
      verify_prepared(config.data.dir);
      std::cout << prepare_summary(read_data_manifest(config.data.dir), config.data.dir)
                << "verified   every shard: size, checksum and token ids\n";
      return 0;
    }
    PrepareOptions options;
    options.force = cli.force;
    options.quiet = cli.quiet;
    PrepareResult r = prepare_data(config, options);
    if (!r.built)
      std::cout << config.data.dir << " is already prepared with these sources and settings; nothing to do "
                << "(--force rebuilds it)\n";
    std::cout << prepare_summary(r.manifest, config.data.dir);
    return 0;
  }
}

}  // namespace keel
