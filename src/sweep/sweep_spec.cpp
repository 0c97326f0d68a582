#include "sweep/sweep_spec.h"

#include "analysis/edge_criteria.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "analysis/edge_criteria.h"
#include "util/fs.h"

namespace keel {

namespace {

const std::vector<std::string> kTopKeys = {"base",     "name",  "out_dir", "early_stop", "set",       "variants",
                                           "sizes",    "grid",  "seeds",   "max_points", "search"};

struct Parser {
  std::string file;
  ConfigErrors errors;
  Config scratch;
  Schema schema = make_schema(scratch);

  std::string where(const YAML::Node& node) const {
    const YAML::Mark m = node.Mark();
    return m.line < 0 ? " (" + file + ")" : " (" + file + ":" + std::to_string(m.line + 1) + ")";
  }

  // One config key = value from the sweep file: the key must exist and not
  // be the sweep's own, the value must suit it. Returns the `--set` text.
  bool check_entry(const std::string& section, const std::string& key, const YAML::Node& key_node,
                   const YAML::Node& value, std::string* assignment) {
    if (!schema.find(key)) {
      std::string hint = schema.closest_key(key);
      errors.add(section + "." + key, "unknown config key" + where(key_node) +
                                          (hint.empty() ? "" : "; did you mean " + hint + "?"));
      return false;
    }
    if (sweep_owned_key(key)) {
      errors.add(section + "." + key, "is set by keel sweep for every point (run directory, threads from "
                                      "--parallel/--threads); remove it" + where(key_node));
      return false;
    }
    // The value check of `keel train`, with this file's line in the message.
    Config c;
    Schema s = make_schema(c);
    ConfigErrors e;
    YAML::Node one(YAML::NodeType::Map);
    one[key] = value;
    s.apply_yaml(one, file, e);
    for (const auto& item : e.items) errors.items.push_back(section + "." + item);
    if (!e.empty()) return false;
    YAML::Emitter em;
    em << YAML::Flow << value;
    *assignment = key + "=" + em.c_str();
    return true;
  }

  // A mapping of keys (nested sections or dotted paths) to values.
  void collect(const std::string& section, const std::string& prefix, const YAML::Node& map,
               std::vector<std::string>* out, std::vector<std::string>* keys) {
    for (const auto& item : map) {
      const std::string name = item.first.as<std::string>();
      const std::string key = prefix.empty() ? name : prefix + "." + name;
      if (!schema.find(key) && schema.is_section(key) && item.second.IsMap()) {
        collect(section, key, item.second, out, keys);
        continue;
      }
      std::string assignment;
      if (check_entry(section, key, item.first, item.second, &assignment)) {
        out->push_back(assignment);
        keys->push_back(key);
      }
    }
  }
};

// A byte a directory name may not hold becomes '-'. A label that starts a
// point's name (a variant's: no "key=" before it) loses its leading dots the
// same way: "..a" would be a hidden directory, "." and ".." not a directory
// of the sweep's at all. Elsewhere a dot stays ("lr=.5"). Two labels that
// end up alike are refused by the callers (duplicate names).
std::string sanitize_label(const std::string& text, bool starts_name = false) {
  std::string out;
  for (char c : text) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+') ? c : '-';
  for (size_t i = 0; starts_name && i < out.size() && out[i] == '.'; ++i) out[i] = '-';
  return out.empty() ? "-" : out;
}

// "1000 train.lr x 10 run.seed": what makes a grid's size.
std::string axis_sizes(const std::vector<SweepAxis>& axes) {
  std::string out;
  for (const auto& a : axes) out += (out.empty() ? "" : " x ") + std::to_string(a.values.size()) + " " + a.key;
  return out;
}

std::string too_many_points(const SweepSpec& spec) {
  const uint64_t n = grid_size(spec.axes);
  const std::string count = n == UINT64_MAX ? "more than " + std::to_string(UINT64_MAX) : std::to_string(n);
  return "the grid has " + count + " points (" + axis_sizes(spec.axes) + "), more than max_points = " +
         std::to_string(spec.max_points) + (spec.max_points == kDefaultMaxPoints ? " (the default)" : "") +
         "; shorten an axis, or raise max_points in the sweep file if the grid is meant to be this large";
}

// A positive whole number as YAML writes it ("10000"); no sign, fraction or exponent.
bool parse_count(const std::string& text, int64_t* out) {
  if (text.empty() || text.size() > 18 || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  *out = std::stoll(text);
  return *out >= 1;
}

std::string last_component(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

std::string scalar_label(const YAML::Node& v) {
  if (v.IsScalar()) return v.Scalar();
  YAML::Emitter em;
  em << YAML::Flow << v;
  return em.c_str();
}

// "configs/sweeps/../default.yaml" -> "configs/default.yaml", lexically.
std::string normalize_path(const std::string& path) {
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string part; std::getline(ss, part, '/');) {
    if (part.empty() || part == ".") continue;
    if (part == ".." && !parts.empty() && parts.back() != "..") parts.pop_back();
    else parts.push_back(part);
  }
  std::string out = path[0] == '/' ? "/" : "";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "/" : "") + parts[i];
  return out.empty() ? "." : out;
}


// `search: {key, low, high, factor, criterion}` (edge_search.h). The key is
// a config key taking a positive real number, owned by no axis and not set
// by `set`; low and high are checked as that key's values.
void parse_search(Parser& p, const YAML::Node& n, const std::set<std::string>& axis_keys,
                  const std::vector<std::string>& set_keys, SweepSpec* spec) {
  if (!n.IsMap()) {
    p.errors.add("search", "expected a mapping {key: train.lr, low: ..., high: ..., factor: 1.25, criterion: "
                           "loss_divergence}" + p.where(n));
    return;
  }
  const size_t errors_before = p.errors.items.size();
  static const std::vector<std::string> keys = {"key", "low", "high", "factor", "criterion", "margin"};
  for (const auto& item : n) {
    const std::string k = item.first.as<std::string>();
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      p.errors.add("search." + k, "unknown search key" + p.where(item.first) + " (search keys: key, low, high, factor, "
                                  "criterion, margin)");
  }
  EdgeSearchSpec s;
  const YAML::Node key = n["key"];
  if (!key || !key.IsScalar() || key.Scalar().empty()) {
    p.errors.add("search.key", "required: the config key to search, e.g. train.lr" + p.where(key ? key : n));
  } else {
    s.key = key.Scalar();
    if (axis_keys.count(s.key))
      p.errors.add("search.key", s.key + " is also an axis of the grid; an axis owns its key" + p.where(key));
    if (std::find(set_keys.begin(), set_keys.end(), s.key) != set_keys.end())
      p.errors.add("search.key", s.key + " is also given by `set`" + p.where(key));
  }
  auto positive = [&](const char* name, double* out, bool required) {
    const YAML::Node v = n[name];
    if (!v) {
      if (required) p.errors.add(std::string("search.") + name, "required: a positive number" + p.where(n));
      return;
    }
    char* end = nullptr;
    const std::string text = v.IsScalar() ? v.Scalar() : "";
    const double x = text.empty() ? NAN : std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(x) || x <= 0)
      p.errors.add(std::string("search.") + name, "expected a positive number, got '" + scalar_label(v) + "'" + p.where(v));
    else
      *out = x;
  };
  positive("low", &s.low, true);
  positive("high", &s.high, true);
  positive("factor", &s.factor, false);
  if (s.low > 0 && s.high > 0 && !(s.high > s.low))
    p.errors.add("search.high", "must be above search.low" + p.where(n["high"]));
  if (n["factor"] && !(s.factor > 1) && s.factor > 0)
    p.errors.add("search.factor", "must be above 1 (the bracket's ratio at which the search stops)" + p.where(n["factor"]));
  if (const YAML::Node c = n["criterion"]) {
    if (!c.IsScalar() || !is_edge_criterion(c.Scalar()))
      p.errors.add("search.criterion", "expected loss_divergence, logit_instability or degradation, got '" +
                                           scalar_label(c) + "'" + p.where(c));
    else
      s.criterion = c.Scalar();
  }
  positive("margin", &s.margin, false);
  if (n["margin"] && s.criterion != "degradation")
    p.errors.add("search.margin", "only used with criterion: degradation" + p.where(n["margin"]));
  // Both ends must be values the key takes (a real number in its range).
  if (p.errors.items.size() == errors_before) {
    for (double v : {s.low, s.high}) {
      std::string assignment;
      p.check_entry("search", s.key, key, YAML::Node(edge_value_label(v)), &assignment);
    }
    if (sweep_owned_key(s.key) || s.key == "run.seed")
      p.errors.add("search.key", s.key + " cannot be searched" + p.where(key));
  }
  spec->has_search = true;
  spec->search = s;
}
}  // namespace

bool sweep_owned_key(const std::string& key) {
  return key == "run.name" || key == "run.out_dir" || key == "run.overwrite" || key == "train.threads";
}

static SweepSpec load_sweep_spec_unchecked(const std::string& path, const std::vector<std::string>& extra_overrides);

// A sweep file is read like a config: whatever yaml-cpp throws while the
// parser walks it (a key that is a list, a value of the wrong shape) is a
// ConfigError naming the file and line.
SweepSpec load_sweep_spec(const std::string& path, const std::vector<std::string>& extra_overrides) {
  try {
    return load_sweep_spec_unchecked(path, extra_overrides);
  } catch (const YAML::Exception& ex) {
    ConfigErrors e;
    e.add(path, "YAML error at line " + std::to_string(ex.mark.line + 1) + ": " + ex.msg);
    throw ConfigError(e);
  }
}

static SweepSpec load_sweep_spec_unchecked(const std::string& path, const std::vector<std::string>& extra_overrides) {
  Parser p;
  p.file = path;
  auto fail = [&](const std::string& what) {
    ConfigErrors e;
    e.add(path, what);
    throw ConfigError(e);
  };
  if (!std::ifstream(path)) fail("cannot open sweep file (does it exist and is it readable?)");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::ParserException& ex) {
    fail("YAML syntax error at line " + std::to_string(ex.mark.line + 1) + ", column " +
         std::to_string(ex.mark.column + 1) + ": " + ex.msg);
  }
  if (!root.IsMap()) fail("expected a mapping with base, grid and optionally name, out_dir, set, variants, seeds");

  SweepSpec spec;
  spec.file = path;
  for (const auto& item : root) {
    const std::string key = item.first.as<std::string>();
    if (std::find(kTopKeys.begin(), kTopKeys.end(), key) != kTopKeys.end()) continue;
    std::string best;
    for (const auto& k : kTopKeys)
      if (edit_distance(key, k) <= 2) best = k;
    p.errors.add(key, "unknown sweep key" + p.where(item.first) + (best.empty() ? "" : "; did you mean " + best + "?") +
                          " (sweep keys: base, name, out_dir, early_stop, set, variants, sizes, grid, seeds, max_points, search)");
  }

  const YAML::Node base = root["base"];
  if (!base || !base.IsScalar() || base.Scalar().empty()) {
    p.errors.add("base", "required: the config every point starts from, relative to the sweep file" +
                             (base ? p.where(base) : " (" + path + ")"));
  } else {
    const std::string b = base.Scalar();
    spec.base_config = normalize_path(b[0] == '/' ? b : dir_name(path) + "/" + b);
    if (!std::ifstream(spec.base_config))
      p.errors.add("base", "cannot open " + spec.base_config + " (relative to the sweep file's directory)" + p.where(base));
  }

  std::string stem = base_name(path);
  for (const char* ext : {".yaml", ".yml"})
    if (stem.size() > std::string(ext).size() && stem.substr(stem.size() - std::string(ext).size()) == ext)
      stem.resize(stem.size() - std::string(ext).size());
  spec.name = stem;
  if (const YAML::Node n = root["name"]) {
    if (!n.IsScalar() || n.Scalar().empty()) p.errors.add("name", "expected a non-empty string" + p.where(n));
    else spec.name = n.Scalar();
  }
  spec.out_dir = "runs/sweeps/" + spec.name;
  if (const YAML::Node n = root["out_dir"]) {
    if (!n.IsScalar() || n.Scalar().empty()) p.errors.add("out_dir", "expected a directory path" + p.where(n));
    else spec.out_dir = n.Scalar();
  }
  if (const YAML::Node n = root["early_stop"]) {
    if (!n.IsScalar() || (n.Scalar() != "true" && n.Scalar() != "false"))
      p.errors.add("early_stop", "expected true or false" + p.where(n));
    else spec.early_stop = n.Scalar() == "true";
  }
  if (const YAML::Node n = root["max_points"]) {
    int64_t v = 0;
    if (!n.IsScalar() || !parse_count(n.Scalar(), &v))
      p.errors.add("max_points", "expected a whole number of points, at least 1" + p.where(n));
    else spec.max_points = v;
  }
  // Early stop first, so that `set` may still say otherwise.
  if (spec.early_stop) spec.common.push_back("monitor.stop_on_divergence=true");

  std::vector<std::string> set_keys;
  if (const YAML::Node n = root["set"]) {
    if (!n.IsMap()) p.errors.add("set", "expected a mapping of config keys to values" + p.where(n));
    else p.collect("set", "", n, &spec.common, &set_keys);
  }
  for (const auto& o : extra_overrides) {
    const std::string key = o.substr(0, o.find('='));
    ConfigErrors e;
    p.schema.apply_override(o, e);
    if (sweep_owned_key(key)) e.add(key, "is set by keel sweep for every point (from --set)");
    for (const auto& item : e.items) p.errors.items.push_back(item);
    if (e.empty()) spec.common.push_back(o);
  }

  // `variants` and `sizes`: named bundles of config keys, one axis each.
  std::set<std::string> axis_keys;
  auto bundles = [&](const char* section, const char* axis_key, const char* short_name, const char* what) {
    const YAML::Node n = root[section];
    if (!n) return;
    if (!n.IsMap() || n.size() == 0) {
      p.errors.add(section, std::string("expected a mapping of ") + what + " names to mappings of config keys" + p.where(n));
      return;
    }
    SweepAxis axis{axis_key, short_name, {}};
    std::set<std::string> labels;
    std::set<std::string> own_keys;
    for (const auto& v : n) {
      const std::string name = std::string(section) + "." + v.first.as<std::string>();
      AxisValue value;
      value.label = sanitize_label(v.first.as<std::string>(), /*starts_name=*/short_name[0] == '\0');
      if (!labels.insert(value.label).second) p.errors.add(name, std::string("duplicate ") + what + " name" + p.where(v.first));
      std::vector<std::string> keys;
      if (v.second.IsNull()) {
        // no keys: the base config itself
      } else if (!v.second.IsMap()) {
        p.errors.add(name, "expected a mapping of config keys to values (or {} for the base config)" + p.where(v.second));
      } else {
        p.collect(name, "", v.second, &value.overrides, &keys);
      }
      for (const auto& k : keys)
        if (axis_keys.count(k)) p.errors.add(name + "." + k, "is also set by a variant; an axis owns its keys" + p.where(v.first));
      own_keys.insert(keys.begin(), keys.end());
      axis.values.push_back(value);
    }
    axis_keys.insert(own_keys.begin(), own_keys.end());
    spec.axes.push_back(axis);
  };
  bundles("variants", "variant", "", "variant");
  // Model sizes (Wortsman et al. 2023, Fig. 1): bundles of d_model / n_layers / heads.
  bundles("sizes", "size", "size", "size");

  const YAML::Node grid = root["grid"];
  if (grid && !grid.IsMap()) p.errors.add("grid", "expected a mapping of config keys to lists of values" + p.where(grid));
  if (grid && grid.IsMap()) {
    for (const auto& item : grid) {
      const std::string key = item.first.as<std::string>();
      if (!item.second.IsSequence() || item.second.size() == 0) {
        p.errors.add("grid." + key, "expected a non-empty list of values, e.g. [1e-3, 3e-3]" + p.where(item.second));
        continue;
      }
      if (axis_keys.count(key)) p.errors.add("grid." + key, "is also set by a variant or size" + p.where(item.first));
      SweepAxis axis{key, "", {}};
      std::set<std::string> labels;
      for (const auto& v : item.second) {
        AxisValue value;
        std::vector<std::string> keys;
        std::string assignment;
        if (!p.check_entry("grid", key, item.first, v, &assignment)) break;
        value.overrides.push_back(assignment);
        value.label = sanitize_label(scalar_label(v));
        if (!labels.insert(value.label).second)
          p.errors.add("grid." + key, "value " + scalar_label(v) + " is listed twice" + p.where(v));
        axis.values.push_back(value);
      }
      axis_keys.insert(key);
      spec.axes.push_back(axis);
    }
  }
  if (const YAML::Node n = root["seeds"]) {
    if (axis_keys.count("run.seed")) p.errors.add("seeds", "run.seed is already a grid key" + p.where(n));
    if (!n.IsSequence() || n.size() == 0) {
      p.errors.add("seeds", "expected a non-empty list of seeds, e.g. [1, 2, 3]" + p.where(n));
    } else {
      SweepAxis axis{"run.seed", "seed", {}};
      for (const auto& v : n) {
        std::string assignment;
        if (!p.check_entry("seeds", "run.seed", v, v, &assignment)) break;
        axis.values.push_back({sanitize_label(v.Scalar()), {assignment}});
      }
      axis_keys.insert("run.seed");
      spec.axes.push_back(axis);
    }
  }
  for (const auto& key : set_keys)
    if (axis_keys.count(key)) p.errors.add("set." + key, "is also an axis of the grid (variants, sizes, grid or seeds)");
  if (const YAML::Node n = root["search"]) parse_search(p, n, axis_keys, set_keys, &spec);
  // From the axis sizes alone: no point is made for a grid that is refused.
  if (grid_size(spec.axes) > static_cast<uint64_t>(spec.max_points))
    p.errors.add("max_points", too_many_points(spec) + " (" + path + ")");
  if (spec.axes.empty() && !spec.has_search && p.errors.empty())
    p.errors.add("grid", "the sweep has no axis: give `grid`, `variants`, `sizes`, `seeds` or `search`" + p.where(root));

  // Short names: the key's last component unless two axes share it.
  for (auto& axis : spec.axes) {
    if (axis.key == "variant" || axis.key == "size" || axis.key == "run.seed") continue;  // named when made
    const std::string last = last_component(axis.key);
    int same = 0;
    for (const auto& other : spec.axes) same += other.key != "variant" && other.key != "size" && last_component(other.key) == last;
    axis.short_name = same > 1 ? axis.key : last;
  }
  if (spec.has_search) {
    const std::string last = last_component(spec.search.key);
    bool clash = false;
    for (const auto& axis : spec.axes) clash = clash || axis.short_name == last;
    spec.search.short_name = clash ? spec.search.key : last;
  }
  if (!p.errors.empty()) throw ConfigError(p.errors);
  return spec;
}

uint64_t grid_size(const std::vector<SweepAxis>& axes) {
  uint64_t n = 1;
  for (const auto& a : axes) {
    const uint64_t k = a.values.size();
    if (k != 0 && n > UINT64_MAX / k) return UINT64_MAX;
    n *= k;
  }
  return n;
}

std::string point_name(const std::vector<SweepAxis>& axes, const std::vector<size_t>& value_index) {
  std::string name;
  for (size_t a = 0; a < axes.size(); ++a) {
    const auto& axis = axes[a];
    // A single seed says nothing about the point; leave it out of the name.
    if (axis.key == "run.seed" && axis.values.size() == 1) continue;
    const std::string& label = axis.values[value_index[a]].label;
    if (!name.empty()) name += "_";
    name += axis.short_name.empty() ? label : axis.short_name + "=" + label;
  }
  return name.empty() ? "point" : name;
}

SweepPoint search_point(const SweepSpec& spec, const SweepPoint& group, const std::string& label) {
  // The search key's axis, of one value, goes before the seeds.
  std::vector<SweepAxis> axes = spec.axes;
  std::vector<size_t> index = group.index;
  size_t at = axes.size();
  if (!axes.empty() && axes.back().key == "run.seed") --at;
  const std::string assignment = spec.search.key + "=" + label;
  axes.insert(axes.begin() + static_cast<std::ptrdiff_t>(at),
              SweepAxis{spec.search.key, spec.search.short_name, {AxisValue{sanitize_label(label), {assignment}}}});
  index.insert(index.begin() + static_cast<std::ptrdiff_t>(at), 0);
  SweepPoint point;
  point.name = point_name(axes, index);
  point.overrides = group.overrides;
  point.overrides.push_back(assignment);
  point.labels = group.labels;
  point.labels[spec.search.key] = label;
  point.index = group.index;
  point.config = load_config(spec.base_config, point.overrides);
  return point;
}

std::vector<SweepPoint> expand_grid(const SweepSpec& spec) {
  const uint64_t size = grid_size(spec.axes);
  if (size > static_cast<uint64_t>(spec.max_points)) {
    ConfigErrors e;
    e.add("max_points", too_many_points(spec) + " (" + spec.file + ")");
    throw ConfigError(e);
  }
  // Every step below is constant work per point (a set insert, a map entry
  // per distinct error): planning stays linear in the points.
  std::vector<SweepPoint> points;
  if (size == 0) return points;  // an empty axis (refused when the file is read)
  points.reserve(static_cast<size_t>(size));
  std::map<std::string, std::vector<std::string>> problems;  // error -> points
  std::vector<std::string> problem_order;
  std::vector<size_t> idx(spec.axes.size(), 0);
  while (true) {
    SweepPoint point;
    point.name = point_name(spec.axes, idx);
    point.overrides = spec.common;
    point.index = idx;
    for (size_t a = 0; a < spec.axes.size(); ++a) {
      const auto& v = spec.axes[a].values[idx[a]];
      point.overrides.insert(point.overrides.end(), v.overrides.begin(), v.overrides.end());
      point.labels[spec.axes[a].key] = v.label;
    }
    try {
      point.config = load_config(spec.base_config, point.overrides);
    } catch (const ConfigError& e) {
      for (const auto& item : e.errors().items) {
        if (!problems.count(item)) problem_order.push_back(item);
        problems[item].push_back(point.name);
      }
    }
    points.push_back(std::move(point));
    // Odometer over the axes, the last one fastest.
    size_t a = spec.axes.size();
    while (a > 0) {
      if (++idx[a - 1] < spec.axes[a - 1].values.size()) break;
      idx[a - 1] = 0;
      --a;
    }
    if (a == 0) break;
  }
  ConfigErrors errors;
  std::set<std::string> names;
  for (const auto& p : points) {
    // A point is a directory under the sweep's: "." or ".." would be the
    // sweep directory or its parent, which re-running a point empties.
    if (p.name == "." || p.name == "..")
      errors.add("sweep " + spec.file, "a point would be named '" + p.name +
                                           "', which is not a plain directory name: rename the variant or value");
    if (!names.insert(p.name).second)
      errors.add("sweep " + spec.file, "two points are both named " + p.name + " (values that differ only in "
                                       "characters not allowed in a directory name)");
  }
  for (const auto& item : problem_order) {
    const auto& which = problems[item];
    std::string list;
    for (size_t i = 0; i < which.size() && i < 4; ++i) list += (i ? ", " : "") + which[i];
    if (which.size() > 4) list += ", ... (" + std::to_string(which.size()) + " points)";
    errors.items.push_back(item + " [base " + spec.base_config + " with the sweep's values; points: " + list + "]");
  }
  if (!errors.empty()) throw ConfigError(errors);
  return points;
}

}  // namespace keel
