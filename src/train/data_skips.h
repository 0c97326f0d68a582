// The training data order under skipped batches. Batch `step` of a run is a
// pure function of the step (data/loader.h); a run that skipped batches
// (data.skip_batches, or monitor.on_spike: rewind) reads batch
// data_step(step) instead, a pure function of the step and this list. The
// list is part of the run's state: checkpoints carry it, so a resume after a
// rewind reads the same batches as the run that rewound.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "config/data_config.h"

namespace keel {

class DataSkips {
 public:
  explicit DataSkips(std::vector<SkipRange> ranges = {}) : ranges_(std::move(ranges)) {}

  // The data batch read by 0-based training step `index`: index plus the
  // batches of every range whose after_step <= index.
  int64_t data_step(int64_t index) const;
  void add(const SkipRange& range) { ranges_.push_back(range); }
  const std::vector<SkipRange>& ranges() const { return ranges_; }
  int64_t rewinds() const;  // ranges a rewind added (spike_step > 0)

  nlohmann::json to_json() const;  // [{"after_step", "batches", "spike_step"}, ...]
  // Into / from a checkpoint's state ("data_skips"). A checkpoint without
  // the entry (older keel) leaves the list as it is; a malformed one is a
  // CheckpointError naming `where`.
  void save_state(nlohmann::json& extra) const { extra["data_skips"] = to_json(); }
  void load_state(const nlohmann::json& extra, const std::string& where);

 private:
  std::vector<SkipRange> ranges_;
};

}  // namespace keel
