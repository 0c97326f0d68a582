// Runs a test body at every SIMD level of keel's CPU loops that this CPU
// supports (src/model/simd_dispatch.h), so a CI machine with AVX-512 also
// checks the AVX2 and base copies the AVX2-only and older CPUs run.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "model/simd_dispatch.h"

namespace keel_test {

template <typename Body>
void for_each_simd_level(Body body) {
  struct Reset {
    ~Reset() { keel::reset_simd_level(); }
  } reset;
  for (auto level : {keel::SimdLevel::kBase, keel::SimdLevel::kAvx2, keel::SimdLevel::kAvx512}) {
    if (static_cast<int>(level) > static_cast<int>(keel::simd_level_supported())) continue;
    keel::set_simd_level(level);
    SCOPED_TRACE(std::string("keel's loops at SIMD level ") + keel::simd_level_name(level));
    body();
  }
}

}  // namespace keel_test
