// `keel bench`: the training step of `keel train` (same model, AdamW, clipping,
// autocast, loss and data loader), timed. W warm-up steps, then N timed steps
// (each ended by a device sync, so each step's time is its own), then a few
// separate "breakdown" steps with a sync after every phase (data, forward,
// backward, communication, optimizer), so the headline figures carry no
// per-phase syncs. Also the cost of the monitoring forward (monitor.every).
//
// Single process only: under torchrun / keel launch (RANK, WORLD_SIZE set)
// it refuses, and the communication phase is reported as 0.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"

namespace keel {

struct BenchOptions {
  int64_t steps = 20;            // timed steps
  int64_t warmup = 3;            // untimed steps first (allocator, autotuning, caches)
  int64_t breakdown_steps = 5;   // extra steps timed phase by phase; 0 = none
  int64_t monitor_repeats = 3;   // monitoring forwards timed; 0 = skip
  double peak_tflops = 0;        // > 0: MFU against this peak instead of the table / measured one
  bool random_data = false;      // uniform random tokens instead of data.dir (no data preparation)
  bool count_ops = true;         // one more step with its operators counted (train/op_counter.h)
  std::string json_path;         // "" = <run.out_dir>/bench/<config file name>.json
  std::string config_name;       // for the default JSON path and the record
};

// Runs the benchmark, prints a summary on stdout, writes the JSON record and
// returns it. Throws DistError when started as one rank of a distributed job.
nlohmann::json run_bench(const Config& config, const BenchOptions& options);

// Median of `v` (0 when empty).
double median_of(std::vector<double> v);

}  // namespace keel
