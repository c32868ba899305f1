// SLURM's variables for `harp launch --slurm` (slurm.h).
#include "harp/launch/slurm.h"

#include "harp/common/parse.h"

namespace harp::launch {

std::string first_slurm_host(const std::string& nodelist) {
  std::string out;
  size_t i = 0;
  while (i < nodelist.size() && nodelist[i] != ',') {
    if (nodelist[i] != '[') {
      out += nodelist[i++];
      continue;
    }
    const size_t close = nodelist.find(']', i);
    if (close == std::string::npos) return "";
    // The group's first item: up to its first ',' or '-' ("07-09,12" -> "07").
    const std::string group = nodelist.substr(i + 1, close - i - 1);
    const std::string first = group.substr(0, group.find_first_of(",-"));
    if (first.empty() || first.find_first_not_of("0123456789") != std::string::npos) return "";
    out += first;
    i = close + 1;
  }
  return out;
}

StatusOr<SlurmNode> slurm_node(const std::function<const char*(const char*)>& lookup) {
  auto value = [&](std::initializer_list<const char*> names, std::string* which) -> std::string {
    for (const char* n : names) {
      const char* v = lookup(n);
      if (v != nullptr && *v != '\0') {
        *which = n;
        return v;
      }
    }
    *which = *names.begin();
    return "";
  };
  const std::string fix =
      "; fix: run one launcher per node inside an allocation, `srun --ntasks-per-node=1 harp launch --slurm ...`, or "
      "give --nnodes, --node-rank and --master-addr instead of --slurm";
  SlurmNode out;
  std::string name;
  auto number = [&](std::initializer_list<const char*> names, int lo, int* dst, bool required) -> Status {
    const std::string v = value(names, &name);
    if (v.empty()) return required ? invalid_argument("--slurm: " + name + " is not set" + fix) : Status();
    auto n = parse_integer(v, lo, 1 << 20);
    if (!n.ok()) return invalid_argument("--slurm: " + name + " = '" + v.substr(0, 40) + "': " + n.status().message() + fix);
    *dst = static_cast<int>(*n);
    return Status();
  };
  HARP_RETURN_IF_ERROR(number({"SLURM_NNODES", "SLURM_JOB_NUM_NODES"}, 1, &out.nnodes, true));
  HARP_RETURN_IF_ERROR(number({"SLURM_NODEID"}, 0, &out.node_rank, true));
  HARP_RETURN_IF_ERROR(number({"SLURM_GPUS_ON_NODE"}, 0, &out.gpus_on_node, false));
  if (out.node_rank >= out.nnodes)
    return invalid_argument("--slurm: SLURM_NODEID = " + std::to_string(out.node_rank) + " with " +
                            std::to_string(out.nnodes) + " nodes: a node's id is 0.." + std::to_string(out.nnodes - 1) +
                            fix);
  const std::string list = value({"SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &name);
  if (list.empty()) return invalid_argument("--slurm: " + name + " is not set" + fix);
  out.master_addr = first_slurm_host(list);
  if (out.master_addr.empty())
    return invalid_argument("--slurm: " + name + " = '" + list.substr(0, 80) +
                            "': not a host list harp reads (e.g. gpu[01-04],cpu7); give --master-addr");
  return out;
}

}  // namespace harp::launch
