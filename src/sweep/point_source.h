// What `keel sweep` starts next. A grid knows its points in advance
// (GridSource); the edge search (edge_search.h) knows only the next values
// each group needs once the runs before them have ended (EdgeSearchSource).
// The runner (sweep_runner.cpp) launches, reaps and reports progress alike
// for both; points live in one vector the source may grow.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/sweep_report.h"
#include "sweep/sweep_spec.h"

namespace keel {

class PointSource {
 public:
  virtual ~PointSource() = default;
  // The next point to start now (an index into the points), or none: every
  // point left waits on a running one, or nothing is left.
  virtual std::optional<size_t> next() = 0;
  virtual int64_t resume_step(size_t point) const = 0;  // its checkpoint's step, 0 to start
  // A started point ended; `finished`: it completed or diverged (a result).
  virtual void ended(size_t point, bool finished) = 0;
  virtual size_t waiting() const = 0;          // points known to be still to start
  virtual double remaining_steps() const = 0;  // their steps (at most, for a search)
  virtual std::string progress() const { return ""; }  // added to the progress line
};

// A fixed list of points, started in order.
class GridSource : public PointSource {
 public:
  GridSource(const std::vector<SweepPoint>& points, std::vector<size_t> queue, std::map<size_t, int64_t> resume)
      : points_(points), queue_(std::move(queue)), resume_(std::move(resume)) {}
  std::optional<size_t> next() override;
  int64_t resume_step(size_t point) const override;
  void ended(size_t, bool) override {}
  size_t waiting() const override { return queue_.size() - next_; }
  double remaining_steps() const override;

 private:
  const std::vector<SweepPoint>& points_;
  std::vector<size_t> queue_;
  std::map<size_t, int64_t> resume_;
  size_t next_ = 0;
};


// The edge search of every group: each group's next values become points
// (search_point), run when the results before them are in. A value whose
// directory holds a finished run is a result at once (never run again); one
// with a checkpoint resumes. `on_new_point` is called before a new point is
// handed to the runner (sweep.json records it first).
class EdgeSearchSource : public PointSource {
 public:
  struct Group {
    SweepPoint base;                 // the grid point without the search key
    std::vector<size_t> points;      // its points made so far (indices)
    std::vector<EdgeProbe> known;    // results so far, judged by the search's criterion
    std::vector<PointRow> results;   // the finished runs behind them (degradation compares them)
    std::vector<size_t> running;     // points started and not ended
    std::string stuck;               // why the search of this group stopped short ("" if it did not)
    // The finished run at `value` in RUN_DIR: added to results, and every
    // result judged again (a degradation verdict moves with the runs below it).
    // Throws RunDirError for a damaged summary.json.
    void add_result(const EdgeSearchSpec& spec, double value, const std::string& run_dir, int64_t vocab_size);
  };
  EdgeSearchSource(const SweepSpec& spec, const std::string& sweep_dir, std::vector<SweepPoint>& points,
                   std::vector<Group> groups, std::function<void()> on_new_point);

  std::optional<size_t> next() override;
  int64_t resume_step(size_t point) const override;
  void ended(size_t point, bool finished) override;
  size_t waiting() const override;
  double remaining_steps() const override;
  std::string progress() const override;

  const std::vector<Group>& groups() const { return groups_; }

 private:
  // The point at `value` of group g: known, or made now.
  size_t point_for(size_t g, double value);

  const SweepSpec& spec_;
  std::string dir_;
  std::vector<SweepPoint>& points_;
  std::vector<Group> groups_;
  std::function<void()> on_new_point_;
  std::map<size_t, size_t> group_of_;         // point -> group
  std::map<size_t, double> value_of_;         // point -> search value
  std::map<size_t, int64_t> resume_;
  size_t cursor_ = 0;                         // round robin over groups
};

// The search's groups with what the sweep directory already holds: each
// point of `points` (earlier points, rebuilt with today's settings) goes to
// the group whose labels it shares on every axis, and a finished one is a
// result. Points that fit no group are left alone.
std::vector<EdgeSearchSource::Group> search_groups(const SweepSpec& spec, const std::vector<SweepPoint>& groups,
                                                   const std::vector<SweepPoint>& points, const std::string& sweep_dir);

// The points of an earlier sweep.json that a search can use: every recorded
// point whose labels match a group's and give the search key a number,
// rebuilt with today's settings under its recorded name (so that reconcile()
// compares them, and a grid point at 0.3 serves a search asking for 0.3).
std::vector<SweepPoint> reusable_points(const SweepSpec& spec, const std::vector<SweepPoint>& groups,
                                        const nlohmann::json& old_manifest);

}  // namespace keel
