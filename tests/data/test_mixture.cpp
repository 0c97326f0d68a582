// Weighted mixtures (mixture.h): realised shares match the weights, windows
// stay inside their source, small sources are upsampled epoch by epoch, and
// the draw is a pure function of (data, weights, seed, global sample), so
// ranks and resumes see the batches a single process would. Also the
// manifest's per-source tokens and the config's {path, weight} entries.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "config/config.h"
#include "data/loader.h"
#include "data/mixture.h"
#include "test_data_util.h"
#include "util/error.h"

using namespace keel;
using namespace keel_test;

namespace {

constexpr int64_t T = 16;

std::vector<MixtureSource> three_sources() {
  // Token ranges as a prepared train split would hold them: sizes far from the weights.
  return {{"web", 0, 200000, 0.7}, {"code", 200000, 3000, 0.2}, {"books", 203000, 90000, 0.1}};
}

std::vector<int64_t> counts(const Mixture& m, int64_t first, int64_t n) {
  std::vector<int64_t> c(m.sources().size());
  for (int64_t g = first; g < first + n; ++g) ++c[m.source_of(g)];
  return c;
}

// Two sources of different text in one prepared directory, for the loader.
struct TwoSourceData {
  std::string dir, a, b;
};
const TwoSourceData& two_sources() {
  static TwoSourceData d = [] {
    std::string root = make_temp_dir("mixture");
    TwoSourceData t{root + "/data", root + "/big.txt", root + "/small"};
    write_text(t.a, join_documents(make_documents(500, 3)));
    ensure_directory(t.b);
    write_text(t.b + "/1.txt", join_documents(make_documents(40, 4)));
    write_text(t.b + "/2.txt", join_documents(make_documents(40, 5)));
    Config c = tiny_config(t.dir, {t.a, t.b});
    prepare_quietly(c);
    return t;
  }();
  return d;
}

}  // namespace

TEST(Mixture, RealisedSharesOver10000SequencesMatchTheWeightsToOnePercent) {
  for (uint64_t seed : {0ull, 1ull, 1234ull}) {
    Mixture m(three_sources(), T, seed);
    for (int64_t first : {int64_t{0}, int64_t{123457}}) {  // from the start, and from mid-run
      auto c = counts(m, first, 10000);
      for (size_t s = 0; s < c.size(); ++s) {
        const double share = c[s] / 10000.0;
        EXPECT_NEAR(share, m.share(static_cast<int>(s)), 0.01) << "seed " << seed << " source " << s;
      }
    }
    // At block ends the count is exact to one sample.
    for (int64_t n : {kMixtureBlock, 7 * kMixtureBlock}) {
      auto c = counts(m, 0, n);
      for (size_t s = 0; s < c.size(); ++s) {
        EXPECT_EQ(c[s], m.count_before(static_cast<int>(s), n));
        EXPECT_LE(std::abs(c[s] - m.share(static_cast<int>(s)) * n), 1.0);
      }
    }
  }
}

TEST(Mixture, WindowsStayInsideTheirSourceAndSmallSourcesRepeatWholeEpochs) {
  Mixture m(three_sources(), T, 7);
  const auto& src = m.sources();
  std::map<int64_t, int> seen_code;  // window start -> times drawn, source "code" (186 windows)
  std::vector<std::set<int64_t>> numbers(3);
  const int64_t n = 4 * kMixtureBlock;  // whole blocks
  for (int64_t g = 0; g < n; ++g) {
    int64_t k = 0;
    const int s = m.source_of(g, &k);
    const int64_t start = m.window_start(g);
    ASSERT_GE(start, src[s].begin);
    ASSERT_LE(start + T + 1, src[s].begin + src[s].tokens) << "source " << s << " sample " << g;
    EXPECT_TRUE(numbers[s].insert(k).second) << "sample number " << k << " of source " << s << " drawn twice";
    if (s == 1 && k < m.windows(1)) ++seen_code[start];  // the first epoch: each window once
  }
  // Over whole blocks each source's sample numbers are exactly 0 .. count-1
  // (shuffled within a block, so not in order of g).
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(static_cast<int64_t>(numbers[s].size()), m.count_before(s, n));
    EXPECT_EQ(*numbers[s].rbegin(), m.count_before(s, n) - 1);
  }
  EXPECT_EQ(m.windows(1), (3000 - T) / T);
  EXPECT_EQ(static_cast<int64_t>(seen_code.size()), m.windows(1));
  for (const auto& [start, n] : seen_code) EXPECT_EQ(n, 1) << start;
  // 16384 * 0.2 samples over 186 windows: about 17.6 epochs, upsampled; books capped.
  EXPECT_NEAR(m.epochs(1, n), 0.2 * n / 186, 0.01);
  EXPECT_LT(m.epochs(2, n), 1);
  auto lines = m.describe(n);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[1].find("upsampled"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("capped"), std::string::npos) << lines[2];
  EXPECT_NE(lines[0].find("70.0% of sequences"), std::string::npos) << lines[0];
}

TEST(Mixture, TheDrawDependsOnTheSeedAndNothingElse) {
  Mixture a(three_sources(), T, 5), b(three_sources(), T, 5), c(three_sources(), T, 6);
  int differ = 0;
  for (int64_t g = 0; g < 5000; ++g) {
    EXPECT_EQ(a.window_start(g), b.window_start(g));
    differ += a.window_start(g) != c.window_start(g);
  }
  EXPECT_GT(differ, 4000);
}

TEST(Mixture, BadWeightsAndTinySourcesNameTheEntry) {
  auto error = [](std::vector<MixtureSource> s) {
    try {
      Mixture m(std::move(s), T, 0);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto s = three_sources();
  s[1].tokens = T;  // fewer than T + 1
  EXPECT_NE(error(s).find("data.sources[1] (code) has 16 train tokens, fewer than one window of 17"), std::string::npos)
      << error(s);
  s = three_sources();
  s[2].weight = 1e-5;
  EXPECT_NE(error(s).find("data.sources[2] (books): weight"), std::string::npos) << error(s);
  s = three_sources();
  s[0].weight = -1;
  EXPECT_NE(error(s).find("data.sources[0].weight must be a positive number"), std::string::npos) << error(s);
}

TEST(Mixture, LoaderDrawsBySourceTheSameOnEveryRankAndAfterResume) {
  const auto& d = two_sources();
  DataManifest m = read_data_manifest(d.dir);
  ASSERT_EQ(m.sources.size(), 3u);  // big.txt, small/1.txt, small/2.txt
  EXPECT_EQ(m.sources[0].entry, 0);
  EXPECT_EQ(m.sources[1].entry, 1);
  EXPECT_EQ(m.sources[2].entry, 1);
  int64_t sum = 0;
  for (const auto& s : m.sources) sum += s.train_tokens;
  EXPECT_EQ(sum, m.train.tokens);

  const std::vector<std::pair<std::string, double>> weights = {{d.a, 1.0}, {d.b, 1.0}};
  const int64_t batch = 8;
  BatchLoader one(d.dir, "train", T, batch, 0, 1, 11, 0, true, weights);
  BatchLoader r0(d.dir, "train", T, batch, 0, 2, 11, 2, true, weights);
  BatchLoader r1(d.dir, "train", T, batch, 1, 2, 11, 0, true, weights);
  ASSERT_NE(one.mixture(), nullptr);
  const int64_t small_begin = m.sources[0].train_tokens;
  int64_t from_small = 0;
  for (int64_t step = 0; step < 200; ++step) {
    auto all = one.window_starts(step);
    auto a = r0.window_starts(step), b = r1.window_starts(step);
    a.insert(a.end(), b.begin(), b.end());
    ASSERT_EQ(all, a) << "step " << step;
    for (int64_t start : all) from_small += start >= small_begin;
    Batch x = one.make_batch(step), y = r0.get(step);  // prefetched on rank 0, computed on the other
    EXPECT_TRUE(x.inputs.slice(0, 0, batch / 2).equal(y.inputs));
  }
  // Equal weights: half the sequences from the small source though it holds about 14% of the tokens.
  EXPECT_NEAR(from_small / (200.0 * batch), 0.5, 0.02);
  EXPECT_LT(static_cast<double>(m.train.tokens - small_begin) / m.train.tokens, 0.25);
  // Without weights the order is the single-stream one, as before mixtures.
  BatchLoader plain(d.dir, "train", T, batch, 0, 1, 11, 0);
  EXPECT_EQ(plain.mixture(), nullptr);
  EXPECT_NE(plain.window_starts(0), one.window_starts(0));
}

TEST(Mixture, ConfigReadsWeightedSourcesAndWritesThemBack) {
  std::string dir = make_temp_dir("mixture_config");
  write_text(dir + "/c.yaml", "data:\n  sources:\n    - {path: a.txt, weight: 0.7}\n    - path: b/\n      weight: 0.3\n");
  Config c = load_config(dir + "/c.yaml");
  ASSERT_EQ(c.data.sources, (std::vector<std::string>{"a.txt", "b/"}));
  ASSERT_EQ(c.data.source_weights, (std::vector<double>{0.7, 0.3}));
  // The resolved config (what checkpoints keep) reads back to the same mixture.
  write_text(dir + "/resolved.yaml", config_to_yaml(c));
  Config again = load_config(dir + "/resolved.yaml");
  EXPECT_EQ(again.data.sources, c.data.sources);
  EXPECT_EQ(again.data.source_weights, c.data.source_weights);

  auto error = [&](const std::string& yaml) {
    write_text(dir + "/bad.yaml", yaml);
    try {
      load_config(dir + "/bad.yaml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("data:\n  sources: [{path: a.txt, weight: 1}, b.txt]\n").find("data.sources[1]"), std::string::npos);
  EXPECT_NE(error("data:\n  sources: [{path: a.txt, weight: 0}]\n").find("data.sources[0].weight"), std::string::npos);
  EXPECT_NE(error("data:\n  sources: [{path: a.txt, wieght: 1}]\n").find("data.sources[0].wieght"), std::string::npos);
  EXPECT_NE(error("data:\n  sources: [{weight: 1}]\n").find("data.sources[0].path"), std::string::npos);
}

// A manifest whose per-source counts do not add up to the train split (a
// hostile or damaged file) is refused before any range is computed from it.
TEST(Mixture, ManifestCountsThatDoNotAddUpAreRefused) {
  const auto& d = two_sources();
  const std::vector<std::pair<std::string, double>> weights = {{d.a, 1.0}, {d.b, 1.0}};
  for (int64_t bad : {int64_t{9000000000000000000}, int64_t{1}}) {
    std::string dir = make_temp_dir("mixture_bad") + "/data";
    ensure_directory(dir);
    for (const auto& name : list_directory(d.dir)) write_text(dir + "/" + name, read_bytes(d.dir + "/" + name));
    DataManifest m = read_data_manifest(dir);
    m.sources[1].train_tokens = bad;
    write_data_manifest(m, dir);
    try {
      BatchLoader l(dir, "train", T, 8, 0, 1, 11, 0, false, weights);
      ADD_FAILURE() << "counts of " << bad << " were accepted";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("a corrupt manifest"), std::string::npos) << e.what();
    }
  }
}
