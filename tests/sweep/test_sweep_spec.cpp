// Sweep files: grid expansion, point names, errors with file:line, and the
// manifest comparison that decides what a re-run may reuse.
#include <gtest/gtest.h>

#include <algorithm>

#include "sweep/sweep_manifest.h"
#include "sweep/sweep_spec.h"
#include "test_util.h"
#include "util/fs.h"

namespace {

class SweepSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = keel_test::make_temp_dir("sweep_spec");
    keel_test::write_file(dir_ + "/base.yaml",
                          "model: {d_model: 32, n_layers: 1, n_heads: 2, n_kv_heads: 1}\n"
                          "train: {max_steps: 10, warmup_steps: 2, lr: 1e-3, min_lr: 1e-5}\n");
  }
  void TearDown() override { keel::remove_tree(dir_); }

  std::string write_sweep(const std::string& text) {
    const std::string path = dir_ + "/sweep.yaml";
    keel_test::write_file(path, text);
    return path;
  }

  // The error text of loading `text`, or "" if it loads.
  std::string error_of(const std::string& text) {
    try {
      keel::expand_grid(keel::load_sweep_spec(write_sweep(text)));
    } catch (const keel::ConfigError& e) {
      return e.what();
    }
    return "";
  }

  std::string dir_;
};

std::vector<std::string> names(const std::vector<keel::SweepPoint>& points) {
  std::vector<std::string> out;
  for (const auto& p : points) out.push_back(p.name);
  return out;
}

TEST_F(SweepSpecTest, ExpandsVariantsTimesGridTimesSeedsInFileOrder) {
  auto spec = keel::load_sweep_spec(write_sweep(
      "base: base.yaml\n"
      "set: {train: {max_steps: 20}, monitor.every: 5}\n"
      "variants:\n"
      "  none: {model.qk_norm.type: none}\n"
      "  rms-proj: {model: {qk_norm: {type: rms, scope: projection}}}\n"
      "grid:\n"
      "  train.lr: [1e-3, 3e-2]\n"
      "seeds: [1, 2]\n"));
  EXPECT_EQ(spec.base_config, dir_ + "/base.yaml");  // relative to the sweep file
  EXPECT_EQ(spec.name, "sweep");
  EXPECT_EQ(spec.out_dir, "runs/sweeps/sweep");
  auto points = keel::expand_grid(spec);
  ASSERT_EQ(points.size(), 8u);
  EXPECT_EQ(names(points), (std::vector<std::string>{
                               "none_lr=1e-3_seed=1", "none_lr=1e-3_seed=2", "none_lr=3e-2_seed=1",
                               "none_lr=3e-2_seed=2", "rms-proj_lr=1e-3_seed=1", "rms-proj_lr=1e-3_seed=2",
                               "rms-proj_lr=3e-2_seed=1", "rms-proj_lr=3e-2_seed=2"}));
  const auto& p = points[6];  // rms-proj, lr 3e-2, seed 1
  EXPECT_EQ(p.config.model.qk_norm.type, keel::NormKind::rms);
  EXPECT_EQ(p.config.model.qk_norm.scope, keel::QKNormScope::projection);
  EXPECT_DOUBLE_EQ(p.config.train.lr, 3e-2);
  EXPECT_EQ(p.config.run.seed, 1);
  EXPECT_EQ(p.config.train.max_steps, 20);       // from set
  EXPECT_EQ(p.config.monitor.every, 5);          // dotted key in set
  EXPECT_TRUE(p.config.monitor.stop_on_divergence);  // early_stop defaults to true
  EXPECT_EQ(p.config.model.d_model, 32);         // from the base
  EXPECT_EQ(points[0].config.model.qk_norm.type, keel::NormKind::none);
  EXPECT_EQ(p.labels.at("variant"), "rms-proj");
  EXPECT_EQ(p.labels.at("train.lr"), "3e-2");
  // The overrides are what the child `keel train` gets: they give the same config.
  auto again = keel::load_config(spec.base_config, p.overrides);
  EXPECT_EQ(keel::config_to_yaml(again), keel::config_to_yaml(p.config));
}

TEST_F(SweepSpecTest, NamesLeaveOutASingleSeedAndDisambiguateShortNames) {
  auto points = keel::expand_grid(keel::load_sweep_spec(write_sweep(
      "base: base.yaml\nname: x\nout_dir: /tmp/x\nearly_stop: false\nseeds: [7]\n"
      "grid:\n  model.qk_norm.eps: [1e-6]\n  model.norm_eps: [1e-5, 1e-6]\n  train.eps: [1e-8]\n")));
  ASSERT_EQ(points.size(), 2u);
  // "eps" is the last component of two keys: those use the full key.
  EXPECT_EQ(points[0].name, "model.qk_norm.eps=1e-6_norm_eps=1e-5_train.eps=1e-8");
  EXPECT_EQ(points[0].config.run.seed, 7);
  EXPECT_FALSE(points[0].config.monitor.stop_on_divergence);
}

// The model-size axis (issue 17, section 3): named bundles after the
// variants, before the grid, named "size=..." in point names.
TEST_F(SweepSpecTest, SizesAreAnAxisOfNamedBundles) {
  auto points = keel::expand_grid(keel::load_sweep_spec(write_sweep(
      "base: base.yaml\n"
      "variants: {none: {model.qk_norm.type: none}, rms: {model.qk_norm.type: rms}}\n"
      "sizes:\n"
      "  d32: {}\n"
      "  d64: {model: {d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2}}\n"
      "grid: {train.lr: [1e-3, 1e-2]}\n")));
  EXPECT_EQ(names(points), (std::vector<std::string>{
                               "none_size=d32_lr=1e-3", "none_size=d32_lr=1e-2", "none_size=d64_lr=1e-3",
                               "none_size=d64_lr=1e-2", "rms_size=d32_lr=1e-3", "rms_size=d32_lr=1e-2",
                               "rms_size=d64_lr=1e-3", "rms_size=d64_lr=1e-2"}));
  const auto& p = points[6];
  EXPECT_EQ(p.labels.at("size"), "d64");
  EXPECT_EQ(p.labels.at("variant"), "rms");
  EXPECT_EQ(p.config.model.d_model, 64);
  EXPECT_EQ(p.config.model.n_layers, 2);
  EXPECT_EQ(p.config.model.n_heads, 4);
  EXPECT_EQ(p.config.model.qk_norm.type, keel::NormKind::rms);
  EXPECT_EQ(points[0].config.model.d_model, 32);  // {} is the base config's size
  // A size's key may not be a variant's, a grid key or a `set` key: each key has one owner.
  std::string e = error_of("base: base.yaml\nvariants: {a: {model.d_model: 64}}\nsizes: {s: {model.d_model: 32}}\n");
  EXPECT_NE(e.find("sizes.s.model.d_model: is also set by a variant"), std::string::npos) << e;
  e = error_of("base: base.yaml\nsizes: {s: {model.d_model: 32}}\ngrid: {model.d_model: [64]}\n");
  EXPECT_NE(e.find("grid.model.d_model: is also set by a variant or size"), std::string::npos) << e;
  e = error_of("base: base.yaml\nset: {model.n_layers: 2}\nsizes: {s: {model.n_layers: 1}}\n");
  EXPECT_NE(e.find("set.model.n_layers: is also an axis"), std::string::npos) << e;
  e = error_of("base: base.yaml\nsizes: [a, b]\n");
  EXPECT_NE(e.find("sizes: expected a mapping of size names"), std::string::npos) << e;
  e = error_of("base: base.yaml\nsizes: {s: {model.d_modell: 32}}\n");
  EXPECT_NE(e.find("sizes.s.model.d_modell: unknown config key"), std::string::npos) << e;
  // A size whose heads do not divide its width is a point's config error, named.
  e = error_of("base: base.yaml\nsizes: {odd: {model.d_model: 48, model.n_heads: 5}}\n");
  EXPECT_NE(e.find("points: size=odd"), std::string::npos) << e;
}

TEST_F(SweepSpecTest, ErrorsNameTheKeyAndTheLine) {
  // Line 3: a typo in a grid key.
  std::string e = error_of("base: base.yaml\ngrid:\n  train.lrr: [1e-3]\n");
  EXPECT_NE(e.find("grid.train.lrr: unknown config key"), std::string::npos) << e;
  EXPECT_NE(e.find("sweep.yaml:3"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean train.lr?"), std::string::npos) << e;
  // Line 4: a value of the wrong type, inside a variant.
  e = error_of("base: base.yaml\nvariants:\n  a:\n    model.qk_norm.type: rmss\ngrid: {train.lr: [1e-3]}\n");
  EXPECT_NE(e.find("model.qk_norm.type"), std::string::npos) << e;
  EXPECT_NE(e.find("sweep.yaml:4"), std::string::npos) << e;
  e = error_of("base: base.yaml\ngrid:\n  train.lr: [1e-3, fast]\n");
  EXPECT_NE(e.find("train.lr: expected a number, got 'fast'"), std::string::npos) << e;
  EXPECT_NE(e.find("sweep.yaml:3"), std::string::npos) << e;
  e = error_of("base: base.yaml\ngrid:\n  train.lr: 1e-3\n");
  EXPECT_NE(e.find("grid.train.lr: expected a non-empty list"), std::string::npos) << e;
  e = error_of("base: base.yaml\ngrid:\n  run.name: [a, b]\n");
  EXPECT_NE(e.find("is set by keel sweep"), std::string::npos) << e;
  e = error_of("base: base.yaml\ngird:\n  train.lr: [1e-3]\n");
  EXPECT_NE(e.find("gird: unknown sweep key (" + dir_ + "/sweep.yaml:2); did you mean grid?"), std::string::npos) << e;
  e = error_of("grid:\n  train.lr: [1e-3]\n");
  EXPECT_NE(e.find("base: required"), std::string::npos) << e;
  e = error_of("base: missing.yaml\ngrid:\n  train.lr: [1e-3]\n");
  EXPECT_NE(e.find("cannot open " + dir_ + "/missing.yaml"), std::string::npos) << e;
  e = error_of("base: base.yaml\ngrid:\n  train.lr: [1e-3, 1e-3]\n");
  EXPECT_NE(e.find("listed twice"), std::string::npos) << e;
  e = error_of("base: base.yaml\nset: {train.lr: 1e-2}\ngrid:\n  train.lr: [1e-3]\n");
  EXPECT_NE(e.find("set.train.lr: is also an axis"), std::string::npos) << e;
  // Cross-key problems of a point's resolved config name the points.
  e = error_of("base: base.yaml\ngrid:\n  train.lr: [1e-6, 1e-3]\n");
  EXPECT_NE(e.find("train.min_lr: floor exceeds the peak train.lr"), std::string::npos) << e;
  EXPECT_NE(e.find("points: lr=1e-6"), std::string::npos) << e;
  EXPECT_EQ(e.find("lr=1e-3]"), std::string::npos) << e;
  // All problems at once.
  e = error_of("base: base.yaml\nset: {train.foo: 1}\ngrid:\n  train.lrr: [1e-3]\n");
  EXPECT_NE(e.find("set.train.foo"), std::string::npos) << e;
  EXPECT_NE(e.find("grid.train.lrr"), std::string::npos) << e;
}

TEST_F(SweepSpecTest, ManifestReusesSameSettingsAndNamesEveryChange) {
  const std::string text = "base: base.yaml\nvariants: {a: {}, b: {model.qk_norm.type: rms}}\n"
                           "grid:\n  train.lr: [1e-3, 1e-2]\n";
  auto spec = keel::load_sweep_spec(write_sweep(text));
  auto points = keel::expand_grid(spec);
  auto manifest = keel::make_manifest(spec, points, nlohmann::json::object());
  // Stored compactly, reconstructed exactly.
  EXPECT_EQ(keel::manifest_point_config(manifest, "b_lr=1e-2"), keel::result_config(points[3].config));

  auto same = keel::reconcile(manifest, points);
  EXPECT_TRUE(same.conflicts.empty());
  EXPECT_EQ(same.reused.size(), 4u);

  // Thread count and checkpoint cadence do not change results.
  auto neutral = keel::expand_grid(keel::load_sweep_spec(write_sweep(text), {"checkpoint.every=7"}));
  EXPECT_TRUE(keel::reconcile(manifest, neutral).conflicts.empty());

  // A longer run changes every point.
  auto longer = keel::expand_grid(keel::load_sweep_spec(write_sweep(text), {"train.max_steps=20"}));
  auto r = keel::reconcile(manifest, longer);
  ASSERT_EQ(r.conflicts.size(), 1u);
  EXPECT_NE(r.conflicts[0].find("train.max_steps: 10 -> 20 (4 (all) points"), std::string::npos) << r.conflicts[0];

  // A changed variant definition changes its points only; a new LR adds points;
  // a dropped one is retired.
  auto changed = keel::expand_grid(keel::load_sweep_spec(write_sweep(
      "base: base.yaml\nvariants: {a: {}, b: {model.qk_norm.type: l2}}\ngrid:\n  train.lr: [1e-3, 3e-2]\n")));
  r = keel::reconcile(manifest, changed);
  ASSERT_EQ(r.conflicts.size(), 1u);
  EXPECT_NE(r.conflicts[0].find("model.qk_norm.type: rms -> l2 (1 point: b_lr=1e-3)"), std::string::npos)
      << r.conflicts[0];
  EXPECT_EQ(r.reused, (std::vector<std::string>{"a_lr=1e-3"}));
  EXPECT_EQ(r.added, (std::vector<std::string>{"a_lr=3e-2", "b_lr=3e-2"}));
  EXPECT_EQ(r.retired, (std::vector<std::string>{"a_lr=1e-2", "b_lr=1e-2"}));
  // Retired points stay in the next manifest, inactive, with their settings.
  auto next = keel::make_manifest(spec, changed, manifest);
  EXPECT_EQ(keel::manifest_point_config(next, "b_lr=1e-2"), keel::result_config(points[3].config));
}

}  // namespace

// Every shipped sweep file loads (its base config and every point validate)
// and expands to the points its comment promises at least roughly: more than one.
// A variant named ".." would make its point directory the sweep's parent,
// which re-running the point empties, and one named "..a" a hidden
// directory: the leading dots of a label that starts a point's name become
// '-' (issue 31). A dot after "key=" stays; names stay unique.
TEST_F(SweepSpecTest, PointNamesAreNeverHiddenNorDotDirectories) {
  const auto points = keel::expand_grid(keel::load_sweep_spec(write_sweep(
      "base: base.yaml\nvariants:\n  \"..\": {}\n  \".\": {model.qk_norm.type: rms}\n"
      "  ..a: {model.qk_norm.type: none}\n  .b.: {model.qk_norm.type: l2}\n"
      "grid:\n  train.lr: [.002, 3e-3]\n")));
  EXPECT_EQ(names(points), (std::vector<std::string>{"--_lr=.002", "--_lr=3e-3", "-_lr=.002", "-_lr=3e-3",
                                                     "--a_lr=.002", "--a_lr=3e-3", "-b._lr=.002", "-b._lr=3e-3"}));
  for (const auto& p : points) EXPECT_NE(p.name[0], '.') << p.name;
  EXPECT_EQ(points[4].labels.at("variant"), "--a");
  // A label that now reads like another's is refused, not merged.
  const std::string err = error_of("base: base.yaml\nvariants:\n  ..a: {}\n  --a: {model.qk_norm.type: rms}\n");
  EXPECT_NE(err.find("duplicate variant name"), std::string::npos) << err;
}

TEST(SweepSpec, EveryShippedSweepFileLoads) {
  int files = 0;
  const std::string dir = keel_test::source_path("configs/sweeps");
  for (const auto& name : keel::list_directory(dir)) {
    if (name.size() < 5 || name.compare(name.size() - 5, 5, ".yaml") != 0) continue;
    SCOPED_TRACE(name);
    keel::SweepSpec spec;
    ASSERT_NO_THROW(spec = keel::load_sweep_spec(dir + "/" + name));
    EXPECT_GT(keel::expand_grid(spec).size(), 1u);
    ++files;
  }
  EXPECT_GE(files, 4);
}

// Issue 31: a grid above max_points (10000 unless the file says) is refused
// from its axis sizes, naming the count, the axes and the key; the key
// raises the limit, and a grid at the limit is planned.
TEST_F(SweepSpecTest, GridsAboveMaxPointsAreRefusedFromTheirAxisSizes) {
  const std::string grid = "variants: {a: {}, b: {model.qk_norm.type: rms}}\ngrid: {train.lr: [1e-3, 2e-3, 3e-3]}\n";
  std::string e = error_of("base: base.yaml\nmax_points: 5\n" + grid);
  EXPECT_NE(e.find("max_points: the grid has 6 points (2 variant x 3 train.lr), more than max_points = 5;"),
            std::string::npos)
      << e;
  const auto spec = keel::load_sweep_spec(write_sweep("base: base.yaml\nmax_points: 6\n" + grid));
  EXPECT_EQ(spec.max_points, 6);
  EXPECT_EQ(keel::expand_grid(spec).size(), 6u);
  EXPECT_EQ(keel::load_sweep_spec(write_sweep("base: base.yaml\n" + grid)).max_points, keel::kDefaultMaxPoints);
  for (const char* bad : {"0", "-3", "1e4", "many"}) {
    e = error_of(std::string("base: base.yaml\nmax_points: ") + bad + "\n" + grid);
    EXPECT_NE(e.find("max_points: expected a whole number of points, at least 1"), std::string::npos) << bad << e;
  }
}

// The count is a product that can overflow: it saturates, and expand_grid
// refuses such a spec even when it was not made by load_sweep_spec.
TEST(SweepSpec, GridSizeSaturatesInsteadOfOverflowing) {
  keel::SweepSpec spec;
  spec.file = "big.yaml";
  for (int a = 0; a < 4; ++a) spec.axes.push_back({"k" + std::to_string(a), "", std::vector<keel::AxisValue>(8192)});
  EXPECT_EQ(keel::grid_size(spec.axes), uint64_t{1} << 52);
  spec.axes.push_back({"k4", "", std::vector<keel::AxisValue>(8192)});  // 2^65
  EXPECT_EQ(keel::grid_size(spec.axes), UINT64_MAX);
  spec.max_points = INT64_MAX;
  try {
    keel::expand_grid(spec);
    FAIL() << "expanded 2^65 points";
  } catch (const keel::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the grid has more than 18446744073709551615 points"), std::string::npos)
        << e.what();
  }
}

TEST_F(SweepSpecTest, ASearchMakesGroupsWhosePointsCarryTheValueBeforeTheSeed) {
  auto spec = keel::load_sweep_spec(write_sweep(
      "base: base.yaml\n"
      "variants:\n"
      "  none: {model.qk_norm.type: none}\n"
      "  rms: {model.qk_norm.type: rms}\n"
      "seeds: [1, 2]\n"
      "search: {key: train.lr, low: 1e-3, high: 3, factor: 1.5, criterion: logit_instability}\n"));
  ASSERT_TRUE(spec.has_search);
  EXPECT_EQ(spec.search.key, "train.lr");
  EXPECT_EQ(spec.search.short_name, "lr");
  EXPECT_DOUBLE_EQ(spec.search.low, 1e-3);
  EXPECT_DOUBLE_EQ(spec.search.high, 3);
  EXPECT_DOUBLE_EQ(spec.search.factor, 1.5);
  EXPECT_EQ(spec.search.criterion, "logit_instability");
  const auto groups = keel::expand_grid(spec);
  ASSERT_EQ(names(groups), (std::vector<std::string>{"none_seed=1", "none_seed=2", "rms_seed=1", "rms_seed=2"}));
  const keel::SweepPoint p = keel::search_point(spec, groups[3], "0.316");
  EXPECT_EQ(p.name, "rms_lr=0.316_seed=2");
  EXPECT_DOUBLE_EQ(p.config.train.lr, 0.316);
  EXPECT_EQ(p.config.run.seed, 2);
  EXPECT_EQ(p.labels.at("train.lr"), "0.316");
  EXPECT_EQ(p.labels.at("variant"), "rms");
  // Without any axis: one group, and points named by the value alone.
  auto alone = keel::load_sweep_spec(write_sweep("base: base.yaml\nsearch: {key: train.lr, low: 1e-3, high: 1}\n"));
  EXPECT_DOUBLE_EQ(alone.search.factor, 1.25);  // the default
  EXPECT_EQ(alone.search.criterion, "loss_divergence");
  const auto one = keel::expand_grid(alone);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(keel::search_point(alone, one[0], "0.01").name, "lr=0.01");
}

TEST_F(SweepSpecTest, SearchErrorsNameTheKeyAndTheLine) {
  const std::string head = "base: base.yaml\n";
  EXPECT_NE(error_of(head + "search: {key: train.lr, low: 1, high: 0.1}\n").find("search.high: must be above search.low"),
            std::string::npos);
  EXPECT_NE(error_of(head + "search: {key: train.lr, low: 1e-3, high: 1, factor: 1}\n").find("search.factor: must be above 1"),
            std::string::npos);
  EXPECT_NE(error_of(head + "search: {key: train.lr, low: -1, high: 1}\n").find("search.low: expected a positive number"),
            std::string::npos);
  EXPECT_NE(error_of(head + "search: {key: train.lr, low: 1e-3, high: 1, criterion: spikes}\n")
                .find("search.criterion: expected loss_divergence, logit_instability or degradation"),
            std::string::npos);
  // degradation takes a margin in nats; the other criteria do not.
  auto degraded = keel::load_sweep_spec(
      write_sweep(head + "search: {key: train.lr, low: 1e-3, high: 1, criterion: degradation, margin: 0.05}\n"));
  EXPECT_EQ(degraded.search.criterion, "degradation");
  EXPECT_DOUBLE_EQ(degraded.search.margin, 0.05);
  EXPECT_NE(error_of(head + "search: {key: train.lr, low: 1e-3, high: 1, margin: 0.05}\n")
                .find("search.margin: only used with criterion: degradation"),
            std::string::npos);
  EXPECT_NE(error_of(head + "search: {key: train.lr, low: 1e-3}\n").find("search.high: required"), std::string::npos);
  EXPECT_NE(error_of(head + "search: {key: train.lr, low: 1e-3, high: 1, step: 2}\n").find("search.step: unknown search key"),
            std::string::npos);
  EXPECT_NE(error_of(head + "search: {key: train.lrr, low: 1e-3, high: 1}\n").find("unknown config key"), std::string::npos);
  const std::string both = error_of(head + "grid:\n  train.lr: [1e-3]\nsearch: {key: train.lr, low: 1e-3, high: 1}\n");
  EXPECT_NE(both.find("search.key: train.lr is also an axis of the grid"), std::string::npos) << both;
  EXPECT_NE(both.find("sweep.yaml:4"), std::string::npos) << both;
  EXPECT_NE(error_of(head + "set: {train.lr: 1e-2}\nsearch: {key: train.lr, low: 1e-3, high: 1}\n")
                .find("search.key: train.lr is also given by `set`"),
            std::string::npos);
  // A key that takes no real number: its own value check, naming the key.
  EXPECT_NE(error_of(head + "search: {key: train.max_steps, low: 1.5, high: 10}\n").find("train.max_steps"),
            std::string::npos);
  EXPECT_NE(error_of(head + "search: [train.lr]\n").find("search: expected a mapping"), std::string::npos);
}
