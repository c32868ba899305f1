// Cluster parsing: a valid file round-trips; every bad input class gets its message
// (table-driven: the message must name the field path and carry a fix).
#include <gtest/gtest.h>

#include "testutil/status.h"

#include "harp/cluster/cluster_io.h"

namespace harp::cluster {
namespace {

const char* kGood = R"(
version: 1
name: t
subclusters:
  - {name: v, device: V100-32GB, nodes: 1, devices_per_node: 8,
     intra_node: {bandwidth_gbps: 200, latency_us: 10}}
  - {name: a, device: A100-40GB, nodes: 2, devices_per_node: 2,
     intra_node: {bandwidth_gbps: 200, latency_us: 10},
     inter_node: {bandwidth_gbps: 100, latency_us: 20}}
links:
  - {between: [v, a], bandwidth_gbps: 5, latency_ms: 1}
)";

StatusOr<Cluster> parse(const std::string& yaml) {
  auto doc = parse_yaml_text(yaml, "c.yaml");
  if (!doc.ok()) return doc.status();
  return parse_cluster(*doc, "c.yaml");
}

TEST(ClusterIo, ParsesTheGoodFile) {
  auto c = parse(kGood);
  HARP_ASSERT_OK(c);
  EXPECT_EQ(c->num_devices(), 12);
  EXPECT_EQ(c->first_device_id(1), 8);
  EXPECT_EQ(c->device_of(1).name, "A100-40GB");
  auto link = c->link_between(0, 1);
  ASSERT_TRUE(link.has_value());
  EXPECT_DOUBLE_EQ(link->bytes_per_s(), 5e9 / 8);
  EXPECT_DOUBLE_EQ(link->latency_s, 1e-3);
  // 0.625 GB/s and 1 ms: 50.3 MB takes 0.0815 s (bytes / bandwidth + latency).
  EXPECT_NEAR(link->transfer_s(50331648.0), 50331648.0 / 0.625e9 + 1e-3, 1e-12);
  EXPECT_DOUBLE_EQ(c->link_for(1, 0, 1, 1).latency_s, 20e-6);
  EXPECT_DOUBLE_EQ(c->link_for(1, 1, 1, 1).latency_s, 10e-6);
}

TEST(ClusterIo, RoundTripsThroughJson) {
  auto c = parse(kGood);
  ASSERT_TRUE(c.ok());
  auto again = parse_cluster(cluster_to_json(*c), "again.json");
  HARP_ASSERT_OK(again);
  EXPECT_EQ(cluster_to_json(*again), cluster_to_json(*c));
  EXPECT_EQ(again->fingerprint(), c->fingerprint());
}

TEST(ClusterIo, UserDevices) {
  auto c = parse(R"(
version: 1
devices: [{name: X1, peak_tflops: 100, memory_gib: 24, memory_bandwidth_gbs: 900,
           emulated_slowdown: 2}]
subclusters: [{name: x, device: X1, nodes: 1, devices_per_node: 1}]
)");
  HARP_ASSERT_OK(c);
  EXPECT_EQ(c->device_of(0).emulated_slowdown, 2.0);
}

// What a device computes in: the catalogue's capabilities, a declared device's (no
// bfloat16 below 8.0 unless it says so), kept through JSON; a number that is no
// capability is refused.
TEST(ClusterIo, DeviceCapabilitiesAndBfloat16) {
  EXPECT_FALSE(find_builtin_device("V100-32GB")->bfloat16);
  EXPECT_EQ(find_builtin_device("V100-32GB")->compute_capability, 7.0);
  EXPECT_FALSE(find_builtin_device("T4")->bfloat16);
  EXPECT_TRUE(find_builtin_device("A100-80GB")->bfloat16);
  EXPECT_EQ(find_builtin_device("H100-80GB")->compute_capability, 9.0);
  EXPECT_TRUE(find_builtin_device("cpu")->bfloat16);
  auto c = parse(R"(
version: 1
devices: [{name: P100, peak_tflops: 19, memory_gib: 16, memory_bandwidth_gbs: 732, compute_capability: 6.0,
           fp32_tflops: 9.3},
          {name: X1, peak_tflops: 100, memory_gib: 24, memory_bandwidth_gbs: 900}]
subclusters: [{name: p, device: P100, nodes: 1, devices_per_node: 1},
              {name: x, device: X1, nodes: 1, devices_per_node: 1}]
links: [{between: [p, x], bandwidth_gbps: 10}]
)");
  HARP_ASSERT_OK(c);
  EXPECT_FALSE(c->device_of(0).bfloat16);
  EXPECT_TRUE(c->device_of(1).bfloat16);
  auto again = parse_cluster(cluster_to_json(*c), "again.json");
  HARP_ASSERT_OK(again);
  EXPECT_EQ(again->device_of(0).compute_capability, 6.0);
  EXPECT_EQ(again->device_of(0).fp32_tflops, 9.3);
  EXPECT_EQ(again->device_of(1).fp32_tflops, 0.0);  // not declared
  EXPECT_EQ(find_builtin_device("A100-80GB")->fp32_tflops, 19.5);
  EXPECT_FALSE(again->device_of(0).bfloat16);
  auto bad = parse(R"(
version: 1
devices: [{name: Y, peak_tflops: 1, memory_gib: 1, memory_bandwidth_gbs: 1, compute_capability: 120}]
subclusters: [{name: y, device: Y, nodes: 1, devices_per_node: 1}]
)");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("compute_capability = 120: is not a CUDA compute capability"),
            std::string::npos)
      << bad.status().message();
}

TEST(ClusterIo, CatalogueHasTheRequiredDevices) {
  for (const char* name : {"V100-32GB", "A100-40GB", "A100-80GB", "H100-80GB", "H800", "H200",
                           "L40S", "RTX4090", "T4", "cpu"}) {
    auto d = find_builtin_device(name);
    ASSERT_TRUE(d.has_value()) << name;
    EXPECT_GT(d->peak_tflops, 0);
    EXPECT_GT(d->memory_gib, 0);
    EXPECT_GT(d->memory_bandwidth_gbs, 0);
  }
}

struct BadCase {
  const char* name;
  std::string yaml;
  std::string path;    // field path the message must contain
  std::string phrase;  // the rule's words
};

const std::string kSubA =
    "  - {name: a, device: A100-40GB, nodes: 1, devices_per_node: 1}\n";

std::vector<BadCase> bad_cases() {
  return {
      {"not_yaml", "subclusters: [a, b\n", "line", "not valid YAML"},
      {"root_not_mapping", "- 1\n- 2\n", "<root>", "must be a mapping"},
      {"bad_version", "version: 7\nsubclusters:\n" + kSubA, "version", "not a supported version"},
      {"no_subclusters", "version: 1\n", "subclusters", "non-empty list"},
      {"empty_subclusters", "version: 1\nsubclusters: []\n", "subclusters", "non-empty list"},
      {"unknown_device",
       "subclusters:\n  - {name: a, device: V200, nodes: 1, devices_per_node: 1}\n",
       "subclusters[0].device", "not a known device type"},
      {"zero_devices",
       "subclusters:\n  - {name: a, device: T4, nodes: 1, devices_per_node: 0}\n",
       "subclusters[0].devices_per_node", "at least 1"},
      {"zero_nodes", "subclusters:\n  - {name: a, device: T4, nodes: 0, devices_per_node: 1}\n",
       "subclusters[0].nodes", "at least 1"},
      {"fractional_nodes",
       "subclusters:\n  - {name: a, device: T4, nodes: 1.5, devices_per_node: 1}\n",
       "subclusters[0].nodes", "whole number"},
      {"text_nodes", "subclusters:\n  - {name: a, device: T4, nodes: two, devices_per_node: 1}\n",
       "subclusters[0].nodes", "whole number"},
      {"missing_name", "subclusters:\n  - {device: T4, nodes: 1, devices_per_node: 1}\n",
       "subclusters[0].name", "required"},
      {"duplicate_name", "subclusters:\n" + kSubA + kSubA, "subclusters[1].name", "another subcluster"},
      {"missing_intra",
       "subclusters:\n  - {name: a, device: T4, nodes: 1, devices_per_node: 2}\n",
       "subclusters[0].intra_node", "required"},
      {"missing_inter",
       "subclusters:\n  - {name: a, device: T4, nodes: 2, devices_per_node: 1}\n",
       "subclusters[0].inter_node", "required"},
      {"negative_bandwidth",
       "subclusters:\n  - {name: a, device: T4, nodes: 1, devices_per_node: 2,\n"
       "     intra_node: {bandwidth_gbps: -5, latency_us: 1}}\n",
       "subclusters[0].intra_node.bandwidth_gbps", "between 0.001 and 100000 Gbit/s"},
      {"negative_latency",
       "subclusters:\n  - {name: a, device: T4, nodes: 1, devices_per_node: 2,\n"
       "     intra_node: {bandwidth_gbps: 5, latency_us: -1}}\n",
       "subclusters[0].intra_node.latency_us", "must not be negative"},
      {"unknown_field",
       "subclusters:\n  - {name: a, device: T4, nodes: 1, devices_per_node: 1, gpus: 4}\n",
       "subclusters[0].gpus", "not a known field"},
      {"missing_link",
       "subclusters:\n" + kSubA + "  - {name: b, device: T4, nodes: 1, devices_per_node: 1}\n",
       "links", "no link between consecutive subclusters"},
      {"link_unknown_subcluster",
       "subclusters:\n" + kSubA +
           "links: [{between: [a, zz], bandwidth_gbps: 5, latency_ms: 1}]\n",
       "links[0].between", "unknown subcluster"},
      {"link_to_itself",
       "subclusters:\n" + kSubA + "links: [{between: [a, a], bandwidth_gbps: 5, latency_ms: 1}]\n",
       "links[0].between", "itself"},
      {"link_three_ends",
       "subclusters:\n" + kSubA + "links: [{between: [a, b, c], bandwidth_gbps: 5}]\n",
       "links[0].between", "exactly two"},
      {"link_zero_bandwidth",
       "subclusters:\n" + kSubA + "  - {name: b, device: T4, nodes: 1, devices_per_node: 1}\n" +
           "links: [{between: [a, b], bandwidth_gbps: 0, latency_ms: 1}]\n",
       "links[0].bandwidth_gbps", "between 0.001 and 100000 Gbit/s"},
      {"user_device_shadows_builtin",
       "devices: [{name: T4, peak_tflops: 1, memory_gib: 1, memory_bandwidth_gbs: 1}]\n"
       "subclusters:\n" + kSubA,
       "devices[0].name", "already defined"},
      {"user_device_zero_memory",
       "devices: [{name: X, peak_tflops: 1, memory_gib: 0, memory_bandwidth_gbs: 1}]\n"
       "subclusters:\n" + kSubA,
       "devices[0].memory_gib", "between 0.001 and 65536 GiB"},
      {"slowdown_below_one",
       "devices: [{name: X, peak_tflops: 1, memory_gib: 1, memory_bandwidth_gbs: 1, "
       "emulated_slowdown: 0.5}]\nsubclusters:\n" + kSubA,
       "devices[0].emulated_slowdown", "between 1 and 1000"},
  };
}

class ClusterBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(ClusterBadInput, GivesItsMessage) {
  const BadCase& c = GetParam();
  auto r = parse(c.yaml);
  ASSERT_FALSE(r.ok()) << c.name << " was accepted";
  const std::string& m = r.status().message();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.find("c.yaml"), std::string::npos) << m;
  EXPECT_NE(m.find(c.path), std::string::npos) << "path missing: " << m;
  EXPECT_NE(m.find(c.phrase), std::string::npos) << "rule missing: " << m;
  if (std::string(c.name) != "not_yaml") {
    EXPECT_NE(m.find("fix:"), std::string::npos) << m;
  }
  EXPECT_EQ(m.find('\n'), std::string::npos) << "one line expected: " << m;
}

INSTANTIATE_TEST_SUITE_P(AllClasses, ClusterBadInput, ::testing::ValuesIn(bad_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ClusterIo, MissingFileIsAnIoError) {
  auto r = load_cluster("/nonexistent/cluster.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  EXPECT_NE(r.status().message().find("/nonexistent/cluster.yaml"), std::string::npos);
}

TEST(ClusterIo, ExamplesLoad) {
  for (const char* f : {"paper_v100_a100.yaml", "three_subclusters.yaml"}) {
    auto c = load_cluster(std::string(HARP_SOURCE_DIR) + "/examples/clusters/" + f);
    EXPECT_TRUE(c.ok()) << f << ": " << c.status().to_string();
  }
}

// Elastic training drops a lost device: a one-device node goes; a node of several keeps
// the rest as its own subcluster, linked to its old one by the inter-node link; a
// subcluster that empties goes, its neighbours joined through the path it was on. Each
// result is a valid cluster file (validated again through its JSON).
TEST(ClusterIo, WithoutADeviceIsStillAValidCluster) {
  const Cluster c = *parse(kGood);  // v: 1 x 8 (devices 0-7), a: 2 x 2 (8-11)
  auto reparsed = [](const Cluster& x) { return parse_cluster(cluster_to_json(x), "degraded"); };
  const Cluster one = without_device(c, 9);  // a's first node loses a device
  HARP_ASSERT_OK(reparsed(one));
  EXPECT_EQ(one.num_devices(), 11);
  ASSERT_EQ(one.subclusters.size(), 3u);
  EXPECT_EQ(one.subclusters[1].name, "a");
  EXPECT_EQ(one.subclusters[1].nodes, 1);
  EXPECT_EQ(one.subclusters[2].name, "a-degraded");
  EXPECT_EQ(one.subclusters[2].devices_per_node, 1);
  EXPECT_DOUBLE_EQ(one.link_between(1, 2)->bytes_per_s(), 100e9 / 8);  // a's inter-node link
  EXPECT_DOUBLE_EQ(one.link_between(0, 2)->latency_s, 1e-3);            // v's link kept
  const Cluster two = without_device(one, 10);  // the degraded node's last device
  HARP_ASSERT_OK(reparsed(two));
  EXPECT_EQ(two.num_devices(), 10);
  ASSERT_EQ(two.subclusters.size(), 2u);
  EXPECT_EQ(two.links.size(), 1u);
  const Cluster three = without_device(without_device(two, 9), 8);  // a is gone
  HARP_ASSERT_OK(reparsed(three));
  EXPECT_EQ(three.subclusters.size(), 1u);
  EXPECT_TRUE(three.links.empty());
}

// The ids after a removal: a bijection onto one id fewer that keeps every device's type
// and places a degraded node's devices after the rest of its subcluster.
TEST(ClusterIo, DeviceIdsWithoutADeviceFollowTheRenumbering) {
  const Cluster c = *parse(kGood);  // v: 1 x 8 (devices 0-7), a: 2 x 2 (8-11)
  const std::vector<int> ids = device_ids_without(c, 9);  // a's first node loses a device
  const Cluster one = without_device(c, 9);
  EXPECT_EQ(ids, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 10, -1, 8, 9}));
  auto type_of = [](const Cluster& x, int d) {
    int s = 0;
    while (d >= x.first_device_id(s) + x.subclusters[s].num_devices()) ++s;
    return x.device_of(s).name;
  };
  for (int d = 0; d < c.num_devices(); ++d) {
    if (ids[d] >= 0) {
      EXPECT_EQ(type_of(one, ids[d]), type_of(c, d)) << "device " << d;
    }
  }
  EXPECT_EQ(device_ids_without(c, 3), (std::vector<int>{0, 1, 2, -1, 3, 4, 5, 6, 7, 8, 9, 10}));
}

}  // namespace
}  // namespace harp::cluster
