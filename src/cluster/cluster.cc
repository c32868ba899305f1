#include "harp/cluster/cluster.h"

#include <algorithm>

#include "harp/cluster/cluster_io.h"
#include "harp/common/check.h"
#include "harp/common/hash.h"

namespace harp::cluster {

int Cluster::num_devices() const {
  int n = 0;
  for (const auto& s : subclusters) n += s.num_devices();
  return n;
}

int Cluster::first_device_id(int subcluster_index) const {
  HARP_CHECK_GE(subcluster_index, 0);
  HARP_CHECK_LE(subcluster_index, static_cast<int>(subclusters.size()));
  int id = 0;
  for (int i = 0; i < subcluster_index; ++i) id += subclusters[i].num_devices();
  return id;
}

const DeviceType& Cluster::device_of(int subcluster_index) const {
  const auto& name = subclusters.at(subcluster_index).device;
  auto it = devices.find(name);
  HARP_CHECK(it != devices.end()) << "device " << name << " missing from a validated cluster";
  return it->second;
}

std::optional<Link> Cluster::link_between(int a, int b) const {
  const auto& na = subclusters.at(a).name;
  const auto& nb = subclusters.at(b).name;
  for (const auto& l : links)
    if ((l.a == na && l.b == nb) || (l.a == nb && l.b == na)) return l.link;
  return std::nullopt;
}

Link Cluster::link_for(int subcluster_a, int node_a, int subcluster_b, int node_b) const {
  if (subcluster_a == subcluster_b) {
    const auto& s = subclusters.at(subcluster_a);
    return node_a == node_b ? s.intra_node : s.inter_node;
  }
  auto link = link_between(subcluster_a, subcluster_b);
  HARP_CHECK(link.has_value()) << "no link between subclusters " << subcluster_a << " and "
                               << subcluster_b;
  return *link;
}

Link Cluster::path_link(int a, int b, std::string* path) const {
  if (a > b) std::swap(a, b);
  if (path != nullptr) *path = subclusters.at(a).name;
  if (auto direct = link_between(a, b)) {
    if (path != nullptr) *path += "-" + subclusters.at(b).name;
    return *direct;
  }
  Link l;
  for (int s = a; s < b; ++s) {
    const Link hop = link_for(s, 0, s + 1, 0);
    l.bandwidth_gbps = s == a ? hop.bandwidth_gbps : std::min(l.bandwidth_gbps, hop.bandwidth_gbps);
    l.latency_s += hop.latency_s;
    if (path != nullptr) *path += "-" + subclusters.at(s + 1).name;
  }
  return l;
}

std::string Cluster::fingerprint() const { return hex_fingerprint(cluster_to_json(*this).dump()); }

}  // namespace harp::cluster
