#include <gtest/gtest.h>

#include "config/config.h"

using namespace keel;

TEST(Config, DefaultsValidate) {
  Config c;
  EXPECT_NO_THROW(validate(c));
}

TEST(Config, RoundTripThroughYaml) {
  Config c = config_from_yaml_text("model:\n  d_model: 64\n  qk_norm:\n    type: l2\n");
  Config d = config_from_yaml_text(config_to_yaml(c));
  EXPECT_EQ(config_to_yaml(c), config_to_yaml(d));
  EXPECT_EQ(d.model.d_model, 64);
  EXPECT_EQ(d.model.qk_norm.type, "l2");
}
