// The coordinate check (train/coord_check.h) tells the parametrizations apart:
// after ten steps on one repeated batch, the standard model's logits and
// residual stream grow with width (log-log slope well above 0) while µP's
// stay flat; across depths the same holds for µP without depth scaling
// against CompleteP. Thresholds from measured slopes on this setup
// (standard +0.9 logits / +3.4 residual, µP within ±0.08; µP across depth
// +0.55 / +2.3, CompleteP within ±0.09), with room for other CPUs' rounding.
#include "train/coord_check.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

using namespace keel;

namespace {

Config small(Parametrization p) {
  Config c;
  c.model.vocab_size = 512;
  c.model.max_seq_len = 64;
  c.model.d_model = 64;
  c.model.n_layers = 4;
  c.model.parametrization = p;
  c.train.batch_size = 8;
  c.train.lr = 0.01;
  return c;
}

std::function<Batch(int64_t)> one_batch(const Config& c) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  auto tokens = torch::randint(c.model.vocab_size, {c.train.batch_size, c.seq_len() + 1}, gen, torch::kLong);
  Batch b{tokens.narrow(1, 0, c.seq_len()).contiguous(), tokens.narrow(1, 1, c.seq_len()).contiguous()};
  return [b](int64_t) { return b; };
}

}  // namespace

TEST(CoordCheck, LogitsGrowWithWidthUnderStandardAndStayFlatUnderMup) {
  CoordCheckOptions o;
  o.widths = {32, 64, 128, 256};
  o.steps = 10;
  Config sp = small(Parametrization::standard);
  auto sp_records = coord_check(sp, o, one_batch(sp));
  Config mup = small(Parametrization::mup);
  mup.model.mup.base_width = 32;
  auto mup_records = coord_check(mup, o, one_batch(mup));
  ASSERT_EQ(sp_records.size(), mup_records.size());
  const double sp_logits = coord_slope(sp_records, "logits", 10, false);
  const double sp_residual = coord_slope(sp_records, "residual", 10, false);
  const double mup_logits = coord_slope(mup_records, "logits", 10, false);
  const double mup_residual = coord_slope(mup_records, "residual", 10, false);
  std::printf("slopes at step 10: standard logits %+.3f residual %+.3f; mup logits %+.3f residual %+.3f\n", sp_logits,
              sp_residual, mup_logits, mup_residual);
  EXPECT_GT(sp_logits, 0.4);
  EXPECT_GT(sp_residual, 1.0);
  EXPECT_LT(std::abs(mup_logits), 0.2);
  EXPECT_LT(std::abs(mup_residual), 0.2);
  // At the base width the two are the same model: the same numbers.
  for (size_t i = 0; i < sp_records.size(); ++i)
    if (sp_records[i].width == 32) EXPECT_EQ(sp_records[i].rms, mup_records[i].rms) << sp_records[i].layer;
}

TEST(CoordCheck, ResidualGrowsWithDepthUnlessCompleteP) {
  CoordCheckOptions o;
  o.depths = {2, 4, 8, 16};
  o.steps = 10;
  Config mup = small(Parametrization::mup);
  auto mup_records = coord_check(mup, o, one_batch(mup));
  Config cp = small(Parametrization::completep);
  cp.model.mup.base_depth = 2;
  auto cp_records = coord_check(cp, o, one_batch(cp));
  const double mup_residual = coord_slope(mup_records, "residual", 10, true);
  const double cp_residual = coord_slope(cp_records, "residual", 10, true);
  const double cp_logits = coord_slope(cp_records, "logits", 10, true);
  std::printf("slopes at step 10 against depth: mup residual %+.3f; completep residual %+.3f logits %+.3f\n",
              mup_residual, cp_residual, cp_logits);
  EXPECT_GT(mup_residual, 1.0);
  EXPECT_LT(std::abs(cp_residual), 0.2);
  EXPECT_LT(std::abs(cp_logits), 0.2);
}

TEST(CoordCheck, SizesScaleDffAndHeadsOrRefuse) {
  Config c = small(Parametrization::mup);
  c.model.d_ff = 96;
  c.model.mup.base_head_dim = 16;  // fixed head_dim: heads grow with width
  c.model.mup.base_width = 64;
  const Config wide = coord_check_config(c, 128, 3);
  EXPECT_EQ(wide.model.d_ff, 192);
  EXPECT_EQ(wide.model.n_heads, 8);
  EXPECT_EQ(wide.model.n_kv_heads, 4);
  EXPECT_EQ(wide.model.n_layers, 3);
  EXPECT_THROW(coord_check_config(c, 100, 3), ConfigError);  // 96 x 100/64 is not whole
}
