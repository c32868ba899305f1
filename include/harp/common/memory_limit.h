// How much memory this process may use: the machine's physical memory, lowered by the
// limits a user or a scheduler sets (a cgroup's memory limit, the address-space limit of
// `ulimit -v`). Memory pre-checks compare against this, so a job run under a 2 GiB limit
// is refused up front, naming the limit, rather than killed later (docs/errors.md).
#pragma once

#include <string>

namespace harp {

struct MemoryLimit {
  double bytes = 0;    // 0: unknown
  std::string source;  // "physical memory", "the cgroup's memory limit", "the address-space limit (ulimit -v)"
};

// The smallest of: physical memory; the memory limit of this process's cgroup (v2
// memory.max, v1 memory.limit_in_bytes); RLIMIT_AS less the address space already mapped.
MemoryLimit usable_memory();

// RLIMIT_AS's soft limit in bytes (ulimit -v); 0 when there is none.
double address_space_limit();

}  // namespace harp
