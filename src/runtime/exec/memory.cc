// The counting CPU allocator (see memory.h).
#include "harp/runtime/exec/memory.h"

#include <atomic>
#include <cstddef>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

namespace harp::runtime {
namespace {

std::atomic<long long> g_live{0}, g_peak{0};

// A header in front of each block holds its size; 64 bytes keep libtorch's alignment.
constexpr size_t kHeader = 64;

void counted_free(void* p) {
  if (p == nullptr) return;
  char* base = static_cast<char*>(p) - kHeader;
  g_live -= static_cast<long long>(*reinterpret_cast<size_t*>(base));
  c10::free_cpu(base);
}

// The data pointer is its own context (raw_deleter), as libtorch's default CPU
// allocator does.
struct CountingAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    char* base = static_cast<char*>(c10::alloc_cpu(n + kHeader));
    *reinterpret_cast<size_t*>(base) = n;
    const long long live = g_live += static_cast<long long>(n);
    long long peak = g_peak.load();
    while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
    }
    void* p = base + kHeader;
    return {p, p, &counted_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &counted_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

}  // namespace

void install_counting_allocator() {
  static CountingAllocator* allocator = [] {
    auto* a = new CountingAllocator();  // lives as long as the process, as libtorch's do
    c10::SetCPUAllocator(a, /*priority=*/100);
    return a;
  }();
  (void)allocator;
}

namespace {

// The caching allocator's statistics for a device (c10's device-generic interface: no
// CUDA header here).
c10::CachingDeviceAllocator::DeviceStats device_stats(const c10::Device& device) {
  return c10::getDeviceAllocator(device.type())->getDeviceStats(device.index());
}
constexpr size_t kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

}  // namespace

double live_tensor_bytes(const c10::Device& device) {
  if (device.is_cpu()) return static_cast<double>(g_live.load());
  return static_cast<double>(device_stats(device).allocated_bytes[kAll].current);
}

double peak_tensor_bytes(const c10::Device& device) {
  if (device.is_cpu()) return static_cast<double>(g_peak.load());
  return static_cast<double>(device_stats(device).allocated_bytes[kAll].peak);
}

double peak_reserved_bytes(const c10::Device& device) {
  if (device.is_cpu()) return peak_tensor_bytes(device);
  return static_cast<double>(device_stats(device).reserved_bytes[kAll].peak);
}

void reset_peak_tensor_bytes(const c10::Device& device) {
  if (device.is_cpu()) {
    g_peak = g_live.load();
    return;
  }
  c10::getDeviceAllocator(device.type())->resetPeakStats(device.index());
}

void retain_freed_memory() {
#ifdef __GLIBC__
  // Fixed thresholds also switch off glibc's dynamic adjustment of them.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
#endif
}

}  // namespace harp::runtime
