// Helpers shared by the checkpoint test programs.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "util/error.h"

// Runs fn, expects a CheckpointError whose message contains every fragment.
inline void expect_error(const std::function<void()>& fn, const std::vector<std::string>& fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected a CheckpointError or FileError containing '" << fragments.at(0) << "'";
  } catch (const keel::Error& e) {  // CheckpointError, or FileError from the file layer
    std::string msg = e.what();
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
  }
}
