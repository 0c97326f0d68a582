// The coordinate check (Yang et al. 2022, Tensor Programs V; the `mup`
// package's get_coord_data): train the same model at several widths (and,
// for CompleteP, depths) for a few steps from one seed on the same batches,
// and record each layer's activation RMS at every step. Under the standard
// parametrization the logits (and later layers) grow with width after the
// first updates; under µP they stay flat; under CompleteP the same holds
// across depths.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/loader.h"

namespace keel {

struct CoordCheckOptions {
  std::vector<int64_t> widths;  // d_model values (the config's own when empty)
  std::vector<int64_t> depths;  // n_layers values (the config's own when empty)
  int64_t steps = 5;            // optimizer steps; activations are read at steps 0..steps
};

struct CoordRecord {
  int64_t width = 0, depth = 0, step = 0;
  std::string layer;  // "embed", "block<i>.attn", "block<i>.mlp", "block<i>.out", "hidden", "logits"
  double rms = 0.0;
};

// The config for one (width, depth): d_model and n_layers set; an explicit
// d_ff scaled with the width; heads added with width when model.mup.base_head_dim
// fixes head_dim (n_kv_heads in proportion). Throws ConfigError naming the key
// when the result is not a valid model.
Config coord_check_config(const Config& base, int64_t width, int64_t depth);

// Runs the check on the CPU (or the config's device) at train.lr, constant
// (no warm-up, no decay: the check is about the first updates' size).
// `batch(step)` gives the batch of each step, the same for every size.
// `progress` (optional) is called after each size with a line to print.
std::vector<CoordRecord> coord_check(const Config& config, const CoordCheckOptions& options,
                                     const std::function<Batch(int64_t step)>& batch,
                                     const std::function<void(const std::string&)>& progress = {});

// Slope of log(rms) against log(size) by least squares, for one layer at one
// step across the widths (by_depth: across the depths).
double coord_slope(const std::vector<CoordRecord>& records, const std::string& layer, int64_t step, bool by_depth);

}  // namespace keel
