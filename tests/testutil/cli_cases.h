// Helpers of the CLI hardening tests: one-line messages, and a one-device job planned.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "testutil/files.h"
#include "testutil/run_harp.h"
#include "testutil/temp_dir.h"

namespace harp::testing {

inline int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// A one-device cluster and a job of gpt-tiny (or another model) on it, planned to p.json.
inline void one_device_job(const TempDir& d, const std::string& model = "{family: gpt, preset: gpt-tiny, granularity: 1}") {
  write(d.file("one.yaml"), "version: 1\nname: one\nsubclusters:\n  - {name: a, device: cpu, nodes: 1, devices_per_node: 1}\n");
  write(d.file("job.yaml"), "version: 1\ncluster: one.yaml\nmodel: " + model +
                                "\nplanner: {microbatches: 2, microbatch_size: 2}\ntraining: {steps: 4, lr: 0.01}\n");
  ASSERT_EQ(run_harp({"plan", "--job", d.file("job.yaml"), "--output", d.file("p.json")}).rc, 0);
}

// A memory cgroup of `bytes` made for a test (v2 memory.max, else v1
// memory.limit_in_bytes), removed at the end; `path` is empty where none can be made (not
// root). `enter()` is a shell prefix that moves the command into it.
struct MemoryCgroup {
  std::string path;
  explicit MemoryCgroup(long long bytes) {
    namespace fs = std::filesystem;
    const std::string name = "harp-test-" + std::to_string(::getpid()) + "-" + std::to_string(bytes);
    std::error_code ec;
    if (fs::exists("/sys/fs/cgroup/cgroup.controllers")) {
      if (fs::create_directory("/sys/fs/cgroup/" + name, ec)) {
        path = "/sys/fs/cgroup/" + name;
        std::ofstream(path + "/memory.max") << bytes;
      }
    } else if (fs::exists("/sys/fs/cgroup/memory") && fs::create_directory("/sys/fs/cgroup/memory/" + name, ec)) {
      path = "/sys/fs/cgroup/memory/" + name;
      std::ofstream(path + "/memory.limit_in_bytes") << bytes;
    }
    if (!path.empty() && !fs::exists(path + "/cgroup.procs")) path.clear();
  }
  ~MemoryCgroup() {
    if (!path.empty()) ::rmdir(path.c_str());
  }
  std::string enter() const { return "echo \\$\\$ > " + path + "/cgroup.procs && exec"; }
};

#define EXPECT_ONE_LINE(r) \
  EXPECT_EQ(lines((r).err), 1) << (r).err.substr(0, 3000); \
  EXPECT_EQ((r).err.find("internal error"), std::string::npos) << (r).err

}  // namespace harp::testing
