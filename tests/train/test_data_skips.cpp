// train/data_skips.h: the batch a step reads under skipped ranges, the
// config's "AFTER:COUNT" entries, and the list in and out of a checkpoint's
// state, hostile values refused.
#include <gtest/gtest.h>

#include "config/config.h"
#include "train/data_skips.h"
#include "util/error.h"

namespace {

TEST(DataSkips, StepsAfterARangeReadLaterBatches) {
  keel::DataSkips none;
  EXPECT_EQ(none.data_step(0), 0);
  EXPECT_EQ(none.data_step(41), 41);
  keel::DataSkips skips({{8, 5, 0}});  // after step 8, five batches skipped
  EXPECT_EQ(skips.data_step(7), 7);    // step 8 (index 7) reads batch 8 (index 7)
  EXPECT_EQ(skips.data_step(8), 13);   // step 9 reads batch 14
  EXPECT_EQ(skips.data_step(20), 25);
  skips.add({16, 10, 19});             // a rewind to step 16 for a spike at 19
  EXPECT_EQ(skips.data_step(15), 20);
  EXPECT_EQ(skips.data_step(16), 31);
  EXPECT_EQ(skips.rewinds(), 1);
  // No batch is read twice and none is read out of order.
  for (int64_t i = 1; i < 40; ++i) EXPECT_GT(skips.data_step(i), skips.data_step(i - 1));
}

TEST(DataSkips, ConfigEntriesParse) {
  keel::ConfigErrors errors;
  auto ranges = keel::parse_skip_batches({"8:5", "0:1", "123456:789"}, &errors);
  EXPECT_TRUE(errors.empty());
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges[0].after_step, 8);
  EXPECT_EQ(ranges[0].batches, 5);
  EXPECT_EQ(ranges[0].spike_step, 0);
  EXPECT_EQ(ranges[2].after_step, 123456);
  for (const char* bad : {"", ":", "8:", ":5", "8:0", "-1:5", "8:5:1", "8 :5", "x:5", "99999999999999999999:1"}) {
    keel::ConfigErrors e;
    EXPECT_TRUE(keel::parse_skip_batches({bad}, &e).empty()) << bad;
    EXPECT_FALSE(e.empty()) << bad;
  }
}

TEST(DataSkips, StateRoundTripsAndHostileStateIsRefused) {
  keel::DataSkips skips({{8, 5, 0}});
  skips.add({16, 10, 19});
  nlohmann::json extra;
  skips.save_state(extra);
  keel::DataSkips back;
  back.load_state(extra, "ckpt/state.json");
  EXPECT_EQ(back.to_json(), skips.to_json());
  EXPECT_EQ(back.data_step(30), skips.data_step(30));
  // A checkpoint of an older keel has no list: the one given is kept.
  keel::DataSkips kept({{2, 3, 0}});
  kept.load_state(nlohmann::json::object(), "old/state.json");
  EXPECT_EQ(kept.data_step(5), 8);
  for (const char* bad : {R"({"data_skips": 5})", R"({"data_skips": [{"after_step": 1}]})",
                          R"({"data_skips": [{"after_step": 1, "batches": 0, "spike_step": 0}]})",
                          R"({"data_skips": [{"after_step": -3, "batches": 2, "spike_step": 0}]})",
                          R"({"data_skips": [{"after_step": 1, "batches": 1e30, "spike_step": 0}]})",
                          R"({"data_skips": [[1, 2, 3]]})"}) {
    keel::DataSkips d;
    try {
      d.load_state(nlohmann::json::parse(bad), "bad/state.json");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const keel::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("bad/state.json"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
