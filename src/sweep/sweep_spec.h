// A sweep file: a base config and a grid of config values; each grid point
// is one ordinary `keel train` run in SWEEP_DIR/<point-name>/.
//
//   base: ../default.yaml          # relative to the sweep file
//   name: qknorm-lr-cpu            # default: the file name without .yaml
//   out_dir: runs/sweeps/qknorm    # default: runs/sweeps/<name>
//   early_stop: true               # monitor.stop_on_divergence for every point
//   set: {train.max_steps: 250}    # every point (nested or dotted keys)
//   variants:                      # optional: named bundles of keys, one axis
//     rms-head: {model.qk_norm.type: rms, model.qk_norm.scope: head}
//   sizes:                         # optional: named model sizes, one axis
//     d256: {model.d_model: 256, model.n_layers: 4, model.n_heads: 4}
//   grid:                          # key -> list of values, one axis each
//     train.lr: [1e-3, 3e-3, 1e-2]
//   seeds: [1, 2]                  # optional: run.seed axis
//   max_points: 10000              # optional: the most points the grid may have
//   search: {key: train.lr, low: 1e-2, high: 3, factor: 1.25, criterion: loss_divergence}
//                                  # optional: bisect for the stability edge (edge_search.h)
//
// Points are the product of the axes in that order (variants, sizes, grid
// keys in file order, seeds). A point is named by its values:
// "rms-head_size=d256_lr=1e-3", with "_seed=2" when there are several seeds.
// A key belongs to one axis: a size may not set what a variant sets.
//
// A grid larger than max_points (kDefaultMaxPoints unless the file says) is
// refused from the axis sizes alone, before any point is made: a typo such as
// a 1000-value list should not spend minutes and gigabytes on a plan.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/config.h"
#include "analysis/edge_search.h"

namespace keel {

constexpr int64_t kDefaultMaxPoints = 10000;

struct AxisValue {
  std::string label;                   // "rms-head", "1e-3": as written in the file
  std::vector<std::string> overrides;  // "key=value", as `--set` takes them
};

struct SweepAxis {
  std::string key;         // "variant", "size", "train.lr", "run.seed"
  std::string short_name;  // in point names: "" for variants, "size", "lr", "seed"
  std::vector<AxisValue> values;
};

struct SweepSpec {
  std::string file;                  // the sweep file, as given
  std::string name;
  std::string base_config;           // path from the current directory
  std::string out_dir;               // the sweep directory
  std::vector<std::string> common;   // overrides of every point: `set`, early_stop, then the CLI's --set
  std::vector<SweepAxis> axes;
  bool early_stop = true;
  int64_t max_points = kDefaultMaxPoints;
  // With `search:` the axes make the groups, and each group's points are
  // the values the edge search asks for (not known in advance).
  bool has_search = false;
  EdgeSearchSpec search;
};

struct SweepPoint {
  std::string name;
  std::vector<std::string> overrides;          // common, then one axis value after another
  std::map<std::string, std::string> labels;   // axis key -> value label
  std::vector<size_t> index;                   // value index on each axis (point_name's)
  Config config;                               // resolved (run.name/out_dir not yet set)
};

// Parses and checks a sweep file. Errors name the key path and file:line;
// throws ConfigError listing all of them. `extra_overrides` (the CLI's --set)
// apply to every point after the file's `set`.
SweepSpec load_sweep_spec(const std::string& path, const std::vector<std::string>& extra_overrides = {});

// Every point of the grid with its resolved config, in time and memory linear
// in the number of points. Throws ConfigError when the grid has more than
// spec.max_points points, or when a point's config is invalid (e.g.
// train.min_lr above a grid's train.lr), naming the points.
std::vector<SweepPoint> expand_grid(const SweepSpec& spec);

// The number of points of a grid: the product of its axis sizes, UINT64_MAX
// when that overflows. No point is made.
uint64_t grid_size(const std::vector<SweepAxis>& axes);

// A group's point at one value of the search key: its name has the value
// where the key's axis would be (before the seed: "rms-head_lr=0.316_seed=2").
// Throws ConfigError when the value makes the config invalid.
SweepPoint search_point(const SweepSpec& spec, const SweepPoint& group, const std::string& label);

// "rms-head_lr=1e-3": the labels of a point's axis values.
std::string point_name(const std::vector<SweepAxis>& axes, const std::vector<size_t>& value_index);

// The config keys a sweep sets itself (run.name, run.out_dir, ...): a sweep
// file may not set them.
bool sweep_owned_key(const std::string& key);

}  // namespace keel
