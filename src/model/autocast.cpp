#include "model/autocast.h"

namespace keel {

AutocastScope::AutocastScope(bool enabled, torch::DeviceType device) : enabled_(enabled), device_(device) {
  if (!enabled_) return;
  at::autocast::set_autocast_enabled(device_, true);
  at::autocast::set_autocast_dtype(device_, at::kBFloat16);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!enabled_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_, false);
}

}  // namespace keel
