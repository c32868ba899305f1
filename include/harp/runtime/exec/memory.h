// Live and peak tensor bytes of this process, counted by a CPU allocator that wraps
// libtorch's own (alloc_cpu/free_cpu) with a size header, and on CUDA read from libtorch's
// caching allocator. The profiler measures a layer's activations with it, and `harp
// train` a rank's peak per step.
//
// The figures are per process: ranks run as threads of one process share them. Tensors
// allocated before install_counting_allocator() are not counted (they keep the allocator
// that made them, and their deleter), so install it before building the model.
#pragma once

#include <c10/core/Device.h>

namespace harp::runtime {

// Makes the counting allocator libtorch's CPU allocator. Idempotent, thread-safe.
void install_counting_allocator();

// glibc's malloc hands large freed blocks back to the kernel (munmap, heap trimming), so
// the next microbatch's tensors fault their pages in again. Measured here (a 4-block GPT,
// s = 256, 2 ranks): full recomputation's backward cost 2.4 forwards more instead of one,
// and a plain step 7% more. This keeps freed memory in the process: blocks up to 32 MiB
// come from the heap, and up to 1 GiB of free heap is kept. Process-wide; call once at
// start (harp train, harp profile). A no-op without glibc.
void retain_freed_memory();

// Tensor bytes live on `device` now: the counting allocator's figure on the CPU, the
// caching allocator's allocated bytes on a CUDA device (its statistics: the same
// figures as torch.cuda.memory_allocated).
double live_tensor_bytes(const c10::Device& device = c10::Device(c10::DeviceType::CPU));
// The high-water mark of live_tensor_bytes(device) since the last
// reset_peak_tensor_bytes(device).
double peak_tensor_bytes(const c10::Device& device = c10::Device(c10::DeviceType::CPU));
// The high-water mark of what the allocator holds from the device (allocated plus cached:
// torch.cuda.max_memory_reserved) since the last reset; the CPU's is its peak tensor bytes.
double peak_reserved_bytes(const c10::Device& device = c10::Device(c10::DeviceType::CPU));
void reset_peak_tensor_bytes(const c10::Device& device = c10::Device(c10::DeviceType::CPU));

}  // namespace harp::runtime
