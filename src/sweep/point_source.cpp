#include "sweep/point_source.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "analysis/edge_criteria.h"
#include "analysis/edge_report.h"
#include "sweep/sweep_manifest.h"
#include "analysis/sweep_report.h"
#include "train/run_dir.h"
#include "util/fs.h"
#include "util/text.h"

namespace keel {

std::optional<size_t> GridSource::next() {
  if (next_ >= queue_.size()) return std::nullopt;
  return queue_[next_++];
}

int64_t GridSource::resume_step(size_t point) const {
  auto it = resume_.find(point);
  return it == resume_.end() ? 0 : it->second;
}

double GridSource::remaining_steps() const {
  double steps = 0;
  for (size_t k = next_; k < queue_.size(); ++k)
    steps += static_cast<double>(points_[queue_[k]].config.train.max_steps - resume_step(queue_[k]));
  return steps;
}

void EdgeSearchSource::Group::add_result(const EdgeSearchSpec& spec, double value, const std::string& run_dir,
                                         int64_t vocab_size) {
  PointRow row;
  row.vocab_size = vocab_size;  // from the point's config, as the report takes it
  row.lr = value;
  read_run_summary(run_dir, row);
  results.push_back(row);
  std::vector<const PointRow*> peers;
  for (const auto& r : results) peers.push_back(&r);
  known.clear();
  for (const auto& r : results) known.push_back({r.lr, run_fails(r, spec.criterion, peers, spec.margin)});
}

namespace {

// The search key's value a point's label gives; NaN when it is no positive number.
double label_value(const SweepPoint& p, const std::string& key) {
  auto it = p.labels.find(key);
  if (it == p.labels.end()) return NAN;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  return (end && *end == '\0' && std::isfinite(v) && v > 0) ? v : NAN;
}

// Whether `p` has the group's label on every axis of the grid.
bool in_group(const SweepSpec& spec, const SweepPoint& group, const std::map<std::string, std::string>& labels) {
  for (const auto& axis : spec.axes) {
    auto a = group.labels.find(axis.key), b = labels.find(axis.key);
    if (a == group.labels.end() || b == labels.end() || a->second != b->second) return false;
  }
  return true;
}

}  // namespace

std::vector<SweepPoint> reusable_points(const SweepSpec& spec, const std::vector<SweepPoint>& groups,
                                        const nlohmann::json& old_manifest) {
  std::vector<SweepPoint> out;
  if (!old_manifest.is_object() || !old_manifest.contains("points") || !old_manifest["points"].is_array()) return out;
  for (const auto& p : old_manifest["points"]) {
    if (!p.is_object() || !p.contains("labels") || !p["labels"].is_object() || !p.contains("name") ||
        !p["name"].is_string())
      continue;
    std::map<std::string, std::string> labels;
    for (auto it = p["labels"].begin(); it != p["labels"].end(); ++it)
      if (it.value().is_string()) labels[it.key()] = it.value().get<std::string>();
    auto value = labels.find(spec.search.key);
    if (value == labels.end()) continue;
    for (const auto& g : groups) {
      if (!in_group(spec, g, labels)) continue;
      try {
        SweepPoint point = search_point(spec, g, value->second);
        if (std::isnan(label_value(point, spec.search.key))) break;
        point.name = p["name"].get<std::string>();
        out.push_back(std::move(point));
      } catch (const ConfigError&) {
        // a value today's config refuses: not reusable
      }
      break;
    }
  }
  return out;
}

std::vector<EdgeSearchSource::Group> search_groups(const SweepSpec& spec, const std::vector<SweepPoint>& groups,
                                                   const std::vector<SweepPoint>& points, const std::string& sweep_dir) {
  std::vector<EdgeSearchSource::Group> out;
  for (const auto& g : groups) {
    EdgeSearchSource::Group group;
    group.base = g;
    out.push_back(std::move(group));
  }
  for (size_t i = 0; i < points.size(); ++i) {
    const double v = label_value(points[i], spec.search.key);
    if (std::isnan(v)) continue;
    for (auto& g : out) {
      if (!in_group(spec, g.base, points[i].labels)) continue;
      g.points.push_back(i);
      const std::string dir = sweep_dir + "/" + points[i].name;
      if (point_status(dir).state == PointState::finished)
        g.add_result(spec.search, v, dir, points[i].config.model.vocab_size);
      break;
    }
  }
  return out;
}

EdgeSearchSource::EdgeSearchSource(const SweepSpec& spec, const std::string& sweep_dir,
                                   std::vector<SweepPoint>& points, std::vector<Group> groups,
                                   std::function<void()> on_new_point)
    : spec_(spec), dir_(sweep_dir), points_(points), groups_(std::move(groups)), on_new_point_(std::move(on_new_point)) {
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i : groups_[g].points) {
      group_of_[i] = g;
      value_of_[i] = label_value(points_[i], spec_.search.key);
    }
}

size_t EdgeSearchSource::point_for(size_t g, double value) {
  for (size_t i : groups_[g].points)
    if (same_edge_value(value_of_[i], value)) return i;
  SweepPoint point = search_point(spec_, groups_[g].base, edge_value_label(value));
  points_.push_back(std::move(point));
  const size_t i = points_.size() - 1;
  groups_[g].points.push_back(i);
  group_of_[i] = g;
  value_of_[i] = value;
  on_new_point_();
  return i;
}

std::optional<size_t> EdgeSearchSource::next() {
  for (size_t k = 0; k < groups_.size(); ++k) {
    const size_t g = (cursor_ + k) % groups_.size();
    Group& group = groups_[g];
    if (!group.stuck.empty()) continue;
    for (double v : next_edge_values(spec_.search, group.known)) {
      bool running = false;
      for (size_t r : group.running) running = running || same_edge_value(value_of_[r], v);
      if (running) continue;
      size_t i = 0;
      try {
        i = point_for(g, v);
      } catch (const ConfigError& e) {
        group.stuck = "the value " + edge_value_label(v) + " makes an invalid config: " + e.what();
        break;
      }
      const std::string dir = dir_ + "/" + points_[i].name;
      const PointStatus st = point_status(dir);
      if (st.state == PointState::finished) {  // run before (a re-run of the sweep): a result, not a run
        group.add_result(spec_.search, v, dir, points_[i].config.model.vocab_size);
        return next();
      }
      if (st.state == PointState::resumable) {
        resume_[i] = st.step;
      } else if (path_exists(dir)) {
        // Starting over empties the directory, which keel does only to its own runs.
        if (const std::string why = why_not_replaceable_run(dir); !why.empty()) {
          group.stuck = "refusing to empty " + dir + ": " + why;
          continue;
        }
        remove_tree(dir);
      }
      group.running.push_back(i);
      cursor_ = (g + 1) % groups_.size();
      return i;
    }
  }
  return std::nullopt;
}

int64_t EdgeSearchSource::resume_step(size_t point) const {
  auto it = resume_.find(point);
  return it == resume_.end() ? 0 : it->second;
}

void EdgeSearchSource::ended(size_t point, bool finished) {
  Group& group = groups_[group_of_.at(point)];
  group.running.erase(std::remove(group.running.begin(), group.running.end(), point), group.running.end());
  resume_.erase(point);
  if (!finished) {
    // Failed or interrupted: no result, and bisecting on without it would
    // pick other values. The group waits for a re-run of the sweep.
    if (group.stuck.empty()) group.stuck = points_[point].name + " did not finish";
    return;
  }
  const std::string dir = dir_ + "/" + points_[point].name;
  group.add_result(spec_.search, value_of_.at(point), dir, points_[point].config.model.vocab_size);
}

size_t EdgeSearchSource::waiting() const {
  size_t n = 0;
  for (const auto& g : groups_)
    if (g.stuck.empty() && g.running.empty() && !next_edge_values(spec_.search, g.known).empty()) ++n;
  return n;
}

double EdgeSearchSource::remaining_steps() const {
  double steps = 0;
  const size_t most = edge_max_runs(spec_.search);
  for (const auto& g : groups_) {
    if (!g.stuck.empty() || next_edge_values(spec_.search, g.known).empty()) continue;
    const size_t used = g.known.size() + g.running.size();
    steps += static_cast<double>(most > used ? most - used : 1) * static_cast<double>(g.base.config.train.max_steps);
  }
  return steps;
}

std::string EdgeSearchSource::progress() const {
  size_t ended = 0;
  for (const auto& g : groups_) ended += !g.stuck.empty() || next_edge_values(spec_.search, g.known).empty();
  return strf("edges: %zu/%zu groups ended", ended, groups_.size());
}

}  // namespace keel
