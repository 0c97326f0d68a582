#include "config/schema.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <limits>
#include <set>
#include <sstream>

namespace keel {

std::string kind_name(KeyKind kind) {
  switch (kind) {
    case KeyKind::integer: return "int";
    case KeyKind::real: return "float";
    case KeyKind::optional_real: return "float|null";
    case KeyKind::boolean: return "bool";
    case KeyKind::text: return "string";
    case KeyKind::choice: return "choice";
    case KeyKind::text_list: return "list";
  }
  return "?";
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

KeyDef& Schema::add(const std::string& path, KeyKind kind, void* field, const std::string& help) {
  KeyDef key;
  key.path = path;
  key.kind = kind;
  key.help = help;
  key.target = field;
  keys_.push_back(key);
  return keys_.back();
}

KeyDef& Schema::integer(const std::string& p, int64_t* f, const std::string& h) {
  return add(p, KeyKind::integer, f, h);
}
KeyDef& Schema::real(const std::string& p, double* f, const std::string& h) {
  return add(p, KeyKind::real, f, h);
}
KeyDef& Schema::optional_real(const std::string& p, std::optional<double>* f, const std::string& h) {
  return add(p, KeyKind::optional_real, f, h);
}
KeyDef& Schema::boolean(const std::string& p, bool* f, const std::string& h) {
  return add(p, KeyKind::boolean, f, h);
}
KeyDef& Schema::text(const std::string& p, std::string* f, const std::string& h) {
  return add(p, KeyKind::text, f, h);
}
KeyDef& Schema::text_list(const std::string& p, std::vector<std::string>* f, const std::string& h) {
  return add(p, KeyKind::text_list, f, h);
}

const KeyDef* Schema::find(const std::string& path) const {
  for (const auto& k : keys_)
    if (k.path == path) return &k;
  return nullptr;
}

bool Schema::is_section(const std::string& path) const {
  for (const auto& k : keys_)
    if (k.path.size() > path.size() && k.path.compare(0, path.size(), path) == 0 &&
        k.path[path.size()] == '.')
      return true;
  return false;
}

std::string Schema::closest_key(const std::string& path) const {
  // Candidates: every key and every section name. The last path component
  // weighs most: "model.qk_nrom" should suggest "model.qk_norm".
  std::vector<std::string> candidates;
  for (const auto& k : keys_) {
    std::string p = k.path;
    candidates.push_back(p);
    for (size_t dot = p.rfind('.'); dot != std::string::npos && dot > 0; dot = p.rfind('.', dot - 1)) {
      candidates.push_back(p.substr(0, dot));
      if (dot == 0) break;
    }
  }
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    size_t d = edit_distance(path, c);
    if (d < best_d) { best_d = d; best = c; }
  }
  // Only suggest when it is plausibly a typo of the same key.
  size_t leaf = path.size() - (path.rfind('.') == std::string::npos ? 0 : path.rfind('.') + 1);
  if (best_d > std::max<size_t>(3, leaf / 2)) return "";
  return best;
}

static std::string where_of(const YAML::Node& node, const std::string& source) {
  if (source.empty()) return "";
  YAML::Mark m = node.Mark();
  if (m.line < 0) return " (" + source + ")";
  return " (" + source + ":" + std::to_string(m.line + 1) + ")";
}

void Schema::apply_yaml(const YAML::Node& root, const std::string& source, ConfigErrors& errors) {
  if (!root || root.IsNull()) return;
  if (!root.IsMap()) {
    errors.add("(top level)", "expected a mapping of sections (model, data, train, ...)" +
                                  where_of(root, source));
    return;
  }
  apply_node("", root, source, errors);
}

void Schema::apply_node(const std::string& prefix, const YAML::Node& node, const std::string& source,
                        ConfigErrors& errors) {
  std::set<std::string> seen;  // YAML would silently take the last of two equal keys
  for (const auto& item : node) {
    if (!item.first.IsScalar()) {
      errors.add(prefix.empty() ? "(top level)" : prefix, "a key that is not a plain name" + where_of(item.first, source));
      continue;
    }
    std::string name = item.first.as<std::string>();
    std::string path = prefix.empty() ? name : prefix + "." + name;
    if (!seen.insert(name).second) {
      errors.add(path, "duplicate key" + where_of(item.first, source) + "; each key may appear once");
      continue;
    }
    const YAML::Node& value = item.second;
    if (const KeyDef* key = find(path)) {
      set_value(*key, value, where_of(value, source), errors);
    } else if (is_section(path)) {
      if (value.IsNull()) continue;  // an empty section keeps its defaults
      if (!value.IsMap()) {
        errors.add(path, "is a section; expected a mapping of its keys" + where_of(value, source));
        continue;
      }
      apply_node(path, value, source, errors);
    } else {
      std::string hint = closest_key(path);
      errors.add(path, "unknown key" + where_of(item.first, source) +
                           (hint.empty() ? "" : "; did you mean " + hint + "?"));
    }
  }
}

static bool parse_bool(const std::string& s, bool* out) {
  if (s == "true" || s == "True" || s == "yes" || s == "on") { *out = true; return true; }
  if (s == "false" || s == "False" || s == "no" || s == "off") { *out = false; return true; }
  return false;
}

static bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  size_t used = 0;
  try {
    // Accept "1e3"-style integers only when exact.
    if (s.find_first_of("eE.") != std::string::npos) {
      double d = std::stod(s, &used);
      if (used != s.size() || d != std::floor(d) || std::fabs(d) > 9e15) return false;
      *out = static_cast<int64_t>(d);
      return true;
    }
    *out = std::stoll(s, &used);
  } catch (...) {
    return false;
  }
  return used == s.size();
}

// strtod rather than stod: stod refuses subnormals (ERANGE on underflow),
// which format_number writes and must read back.
static bool parse_real(const std::string& s, double* out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(*out);
}

static bool is_null_scalar(const YAML::Node& v) {
  return v.IsNull() || (v.IsScalar() && (v.Scalar() == "null" || v.Scalar() == "~"));
}

void Schema::set_value(const KeyDef& key, const YAML::Node& value, const std::string& where,
                       ConfigErrors& errors) {
  auto bad = [&](const std::string& expected) {
    std::string shown = value.IsScalar() ? "'" + value.Scalar() + "'"
                        : value.IsSequence() ? "a list"
                        : value.IsMap()      ? "a mapping"
                                             : "null";
    errors.add(key.path, "expected " + expected + ", got " + shown + where);
  };
  if (key.kind == KeyKind::text_list) {
    auto* field = static_cast<std::vector<std::string>*>(key.target);
    if (key.weights) key.weights->clear();
    if (value.IsSequence()) {
      field->clear();
      std::vector<double> weights;
      size_t weighted = 0;
      for (const auto& v : value) {
        const std::string at = key.path + "[" + std::to_string(field->size()) + "]";
        if (v.IsMap() && key.weights) {
          double w = 0;
          for (const auto& kv : v) {
            const std::string k = kv.first.IsScalar() ? kv.first.Scalar() : "?";
            if (k != "path" && k != "weight") {
              errors.add(at + "." + k, "unknown key; a weighted source is {path: ..., weight: ...}" + where);
              return;
            }
          }
          if (!v["path"] || !v["path"].IsScalar() || v["path"].Scalar().empty()) {
            errors.add(at + ".path", "missing: a weighted source is {path: ..., weight: ...}" + where);
            return;
          }
          if (!v["weight"] || !v["weight"].IsScalar() || !parse_real(v["weight"].Scalar(), &w) || !(w > 0) ||
              !std::isfinite(w)) {
            errors.add(at + ".weight", "must be a positive number" + where);
            return;
          }
          field->push_back(v["path"].Scalar());
          weights.push_back(w);
          ++weighted;
          continue;
        }
        if (!v.IsScalar()) return bad(key.weights ? "a list of paths or {path, weight} mappings" : "a list of strings");
        field->push_back(v.Scalar());
        weights.push_back(0);
      }
      if (weighted > 0 && weighted < field->size()) {
        for (size_t i = 0; i < weights.size(); ++i)
          if (weights[i] == 0) {
            errors.add(key.path + "[" + std::to_string(i) + "]",
                       "has no weight while others have: in a mixture every source is {path: ..., weight: ...}" + where);
            break;
          }
        return;
      }
      if (weighted > 0) *key.weights = weights;
    } else if (value.IsScalar()) {
      *field = {value.Scalar()};
    } else if (value.IsNull()) {
      field->clear();
    } else {
      bad("a list of strings");
    }
    return;
  }
  if (key.kind == KeyKind::optional_real && is_null_scalar(value)) {
    static_cast<std::optional<double>*>(key.target)->reset();
    return;
  }
  if (!value.IsScalar()) return bad("a single " + kind_name(key.kind) + " value");
  const std::string s = value.Scalar();
  switch (key.kind) {
    case KeyKind::integer: {
      int64_t v;
      if (!parse_int(s, &v)) return bad("an integer");
      *static_cast<int64_t*>(key.target) = v;
      break;
    }
    case KeyKind::real:
    case KeyKind::optional_real: {
      double v;
      if (!parse_real(s, &v)) return bad(key.kind == KeyKind::real ? "a number" : "a number or null");
      if (key.kind == KeyKind::real) *static_cast<double*>(key.target) = v;
      else *static_cast<std::optional<double>*>(key.target) = v;
      break;
    }
    case KeyKind::boolean: {
      bool v;
      if (!parse_bool(s, &v)) return bad("true or false");
      *static_cast<bool*>(key.target) = v;
      break;
    }
    case KeyKind::text:
      *static_cast<std::string*>(key.target) = s;
      break;
    case KeyKind::choice: {
      if (std::find(key.choices.begin(), key.choices.end(), s) == key.choices.end()) {
        std::string all;
        for (const auto& c : key.choices) all += (all.empty() ? "" : " | ") + c;
        return bad("one of " + all);
      }
      key.choice_set(s);
      break;
    }
    case KeyKind::text_list: break;
  }
}

void Schema::apply_override(const std::string& assignment, ConfigErrors& errors) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    errors.add("--set " + assignment, "expected KEY=VALUE, e.g. --set train.lr=3e-4");
    return;
  }
  std::string path = assignment.substr(0, eq);
  std::string text = assignment.substr(eq + 1);
  const KeyDef* key = find(path);
  if (!key) {
    std::string hint = closest_key(path);
    errors.add(path, std::string("unknown key (from --set)") +
                         (hint.empty() ? "" : "; did you mean " + hint + "?"));
    return;
  }
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    errors.add(path, "cannot parse --set value '" + text + "': " + e.msg);
    return;
  }
  if (!value.IsDefined() || (value.IsNull() && text.empty())) value = YAML::Node(text);
  set_value(*key, value, " (from --set)", errors);
}

// The shortest decimal that reads back as exactly v (at most 17 digits), so a
// saved config.yaml reloads to the identical config.
static std::string format_number(double v) {
  std::string s;
  for (int digits = 6; digits <= 17; ++digits) {
    std::ostringstream os;
    os << std::setprecision(digits) << v;
    s = os.str();
    if (std::strtod(s.c_str(), nullptr) == v) break;
  }
  // Keep floats recognisable as floats in YAML ("1" would read back as int,
  // which is fine for us, but "1.0" says what the key is).
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// Plain only when YAML cannot read the text as anything but this string:
// letters, digits and _ . / - (not first), and no word YAML gives a meaning
// (null, ~, booleans in any spelling, numbers). Everything else is written
// double-quoted with escapes, control characters included.
static bool plain_scalar_reads_back(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_' || s[0] == '/')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/' || c == '-')) return false;
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const char* special[] = {"null", "true", "false", "yes", "no", "on", "off", "y", "n", ".inf", ".nan"};
  for (const char* w : special)
    if (lower == w) return false;
  return true;
}

static std::string quote_if_needed(const std::string& s) {
  if (plain_scalar_reads_back(s)) return s;
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);  // UTF-8 bytes stay as they are
    }
  }
  return out + "\"";
}

std::string Schema::value_string(const KeyDef& key) const {
  switch (key.kind) {
    case KeyKind::integer: return std::to_string(*static_cast<const int64_t*>(key.target));
    case KeyKind::real: return format_number(*static_cast<const double*>(key.target));
    case KeyKind::optional_real: {
      const auto& v = *static_cast<const std::optional<double>*>(key.target);
      return v ? format_number(*v) : "null";
    }
    case KeyKind::boolean: return *static_cast<const bool*>(key.target) ? "true" : "false";
    case KeyKind::text: return quote_if_needed(*static_cast<const std::string*>(key.target));
    case KeyKind::choice: return quote_if_needed(key.choice_get());
    case KeyKind::text_list: {
      const auto& v = *static_cast<const std::vector<std::string>*>(key.target);
      const bool weighted = key.weights && key.weights->size() == v.size() && !v.empty();
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) {
        out += i ? ", " : "";
        out += weighted ? "{path: " + quote_if_needed(v[i]) + ", weight: " + format_number((*key.weights)[i]) + "}"
                        : quote_if_needed(v[i]);
      }
      return out + "]";
    }
  }
  return "";
}

std::string Schema::to_yaml() const {
  // Keys are declared section by section, so emitting them in order with the
  // shared prefix folded gives nested YAML.
  std::ostringstream out;
  std::vector<std::string> open;  // currently open section components
  for (const auto& key : keys_) {
    std::vector<std::string> parts;
    std::stringstream ss(key.path);
    for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
    size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common]) ++common;
    open.resize(common);
    for (size_t i = common; i + 1 < parts.size(); ++i) {
      out << std::string(2 * i, ' ') << parts[i] << ":\n";
      open.push_back(parts[i]);
    }
    out << std::string(2 * (parts.size() - 1), ' ') << parts.back() << ": " << value_string(key)
        << "\n";
  }
  return out.str();
}

static std::string bounds_text(const KeyDef& key) {
  std::string b;
  if (key.kind == KeyKind::choice) {
    for (const auto& c : key.choices) b += (b.empty() ? "" : "|") + c;
    return b;
  }
  auto num = [](double v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  if (key.min) b += (key.min_exclusive ? "> " : ">= ") + num(*key.min);
  if (key.max) b += std::string(b.empty() ? "" : ", ") + "<= " + num(*key.max);
  return b;
}

std::string Schema::describe(bool markdown) const {
  std::ostringstream out;
  if (markdown) {
    out << "| key | type | default | description |\n|---|---|---|---|\n";
    for (const auto& key : keys_) {
      std::string help = key.help;
      std::string b = bounds_text(key);
      if (!b.empty()) help += " [" + b + "]";
      for (size_t pos = 0; (pos = help.find('|', pos)) != std::string::npos; pos += 2) help.replace(pos, 1, "\\|");
      out << "| `" << key.path << "` | " << kind_name(key.kind) << " | `" << value_string(key) << "` | " << help
          << " |\n";
    }
    return out.str();
  }
  out << std::left << std::setw(38) << "key" << std::setw(12) << "type" << std::setw(14) << "default"
      << "description\n";
  for (const auto& key : keys_) {
    std::string help = key.help;
    std::string b = bounds_text(key);
    if (!b.empty()) help += " [" + b + "]";
    out << std::left << std::setw(38) << key.path << std::setw(12) << kind_name(key.kind)
        << std::setw(14) << value_string(key) << help << "\n";
  }
  return out.str();
}

void Schema::check_bounds(ConfigErrors& errors) const {
  for (const auto& key : keys_) {
    if (key.kind == KeyKind::choice) {
      // A value set in code (not parsed) may still be outside this key's subset.
      std::string name = key.choice_get();
      if (std::find(key.choices.begin(), key.choices.end(), name) == key.choices.end())
        errors.add(key.path, name + " is not allowed here; must be one of " + bounds_text(key));
      continue;
    }
    double v;
    if (key.kind == KeyKind::integer) v = static_cast<double>(*static_cast<const int64_t*>(key.target));
    else if (key.kind == KeyKind::real) v = *static_cast<const double*>(key.target);
    else if (key.kind == KeyKind::optional_real) {
      const auto& o = *static_cast<const std::optional<double>*>(key.target);
      if (!o) continue;
      v = *o;
    } else continue;
    if (key.min) {
      bool ok = key.min_exclusive ? v > *key.min : v >= *key.min;
      if (!ok) errors.add(key.path, value_string(key) + " is out of range; must be " +
                                       (key.min_exclusive ? "> " : ">= ") + format_number(*key.min));
    }
    if (key.max && v > *key.max)
      errors.add(key.path, value_string(key) + " is out of range; must be <= " + format_number(*key.max));
  }
}

}  // namespace keel
