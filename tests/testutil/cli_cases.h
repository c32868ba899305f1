// Helpers of the CLI hardening tests: one-line messages, and a one-device job planned.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
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

#define EXPECT_ONE_LINE(r) \
  EXPECT_EQ(lines((r).err), 1) << (r).err.substr(0, 3000); \
  EXPECT_EQ((r).err.find("internal error"), std::string::npos) << (r).err

}  // namespace harp::testing
