// The testbed's topology and commands, checked without touching the machine's network:
// hosts per subcluster or node, the link each pair of hosts gets (declared, inter-node,
// or the path through the chain), addresses, and the tc figures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "harp/cluster/cluster_io.h"
#include "harp/testbed/testbed.h"
#include "testutil/run_harp.h"

namespace harp::testbed {
namespace {

cluster::Cluster three_pools() {
  auto c = cluster::parse_cluster(Json::parse(R"({
    "version": 1, "name": "three",
    "devices": [{"name": "slowcpu", "peak_tflops": 0.5, "memory_gib": 16, "memory_bandwidth_gbs": 25,
                 "emulated_slowdown": 2}],
    "subclusters": [
      {"name": "a", "device": "cpu", "nodes": 2, "devices_per_node": 2,
       "intra_node": {"bandwidth_gbps": 100, "latency_us": 5},
       "inter_node": {"bandwidth_gbps": 8, "latency_us": 40}},
      {"name": "b", "device": "slowcpu", "nodes": 1, "devices_per_node": 3,
       "intra_node": {"bandwidth_gbps": 100, "latency_us": 5}},
      {"name": "c", "device": "cpu", "nodes": 1, "devices_per_node": 1}],
    "links": [{"between": ["a", "b"], "bandwidth_gbps": 2, "latency_ms": 0.5},
              {"between": ["b", "c"], "bandwidth_gbps": 0.5, "latency_ms": 1}]})"),
                                  "three.json");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

TEST(TestbedTopology, OneHostPerNodeOrSubclusterWithItsDevices) {
  auto t = topology_for(three_pools(), "harpx");
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->hosts.size(), 4u);  // a's two nodes, b, c
  EXPECT_EQ(t->hosts[0].netns, "harpx-h0");
  EXPECT_EQ(t->hosts[0].devices, (std::vector<int>{0, 1}));
  EXPECT_EQ(t->hosts[1].devices, (std::vector<int>{2, 3}));
  EXPECT_EQ(t->hosts[1].node, 1);
  EXPECT_EQ(t->hosts[2].devices, (std::vector<int>{4, 5, 6}));
  EXPECT_EQ(t->hosts[2].node, -1);
  EXPECT_EQ(t->hosts[3].devices, (std::vector<int>{7}));
  EXPECT_EQ(t->host_of_device(5), 2);
  EXPECT_EQ(t->host_of_device(7), 3);
  std::vector<std::string> addresses;
  for (const auto& h : t->hosts) addresses.push_back(h.address);
  EXPECT_EQ(addresses, (std::vector<std::string>{"10.99.0.1", "10.99.0.2", "10.99.0.3", "10.99.0.4"}));
}

TEST(TestbedTopology, EveryPairGetsItsLink) {
  auto t = topology_for(three_pools(), "harpx");
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->wires.size(), 6u);  // a full mesh of 4 hosts
  auto wire = [&](int a, int b) {
    return *std::find_if(t->wires.begin(), t->wires.end(), [&](const Wire& w) { return w.a == a && w.b == b; });
  };
  EXPECT_DOUBLE_EQ(wire(0, 1).link.bandwidth_gbps, 8);  // a's nodes: its inter-node link
  EXPECT_DOUBLE_EQ(wire(0, 1).link.latency_s, 40e-6);
  EXPECT_DOUBLE_EQ(wire(1, 2).link.bandwidth_gbps, 2);  // declared a-b
  EXPECT_DOUBLE_EQ(wire(2, 3).link.latency_s, 1e-3);    // declared b-c
  // a-c is not declared: the path through b, its slowest bandwidth and summed latency.
  EXPECT_DOUBLE_EQ(wire(0, 3).link.bandwidth_gbps, 0.5);
  EXPECT_DOUBLE_EQ(wire(0, 3).link.latency_s, 1.5e-3);
  EXPECT_NE(wire(0, 3).rule.find("path a-b-c"), std::string::npos) << wire(0, 3).rule;
}

TEST(TestbedTopology, CommandsShapeBothDirectionsOfEveryLink) {
  auto t = topology_for(three_pools(), "harpx");
  ASSERT_TRUE(t.ok());
  for (Shaper shaper : {Shaper::kNetem, Shaper::kHtb}) {
    int rates = 0;
    bool saw_b_to_c = false;
    for (const auto& cmd : up_commands(*t, shaper)) {
      if (cmd[0] != "tc" || cmd[3] == "filter" || cmd[4] == "del") continue;
      EXPECT_NE(std::find(cmd.begin(), cmd.end(), shaper_name(shaper)), cmd.end());
      const auto rate = std::find(cmd.begin(), cmd.end(), "rate");
      if (rate == cmd.end()) continue;
      // htb: the link's rate is its root class 1:1 (two children share it).
      const auto classid = std::find(cmd.begin(), cmd.end(), "classid");
      if (shaper == Shaper::kHtb && (classid == cmd.end() || *(classid + 1) != "1:1")) continue;
      ++rates;
      // Host 3 (c) towards host 2 (b): 0.5 Gbit/s, and 1 ms with netem.
      if (cmd[2] == "harpx-h3" && cmd[6] == "hb2") {
        saw_b_to_c = true;
        // The declared bandwidth is the payload's: the wire rate adds the headers.
        EXPECT_EQ(*(rate + 1), std::to_string(std::llround(0.5e9 * wire_rate_factor())) + "bit");
        if (shaper == Shaper::kHtb) {
          const auto burst = std::find(cmd.begin(), cmd.end(), "burst");
          ASSERT_NE(burst, cmd.end());
          // A bucket of 50 us at the wire rate: a message crosses at most that early.
          EXPECT_EQ(*(burst + 1), std::to_string(std::llround(0.5e9 * wire_rate_factor() / 8 * 50e-6)));
        }
        if (shaper == Shaper::kNetem) {
          EXPECT_EQ(cmd[10], "1000us");
        }
      }
    }
    EXPECT_EQ(rates, 12);  // 6 links x 2 directions
    EXPECT_TRUE(saw_b_to_c);
  }
}

TEST(TestbedTopology, SegmentsPerPacketAndWireRate) {
  EXPECT_NEAR(wire_rate_factor(), 1514.0 / 1448.0, 1e-12);
  auto link = [](double gbps) {
    cluster::Link l;
    l.bandwidth_gbps = gbps;
    return l;
  };
  // What the link sends in 500 us, in 1514-byte frames, rounded: 0.41, 4.1, 41.3.
  EXPECT_EQ(gso_segments(link(0.01)), 1);  // at least one
  EXPECT_EQ(gso_segments(link(0.1)), 4);
  EXPECT_EQ(gso_segments(link(1)), 41);
  EXPECT_EQ(gso_segments(link(100)), 64);  // capped
  EXPECT_EQ(gso_segments(link(0.1), 100), 1);    // 0.83
  EXPECT_EQ(gso_segments(link(0.1), 2000), 17);  // 16.5
  // Every veth end gets its segment count.
  auto t = topology_for(three_pools(), "harpx");
  ASSERT_TRUE(t.ok());
  int gso = 0;
  for (const auto& cmd : up_commands(*t, Shaper::kHtb))
    if (std::find(cmd.begin(), cmd.end(), "gso_max_segs") != cmd.end()) ++gso;
  EXPECT_EQ(gso, 12);
  // The topology's packet time sizes them (harp testbed up --packet-us): 100 ms of any of
  // its links is more than 64 frames.
  t->packet_us = 1e5;
  for (const auto& cmd : up_commands(*t, Shaper::kHtb)) {
    if (std::find(cmd.begin(), cmd.end(), "gso_max_segs") != cmd.end()) {
      EXPECT_EQ(cmd.back(), "64");
    }
  }
}

TEST(TestbedTopology, PrefixIsCheckedAndDefaultsToTheFingerprint) {
  const auto c = three_pools();
  EXPECT_EQ(default_prefix(c), "harp" + c.fingerprint().substr(0, 6));
  EXPECT_TRUE(check_prefix(default_prefix(c)).ok());
  for (const char* bad : {"", "Harp", "harp-x", "harp/x", "a234567890123456789012345"}) {
    Status s = check_prefix(bad);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("[a-z0-9]"), std::string::npos) << s.message();
  }
  EXPECT_FALSE(topology_for(c, "bad-prefix").ok());
  auto t = topology_for(c, "");  // no --prefix: the cluster's own
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->prefix, default_prefix(c));
  EXPECT_EQ(t->hosts[0].netns, default_prefix(c) + "-h0");
}

TEST(TestbedTopology, TooManyNodesIsRefusedWithAFix) {
  auto c = three_pools();
  c.subclusters[0].nodes = 70;
  auto t = topology_for(c, "harpx");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("fewer nodes"), std::string::npos) << t.status().message();
}

TEST(TestbedCli, DryRunPrintsTheCommandsWithoutRunningThem) {
  auto r = testing::run_harp({"testbed", "up", "--cluster", HARP_SOURCE_DIR "/examples/clusters/cpu_hetero.yaml",
                              "--prefix", "harpdry", "--dry-run"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("ip netns add harpdry-h2"), std::string::npos) << r.out;
  // 1 Gbit/s of payload: the wire rate carries the headers too.
  EXPECT_NE(r.out.find("tc -n harpdry-h2 qdisc replace dev hb0 root netem delay 500us rate " +
                       std::to_string(std::llround(1e9 * wire_rate_factor())) + "bit"),
            std::string::npos)
      << r.out;
  // As many segments as 1 Gbit/s sends in 500 us (the default packet time), or in 100 us.
  EXPECT_NE(r.out.find("ip -n harpdry-h2 link set hb0 gso_max_segs 41"), std::string::npos) << r.out;
  r = testing::run_harp({"testbed", "up", "--cluster", HARP_SOURCE_DIR "/examples/clusters/cpu_hetero.yaml", "--prefix",
                         "harpdry", "--dry-run", "--packet-us", "100"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("ip -n harpdry-h2 link set hb0 gso_max_segs 8"), std::string::npos) << r.out;
  auto bad = testing::run_harp({"testbed", "down"});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("--cluster FILE or --prefix P"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace harp::testbed
