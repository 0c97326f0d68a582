// The config schema: every key keel understands, bound to a field of a Config.
//
// Each section file (model_config.cpp, train_config.cpp, ...) declares its keys
// once, with type, default (the field's initial value), range and a one-line
// description. The same declarations drive YAML parsing, `--set` overrides,
// `keel config --describe`, and writing the resolved config. That is why the
// config is the documentation: there is no second list to fall out of date.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "config/choice.h"
#include "util/error.h"

namespace YAML { class Node; }

namespace keel {

enum class KeyKind { integer, real, optional_real, boolean, text, choice, text_list };

struct KeyDef {
  std::string path;  // "model.qk_norm.type"
  KeyKind kind;
  std::string help;
  void* target = nullptr;                 // field inside the bound Config
  std::vector<std::string> choices;       // KeyKind::choice: the names this key accepts
  std::function<std::string()> choice_get;             // KeyKind::choice: the field's name
  std::function<void(const std::string&)> choice_set;  // KeyKind::choice: set by a name from choices
  std::optional<double> min, max;         // inclusive bounds for numbers
  bool min_exclusive = false;             // "> min" instead of ">= min"
  // "> 0": scales, rates, caps and temperatures.
  KeyDef& positive() {
    min = 0;
    min_exclusive = true;
    return *this;
  }
  // KeyKind::text_list only: entries may also be {path: ..., weight: ...}
  // mappings (data.sources of a mixture); the weights land here, empty when
  // no entry has one.
  std::vector<double>* weights = nullptr;
};

// A list of config errors, all reported together ("all errors in one pass").
class Schema {
 public:
  // Declarations. Each returns the KeyDef so a caller can add bounds.
  KeyDef& integer(const std::string& path, int64_t* field, const std::string& help);
  KeyDef& real(const std::string& path, double* field, const std::string& help);
  KeyDef& optional_real(const std::string& path, std::optional<double>* field,
                        const std::string& help);
  KeyDef& boolean(const std::string& path, bool* field, const std::string& help);
  KeyDef& text(const std::string& path, std::string* field, const std::string& help);
  // A choice key bound to an enum field, accepting `allowed` (every value of E when empty).
  template <class E>
  KeyDef& choice(const std::string& path, E* field, std::vector<E> allowed, const std::string& help) {
    KeyDef& key = add(path, KeyKind::choice, field, help);
    if (allowed.empty())
      key.choices = ChoiceNames<E>::names();
    else
      for (E e : allowed) key.choices.push_back(name_of(e));
    key.choice_get = [field] { return name_of(*field); };
    key.choice_set = [field](const std::string& name) { *field = *choice_from_name<E>(name); };
    return key;
  }
  KeyDef& text_list(const std::string& path, std::vector<std::string>* field,
                    const std::string& help);

  const std::vector<KeyDef>& keys() const { return keys_; }
  const KeyDef* find(const std::string& path) const;
  bool is_section(const std::string& path) const;  // "model", "model.qk_norm"

  // Applies a YAML document; `source` names it in messages ("configs/x.yaml").
  void apply_yaml(const YAML::Node& root, const std::string& source, ConfigErrors& errors);
  // Applies one `a.b.c=value` override.
  void apply_override(const std::string& assignment, ConfigErrors& errors);
  // Range and choice checks on the current values.
  void check_bounds(ConfigErrors& errors) const;

  std::string value_string(const KeyDef& key) const;  // YAML-formatted value
  std::string to_yaml() const;                          // whole resolved config
  std::string describe(bool markdown = false) const;     // table of keys
  std::string closest_key(const std::string& path) const;

 private:
  KeyDef& add(const std::string& path, KeyKind kind, void* field, const std::string& help);
  void apply_node(const std::string& prefix, const YAML::Node& node, const std::string& source,
                  ConfigErrors& errors);
  void set_value(const KeyDef& key, const YAML::Node& value, const std::string& where,
                 ConfigErrors& errors);
  std::vector<KeyDef> keys_;
};

std::string kind_name(KeyKind kind);
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace keel
