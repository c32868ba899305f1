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

int Cluster::num_nodes() const {
  int n = 0;
  for (const auto& s : subclusters) n += s.nodes;
  return n;
}

int Cluster::node_of_device(int device_id) const {
  HARP_CHECK(device_id >= 0 && device_id < num_devices()) << "device " << device_id;
  int first = 0, nodes = 0;
  for (const auto& s : subclusters) {
    if (device_id < first + s.num_devices()) return nodes + (device_id - first) / s.devices_per_node;
    first += s.num_devices();
    nodes += s.nodes;
  }
  return nodes - 1;  // unreachable for a valid id
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

std::vector<int> device_ids_without(const Cluster& c, int device_id) {
  HARP_CHECK(device_id >= 0 && device_id < c.num_devices()) << "device " << device_id;
  std::vector<int> ids(static_cast<size_t>(c.num_devices()), -1);
  int first = 0, next = 0;
  for (const Subcluster& s : c.subclusters) {
    const int n = s.num_devices(), dpn = s.devices_per_node;
    if (device_id < first || device_id >= first + n || dpn == 1) {
      for (int x = first; x < first + n; ++x)
        if (x != device_id) ids[x] = next++;
    } else {  // the other nodes in order, then the degraded node (without_device)
      const int lost_node = (device_id - first) / dpn;
      for (int node = 0; node < s.nodes; ++node)
        if (node != lost_node)
          for (int k = 0; k < dpn; ++k) ids[first + node * dpn + k] = next++;
      for (int k = 0; k < dpn; ++k)
        if (first + lost_node * dpn + k != device_id) ids[first + lost_node * dpn + k] = next++;
    }
    first += n;
  }
  return ids;
}

Cluster without_device(const Cluster& c, int device_id) {
  HARP_CHECK(device_id >= 0 && device_id < c.num_devices()) << "device " << device_id;
  Cluster out = c;
  out.subclusters.clear();
  out.links.clear();
  int first = 0;
  std::string gone, degraded, split;  // the removed subcluster; the new one and its origin
  for (const Subcluster& s : c.subclusters) {
    if (device_id < first || device_id >= first + s.num_devices()) {
      out.subclusters.push_back(s);
    } else if (s.devices_per_node == 1) {
      Subcluster rest = s;
      rest.nodes -= 1;
      if (rest.nodes > 0) out.subclusters.push_back(rest);
      else gone = s.name;
    } else {
      Subcluster rest = s, node = s;
      rest.nodes -= 1;
      node.nodes = 1;
      node.devices_per_node -= 1;
      node.name = s.name + "-degraded";
      if (rest.nodes > 0) {
        out.subclusters.push_back(rest);
        split = s.name;
      }
      out.subclusters.push_back(node);
      degraded = node.name;
      if (rest.nodes == 0) split = "", gone = "";  // the node took the whole subcluster
    }
    first += s.num_devices();
  }
  for (const SubclusterLink& l : c.links) {
    if (l.a == gone || l.b == gone) continue;
    out.links.push_back(l);
    // The degraded node keeps the original's links (or replaces it when it was all).
    if (!degraded.empty()) {
      const std::string origin = degraded.substr(0, degraded.size() - std::string("-degraded").size());
      SubclusterLink copy = l;
      if (copy.a == origin) copy.a = degraded;
      if (copy.b == origin) copy.b = degraded;
      if (copy.a != l.a || copy.b != l.b) {
        if (split.empty()) out.links.back() = copy;
        else out.links.push_back(copy);
      }
    }
  }
  if (!split.empty()) {
    const Subcluster& s = *std::find_if(c.subclusters.begin(), c.subclusters.end(),
                                        [&](const Subcluster& x) { return x.name == split; });
    out.links.push_back({split, degraded, s.inter_node});
  }
  // A subcluster gone from the middle of the chain: its neighbours meet through the path
  // the traffic took (unless they were linked anyway).
  const int n = static_cast<int>(c.subclusters.size());
  for (int i = 1; i + 1 < n; ++i)
    if (c.subclusters[i].name == gone && !c.link_between(i - 1, i + 1))
      out.links.push_back({c.subclusters[i - 1].name, c.subclusters[i + 1].name, c.path_link(i - 1, i + 1)});
  // A device type no subcluster uses any more stays listed: harmless to the planner.
  return out;
}

}  // namespace harp::cluster
