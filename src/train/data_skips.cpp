#include "train/data_skips.h"

#include "util/error.h"
#include "util/json.h"

namespace keel {

int64_t DataSkips::data_step(int64_t index) const {
  int64_t step = index;
  for (const auto& r : ranges_)
    if (r.after_step <= index) step += r.batches;
  return step;
}

int64_t DataSkips::rewinds() const {
  int64_t n = 0;
  for (const auto& r : ranges_) n += r.spike_step > 0 ? 1 : 0;
  return n;
}

nlohmann::json DataSkips::to_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : ranges_)
    out.push_back({{"after_step", r.after_step}, {"batches", r.batches}, {"spike_step", r.spike_step}});
  return out;
}

void DataSkips::load_state(const nlohmann::json& extra, const std::string& where) {
  if (!extra.contains("data_skips")) return;
  const auto& list = extra["data_skips"];
  constexpr size_t kMostRanges = 100000;  // a hostile file cannot make every data_step() slow
  if (!list.is_array() || list.size() > kMostRanges)
    throw CheckpointError(where + ": data_skips is not a list of at most 100000 ranges");
  std::vector<SkipRange> ranges;
  for (const auto& r : list) {
    auto field = [&](const char* name, int64_t least) {
      if (!r.is_object() || !r.contains(name) || !r[name].is_number_integer() || json_int<int64_t>(r[name]) < least ||
          json_int<int64_t>(r[name]) > (int64_t{1} << 40))
        throw CheckpointError(where + ": data_skips has a range whose \"" + name + "\" is not an integer >= " +
                              std::to_string(least));
      return json_int<int64_t>(r[name]);
    };
    ranges.push_back({field("after_step", 0), field("batches", 1), field("spike_step", 0)});
  }
  ranges_ = std::move(ranges);
}

}  // namespace keel
