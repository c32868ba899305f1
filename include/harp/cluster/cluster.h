// The cluster: an ordered list of homogeneous subclusters joined by links. The order
// is the pipeline order (stages never go back to an earlier subcluster).
//
// Invariants of a Cluster returned by load/parse (cluster_io.h): at least one
// subcluster; names unique; every subcluster's device is in `devices`; nodes and
// devices_per_node >= 1; every link has positive bandwidth and non-negative latency;
// every pair of consecutive subclusters has a link.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harp/cluster/device.h"
#include "harp/common/units.h"

namespace harp::cluster {

struct Link {
  double bandwidth_gbps = 0.0;  // Gbit/s, one direction (links are full duplex)
  double latency_s = 0.0;       // one-way latency, seconds

  BytesPerSecond bytes_per_s() const { return gbps_to_bytes_per_s(bandwidth_gbps); }
  // Time to move `bytes` over this link: latency + bytes / bandwidth.
  Seconds transfer_s(Bytes bytes) const { return latency_s + bytes / bytes_per_s(); }
};

struct Subcluster {
  std::string name;
  std::string device;  // key into Cluster::devices
  int nodes = 1;
  int devices_per_node = 1;
  Link intra_node;  // between devices of one node (NVLink/PCIe)
  Link inter_node;  // between nodes of this subcluster (IB/Ethernet)

  int num_devices() const { return nodes * devices_per_node; }
};

struct SubclusterLink {
  std::string a, b;  // subcluster names
  Link link;
};

struct Cluster {
  std::string name;
  std::map<std::string, DeviceType> devices;  // every device type the subclusters use
  std::vector<Subcluster> subclusters;
  std::vector<SubclusterLink> links;

  int num_devices() const;
  // Global id of the first device of subcluster `index`; devices are numbered in
  // subcluster order, then node, then local index.
  int first_device_id(int subcluster_index) const;
  const DeviceType& device_of(int subcluster_index) const;
  // Machines: the subclusters' nodes in order (subcluster 0's nodes first). A node is one
  // machine, one launcher of `harp launch --nnodes`.
  int num_nodes() const;
  // The machine (0..num_nodes()-1) device `device_id` is on. REQUIRES: a valid device id.
  int node_of_device(int device_id) const;
  // Link between two subclusters (either order), if declared.
  std::optional<Link> link_between(int a, int b) const;
  // The link a transfer uses between devices (subcluster, node) pairs.
  // REQUIRES: the pair is connected (always true for a validated cluster and
  // subclusters a <= b that are equal or consecutive).
  Link link_for(int subcluster_a, int node_a, int subcluster_b, int node_b) const;
  // Between any two subclusters: the declared link, else the chain of consecutive links
  // between them (the slowest bandwidth, the summed latency), as traffic routed along the
  // chain sees it; `path` (if given) names the subclusters passed. REQUIRES: a != b.
  Link path_link(int a, int b, std::string* path = nullptr) const;
  // Short stable fingerprint of the cluster's contents (hex), stored in plans.
  std::string fingerprint() const;
};

// The cluster after losing device `device_id` (elastic training): its node keeps one
// device fewer. A node of one device goes; otherwise the node becomes a subcluster of
// its own right after the original ("NAME-degraded": same device type and intra-node
// link; linked to the rest by the original's inter-node link and the original's links).
// A subcluster left without nodes goes with its links. Empty when no device is left.
// REQUIRES: 0 <= device_id < c.num_devices().
Cluster without_device(const Cluster& c, int device_id);
// Where each device of c is in without_device(c, device_id): its new id, or -1 for the
// removed one (later ids shift down; a degraded node's devices follow the rest of its
// subcluster, in their order).
std::vector<int> device_ids_without(const Cluster& c, int device_id);

}  // namespace harp::cluster
