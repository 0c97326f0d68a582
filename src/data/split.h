// The train/validation split: a document is held out when the hash of its
// text falls below data.val_fraction. It depends on nothing but the text, so
// adding files, appending documents or reordering sources never moves an
// existing document between splits.
#pragma once

#include <string_view>

#include "util/hashing.h"

namespace keel {

inline bool is_validation_document(std::string_view text, double val_fraction) {
  return val_fraction > 0 && unit_interval(mix64(fnv1a64(text))) < val_fraction;
}

}  // namespace keel
