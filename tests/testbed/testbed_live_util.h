// What the testbed's live tests share (testbed_live_test.cc, testbed_drift_test.cc): the
// harp binary, a shell, the check that nothing of a testbed is left, and a two-pool run
// over a shaped link with the run's own measure of it.
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "harp/common/document.h"
#include "harp/testbed/testbed.h"
#include "testutil/temp_dir.h"

namespace harp::testbed {

inline const std::string kHarp = std::string(HARP_BINARY_DIR) + "/src/cli/harp";

inline std::string unique_prefix(const char* what) { return std::string("harpt") + what + std::to_string(getpid() % 100000); }

#define SKIP_WITHOUT_TESTBED()                                             \
  do {                                                                     \
    if (Status s = available(); !s.ok()) GTEST_SKIP() << s.message();      \
  } while (0)

// Runs a shell command line; returns its exit code and what it printed (stdout + stderr).
inline int shell(const std::string& line, std::string* output = nullptr) {
  FILE* p = popen((line + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  const int status = pclose(p);
  if (output != nullptr) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Nothing of the prefix anywhere: no namespace, and the initial namespace holds no veth
// of ours (they are made inside the namespaces) and no shaping qdisc.
inline void expect_nothing_left(const std::string& prefix) {
  auto left = namespaces_with_prefix(prefix);
  ASSERT_TRUE(left.ok()) << left.status().message();
  EXPECT_TRUE(left->empty()) << (*left)[0];
  auto links = run_command({"ip", "-o", "link", "show"});
  ASSERT_TRUE(links.ok());
  EXPECT_EQ(links->find(": hb"), std::string::npos) << *links;
  auto qdiscs = run_command({"tc", "qdisc", "show"});
  ASSERT_TRUE(qdiscs.ok());
  EXPECT_EQ(qdiscs->find("netem"), std::string::npos) << *qdiscs;
  EXPECT_EQ(qdiscs->find("htb"), std::string::npos) << *qdiscs;
}

// Two one-device pools joined by one link of `gbps`; 50 us is about a veth's own latency.
inline std::string pair_cluster(const std::string& name, double gbps) {
  return "version: 1\nname: " + name +
         "\nsubclusters:\n"
         "  - {name: left, device: cpu, nodes: 1, devices_per_node: 1}\n"
         "  - {name: right, device: cpu, nodes: 1, devices_per_node: 1}\n"
         "links:\n  - {between: [left, right], bandwidth_gbps: " +
         std::to_string(gbps) + ", latency_ms: 0.05}\n";
}

// A two-pool run at 0.1 Gbit/s in `dir`: cluster.yaml, job.yaml (a two-block GPT whose
// activation is 128 KiB: 10.5 ms on the link; `training` its training line), plan.json
// (uniform: one stage per pool), corpus.bin.
inline void prepare_pair_run(testing::TempDir& dir, const std::string& training) {
  std::ofstream(dir.file("cluster.yaml")) << pair_cluster("shaped-pair", 0.1);
  std::ofstream(dir.file("job.yaml")) << R"(version: 1
cluster: cluster.yaml
model: {family: gpt, name: gpt-shaped, num_blocks: 2, hidden: 128, heads: 4, seq_len: 128, vocab: 256, granularity: 1}
planner: {strategy: uniform, microbatches: 12, microbatch_size: 2}
)" << training << "\n";
  {
    std::ofstream text(dir.file("corpus.txt"));
    for (int i = 0; i < 4000; ++i) text << "line " << i << " of a corpus for the shaped link test\n";
  }
  std::string out;
  ASSERT_EQ(shell(kHarp + " plan --job " + dir.file("job.yaml") + " --output " + dir.file("plan.json"), &out), 0) << out;
  ASSERT_EQ(shell(kHarp + " data prepare --input " + dir.file("corpus.txt") + " --output " + dir.file("corpus.bin"), &out),
            0)
      << out;
  auto plan = load_document(dir.file("plan.json"));
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ((*plan)["stages"].size(), 2u) << "the test needs a plan across both pools";
}

// `harp launch --testbed` of the pair run (prepare_pair_run) under `prefix`; its exit code.
inline int launch_pair_run(testing::TempDir& dir, const std::string& prefix, std::string* out) {
  return shell("timeout 150 " + kHarp + " launch --testbed " + dir.file("cluster.yaml") + " --testbed-prefix " +
                   prefix + " --plan " + dir.file("plan.json") + " -- " + kHarp + " train --plan " +
                   dir.file("plan.json") + " --job " + dir.file("job.yaml") + " --data " + dir.file("corpus.bin") +
                   " --out " + dir.file("run"),
               out);
}

// Per step, the link's transit as the run measured it (metrics.jsonl's link_s).
inline std::vector<double> link_s_per_step(testing::TempDir& dir) {
  std::vector<double> out;
  std::ifstream in(dir.file("run/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const Json r = Json::parse(line, nullptr, false);
    if (r.is_object() && r.contains("step") && r.contains("link_s") && !r["link_s"].empty())
      out.push_back(r["link_s"][0].get<double>());
  }
  return out;
}

}  // namespace harp::testbed
