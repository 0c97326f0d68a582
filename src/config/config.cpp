#include "config/config.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

namespace keel {

Schema make_schema(Config& c) {
  Schema s;
  declare_model_keys(s, c.model);
  declare_data_keys(s, c.data);
  declare_train_keys(s, c.train);
  declare_monitor_keys(s, c.monitor);
  declare_checkpoint_keys(s, c.checkpoint);
  declare_dist_keys(s, c.dist);
  declare_eval_keys(s, c.eval);
  declare_run_keys(s, c.run);
  return s;
}

static void check_all(Config& config, Schema& schema, ConfigErrors& errors) {
  schema.check_bounds(errors);
  check_model(config.model, errors);
  check_train(config, errors);
  check_data(config, errors);
  check_eval(config, errors);
}

static Config load_from_node(const YAML::Node* root, const std::string& source,
                             const std::vector<std::string>& overrides) {
  Config config;
  Schema schema = make_schema(config);
  ConfigErrors errors;
  try {
    if (root) schema.apply_yaml(*root, source, errors);
  } catch (const YAML::Exception& ex) {  // e.g. a key that is a list: no scalar to convert
    errors.add(source, "YAML error at line " + std::to_string(ex.mark.line + 1) + ": " + ex.msg);
  }
  for (const auto& o : overrides) schema.apply_override(o, errors);
  // Type errors leave defaults in place; still run the cross-key checks so
  // one pass reports everything.
  check_all(config, schema, errors);
  if (!errors.empty()) throw ConfigError(errors);
  return config;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) {
    ConfigErrors e;
    e.add(path, "cannot open config file (does it exist and is it readable?)");
    throw ConfigError(e);
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::ParserException& ex) {
    ConfigErrors e;
    e.add(path, "YAML syntax error at line " + std::to_string(ex.mark.line + 1) + ", column " +
                    std::to_string(ex.mark.column + 1) + ": " + ex.msg);
    throw ConfigError(e);
  }
  return load_from_node(&root, path, overrides);
}

Config config_from_yaml_text(const std::string& text, const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& ex) {
    ConfigErrors e;
    e.add("(yaml)", "syntax error at line " + std::to_string(ex.mark.line + 1) + ": " + ex.msg);
    throw ConfigError(e);
  }
  return load_from_node(&root, "(text)", overrides);
}

void validate(Config& config) {
  Schema schema = make_schema(config);
  ConfigErrors errors;
  check_all(config, schema, errors);
  if (!errors.empty()) throw ConfigError(errors);
}

std::string config_to_yaml(const Config& config) {
  Config copy = config;  // the schema binds mutable pointers
  return make_schema(copy).to_yaml();
}

std::string describe_config(bool markdown) {
  Config defaults;
  return make_schema(defaults).describe(markdown);
}

}  // namespace keel
