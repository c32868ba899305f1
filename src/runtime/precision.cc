// AutocastGuard over libtorch's CPU autocast state (see precision.h). libtorch 2.4 made
// the per-device functions generic (set_autocast_enabled(device, on), ...) and
// deprecated the CPU ones.
#include "harp/runtime/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace harp::runtime {
namespace {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool cpu_enabled() { return at::autocast::is_autocast_enabled(at::kCPU); }
void set_cpu_enabled(bool on) { at::autocast::set_autocast_enabled(at::kCPU, on); }
at::ScalarType cpu_dtype() { return at::autocast::get_autocast_dtype(at::kCPU); }
void set_cpu_dtype(at::ScalarType t) { at::autocast::set_autocast_dtype(at::kCPU, t); }
#else
bool cpu_enabled() { return at::autocast::is_cpu_enabled(); }
void set_cpu_enabled(bool on) { at::autocast::set_cpu_enabled(on); }
at::ScalarType cpu_dtype() { return at::autocast::get_autocast_cpu_dtype(); }
void set_cpu_dtype(at::ScalarType t) { at::autocast::set_autocast_cpu_dtype(t); }
#endif

}  // namespace

AutocastGuard::AutocastGuard(bool on) : on_(on) {
  if (!on_) return;
  was_enabled_ = cpu_enabled();
  was_dtype_ = cpu_dtype();
  set_cpu_enabled(true);
  set_cpu_dtype(at::kBFloat16);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!on_) return;
  // The cached bf16 copies of the weights go when the outermost region ends.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_cpu_enabled(was_enabled_);
  set_cpu_dtype(was_dtype_);
}

bool AutocastGuard::active() { return cpu_enabled() && cpu_dtype() == at::kBFloat16; }

}  // namespace harp::runtime
