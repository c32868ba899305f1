// The memory this process may use (memory_limit.h), from /proc and /sys.
#include "harp/common/memory_limit.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace harp {
namespace {

// A number in a cgroup file ("max" or a huge value: no limit; 0 when unreadable).
double cgroup_number(const std::string& file) {
  std::ifstream in(file);
  std::string text;
  if (!(in >> text) || text == "max") return 0;
  try {
    const double v = std::stod(text);
    return v > 0 && v < 1e18 ? v : 0;  // cgroup v1 writes 2^63 - page for "unlimited"
  } catch (...) {
    return 0;
  }
}

// This process's cgroup memory limit in bytes (0: none): its own cgroup's file, v2 or v1.
double cgroup_limit() {
  std::ifstream in("/proc/self/cgroup");
  double limit = 0;
  for (std::string line; std::getline(in, line);) {
    // "0::/path" (v2) or "N:memory:/path" (v1; controllers may be listed together).
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    double v = 0;
    if (controllers.empty()) {
      v = cgroup_number("/sys/fs/cgroup" + path + "/memory.max");
    } else {
      std::stringstream list(controllers);
      for (std::string c; std::getline(list, c, ',');)
        if (c == "memory") v = cgroup_number("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes");
    }
    if (v > 0 && (limit == 0 || v < limit)) limit = v;
  }
  return limit;
}

// The address space this process has mapped (VmSize), bytes.
double mapped_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmSize:", 0) == 0) return std::stod(line.substr(7)) * 1024;  // kB
  return 0;
}

}  // namespace

double address_space_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_AS, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return 0;
  return static_cast<double>(r.rlim_cur);
}

MemoryLimit usable_memory() {
  MemoryLimit m;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) m = {static_cast<double>(pages) * static_cast<double>(page), "physical memory"};
  auto lower = [&m](double bytes, const char* source) {
    if (bytes > 0 && (m.bytes == 0 || bytes < m.bytes)) m = {bytes, source};
  };
  lower(cgroup_limit(), "the cgroup's memory limit");
  if (const double as = address_space_limit(); as > 0)
    lower(std::max(1.0, as - mapped_bytes()), "the address-space limit (ulimit -v) less what is mapped");
  return m;
}

}  // namespace harp
