// train.ema_decay's weight average (train/weight_ema.h) against the average
// computed by hand; Swap puts the average in and the live weights back; a
// checkpoint's average of another model is refused naming the tensor.
#include <gtest/gtest.h>

#include "train/weight_ema.h"
#include "util/error.h"

using keel::NamedParam;
using keel::WeightEma;

TEST(WeightEma, EqualsTheAverageComputedByHand) {
  auto a = torch::zeros({3}, torch::kFloat64), b = torch::zeros({2, 2}, torch::kFloat64);
  WeightEma ema({{"a", a}, {"b", b}}, 0.9);
  EXPECT_FALSE(ema.started());
  EXPECT_EQ(ema.numel(), 7);
  // Three steps of weights; the average starts at the first.
  const std::vector<double> values = {1.0, 3.0, -2.0};
  double want = 0;
  for (size_t k = 0; k < values.size(); ++k) {
    a.fill_(values[k]);
    b.fill_(2 * values[k]);
    ema.update();
    want = k == 0 ? values[0] : 0.9 * want + 0.1 * values[k];
  }
  EXPECT_DOUBLE_EQ(want, 0.9 * (0.9 * 1.0 + 0.1 * 3.0) + 0.1 * -2.0);
  auto state = ema.state();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].first, "a");
  EXPECT_NEAR((state[0].second - want).abs().max().item<double>(), 0, 1e-15);
  EXPECT_NEAR((state[1].second - 2 * want).abs().max().item<double>(), 0, 1e-15);
  {
    WeightEma::Swap swap(ema);  // the parameters hold the average ...
    EXPECT_NEAR(a[0].item<double>(), want, 1e-15);
    EXPECT_NEAR(b[1][1].item<double>(), 2 * want, 1e-15);
  }
  EXPECT_EQ(a[0].item<double>(), -2.0);  // ... and the live weights again after
  EXPECT_EQ(b[0][0].item<double>(), -4.0);
}

TEST(WeightEma, ALoadedAverageContinuesAndAStrangeOneIsRefused) {
  auto a = torch::ones({3}, torch::kFloat32);
  WeightEma first({{"a", a}}, 0.5), second({{"a", a}}, 0.5);
  first.update();
  second.load_state(first.state(), "ema.safetensors");
  a.fill_(3.0f);
  first.update();
  second.update();
  EXPECT_TRUE(torch::equal(first.state()[0].second, second.state()[0].second));
  EXPECT_FLOAT_EQ(second.state()[0].second[0].item<float>(), 2.0f);
  try {
    second.load_state({{"b", torch::zeros({3})}}, "ckpt/ema.safetensors");
    ADD_FAILURE() << "a missing tensor was accepted";
  } catch (const keel::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("ckpt/ema.safetensors: no tensor 'a'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(second.load_state({{"a", torch::zeros({4})}}, "x"), keel::CheckpointError);
  // Its evaluations go in the summary and survive a checkpoint.
  second.record_eval(4.5, {{"sets", {{"web", {{"loss", 4.0}}}}}});
  second.record_eval(4.7, nlohmann::json::object());
  nlohmann::json extra;
  second.save_state(extra);
  WeightEma third({{"a", a}}, 0.5);
  third.load_eval_state(extra);
  EXPECT_DOUBLE_EQ(third.best_val_loss(), 4.5);
  EXPECT_DOUBLE_EQ(third.last_val_loss(), 4.7);
  EXPECT_EQ(third.summary()["sets"]["web"]["loss"], 4.0);
}
