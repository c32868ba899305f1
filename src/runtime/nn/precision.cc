// AutocastGuard over libtorch's autocast state, and LossScaler (see precision.h).
// libtorch's per-device autocast state (set_autocast_enabled(device, on), ...; 2.4 on).
#include "harp/runtime/nn/precision.h"

#include <algorithm>

#include <ATen/autocast_mode.h>

namespace harp::runtime {
namespace {

bool enabled(c10::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
void set_enabled(c10::DeviceType d, bool on) { at::autocast::set_autocast_enabled(d, on); }
at::ScalarType dtype_of(c10::DeviceType d) { return at::autocast::get_autocast_dtype(d); }
void set_dtype(c10::DeviceType d, at::ScalarType t) { at::autocast::set_autocast_dtype(d, t); }

}  // namespace

AutocastGuard::AutocastGuard(torch::Dtype compute, const torch::Device& device)
    : on_(compute == torch::kBFloat16 || compute == torch::kHalf),
      device_(device.is_cuda() ? c10::DeviceType::CUDA : c10::DeviceType::CPU) {
  if (!on_) return;
  was_enabled_ = enabled(device_);
  was_dtype_ = dtype_of(device_);
  set_enabled(device_, true);
  set_dtype(device_, compute);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!on_) return;
  // The cached low-precision copies of the weights go when the outermost region ends.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_enabled(device_, was_enabled_);
  set_dtype(device_, was_dtype_);
}

AutocastCacheScope::AutocastCacheScope(torch::Dtype compute)
    : on_(compute == torch::kBFloat16 || compute == torch::kHalf) {
  if (on_) at::autocast::increment_nesting();
}

AutocastCacheScope::~AutocastCacheScope() {
  if (on_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
}

AutocastState AutocastGuard::current() {
  for (c10::DeviceType d : {c10::DeviceType::CPU, c10::DeviceType::CUDA})
    if (enabled(d)) return AutocastState{true, d, dtype_of(d)};
  return AutocastState{};
}

bool AutocastGuard::active() { return current().on; }

bool LossScaler::update(bool finite) {
  if (!enabled()) return finite;
  if (!finite) {
    scale = std::max(kMinScale, scale / 2);
    good_steps = 0;
    return false;
  }
  if (++good_steps >= growth_interval) {
    scale = std::min(kMaxScale, scale * 2);
    good_steps = 0;
  }
  return true;
}

}  // namespace harp::runtime
