// StabilityMonitor keeps loss divergence and attention-logit instability
// apart (issue 17): a layer-0 logit above monitor.diverge_attn_logit is
// flagged, not divergence; both survive a checkpoint; an older checkpoint that
// called the logit flag divergence loads as instability.
#include <gtest/gtest.h>

#include <limits>

#include "monitor/stability.h"

using keel::MonitorConfig;
using keel::StabilityMonitor;

namespace {
nlohmann::json stats_with_layer0_logit(double v) {
  return {{"attn", {{{"max_logit", v}}, {{"max_logit", 1.0}}}}, {"output", {{"max_logit", 3.0}, {"z_loss", 0.5}}}};
}
}  // namespace

TEST(Stability, LogitInstabilityIsFlaggedNotDivergence) {
  MonitorConfig cfg;
  cfg.diverge_attn_logit = 100.0;
  StabilityMonitor m(cfg);
  m.observe(1, 5.0, 1.0);
  m.observe_model_stats(4, stats_with_layer0_logit(50.0));
  EXPECT_FALSE(m.logit_unstable());
  m.observe_model_stats(8, stats_with_layer0_logit(250.0));
  EXPECT_TRUE(m.logit_unstable());
  EXPECT_FALSE(m.diverged());
  auto s = m.summary();
  EXPECT_EQ(s["attn_logit_unstable"], true);
  EXPECT_EQ(s["attn_logit_unstable_step"], 8);
  EXPECT_EQ(s["diverged"], false);
  EXPECT_NE(m.instability_text().find("step 8"), std::string::npos) << m.instability_text();
  // The loss decides divergence: above diverge_loss_factor x the initial loss.
  m.observe(9, 5.0 * cfg.diverge_loss_factor + 1.0, 1.0);
  EXPECT_TRUE(m.diverged());
  EXPECT_EQ(m.summary()["diverged_step"], 9);

  StabilityMonitor back(cfg);
  back.load_state(m.state());
  EXPECT_EQ(back.summary(), m.summary());
}

TEST(Stability, AnOlderCheckpointsLogitDivergenceLoadsAsInstability) {
  MonitorConfig cfg;
  StabilityMonitor m(cfg);
  m.observe(1, 5.0, 1.0);
  auto state = m.state();
  state.erase("logit_unstable_step");
  state.erase("logit_unstable_value");
  state["diverged_step"] = 40;
  state["diverged_reason"] = "layer-0 max attention logit 12000.000000 > 10000.000000 (Wortsman et al. 2023)";
  StabilityMonitor old(cfg);
  old.load_state(state);
  EXPECT_FALSE(old.diverged());
  EXPECT_TRUE(old.logit_unstable());
  EXPECT_EQ(old.summary()["attn_logit_unstable_step"], 40);
}

// Issue 51: the output logits are the third way a run fails; the summary
// says which of the three came first, and at which step.
TEST(Stability, OutputLogitInstabilityAndWhichFailureCameFirst) {
  MonitorConfig cfg;
  cfg.diverge_attn_logit = 100.0;
  cfg.diverge_output_logit = 30.0;
  auto stats = [](double attn0, double out) {
    return nlohmann::json{{"attn", {{{"max_logit", attn0}}}}, {"output", {{"max_logit", out}, {"z_loss", 0.5}}}};
  };
  StabilityMonitor m(cfg);
  m.observe(1, 5.0, 1.0);
  m.observe_model_stats(10, stats(50.0, 12.0));
  EXPECT_FALSE(m.output_unstable());
  EXPECT_TRUE(m.summary()["first_failure"].is_null()) << "nothing has failed yet";
  m.observe_model_stats(20, stats(60.0, 45.0));  // the output logits first
  EXPECT_TRUE(m.output_unstable());
  m.observe_model_stats(30, stats(250.0, 80.0));  // then the attention logits
  m.observe(31, 5.0 * cfg.diverge_loss_factor + 1.0, 1.0);  // then the loss
  auto s = m.summary();
  EXPECT_EQ(s["output_logit_unstable_step"], 20);
  EXPECT_EQ(s["attn_logit_unstable_step"], 30);
  EXPECT_EQ(s["diverged_step"], 31);
  EXPECT_EQ(s["first_failure"]["kind"], "output_logits");
  EXPECT_EQ(s["first_failure"]["step"], 20);
  StabilityMonitor back(cfg);  // it survives a checkpoint
  back.load_state(m.state());
  EXPECT_EQ(back.summary(), s);
  // Two at one monitor step are named together; a non-finite logit counts.
  StabilityMonitor tie(cfg);
  tie.observe(1, 5.0, 1.0);
  tie.observe_model_stats(10, stats(500.0, std::numeric_limits<double>::infinity()));
  EXPECT_EQ(tie.summary()["first_failure"]["kind"], "attention_logits+output_logits");
}
