// Elastic training across machines: devices per machine, and the report exchange.
#include "harp/launch/elastic_nodes.h"

#include <algorithm>
#include <filesystem>

#include "harp/common/document.h"
#include "harp/common/fields.h"

namespace harp::launch {

StatusOr<MachineDevices> MachineDevices::split(const cluster::Cluster& c, int machines) {
  const int D = c.num_devices();
  MachineDevices out;
  out.devices_.resize(static_cast<size_t>(std::max(machines, 0)));
  if (machines >= 1 && machines == c.num_nodes()) {  // the cluster file's machines, of any sizes
    for (int d = 0; d < D; ++d) out.devices_[static_cast<size_t>(c.node_of_device(d))].push_back(d);
    return out;
  }
  if (machines < 1 || D % machines != 0)
    return invalid_argument("--nnodes " + std::to_string(machines) + ": the cluster has " +
                            std::to_string(c.num_nodes()) + " nodes (machines) and " + std::to_string(D) +
                            " devices; give --nnodes " + std::to_string(c.num_nodes()) +
                            " (one launcher per node of the cluster file, in its order), or a number of machines "
                            "that share the devices equally");
  for (int d = 0; d < D; ++d) out.devices_[static_cast<size_t>(d / (D / machines))].push_back(d);
  return out;
}

bool MachineDevices::hosts(int machine, int device) const {
  const auto& mine = of(machine);
  return std::find(mine.begin(), mine.end(), device) != mine.end();
}

void MachineDevices::remove(const cluster::Cluster& before, int d) {
  const std::vector<int> ids = cluster::device_ids_without(before, d);
  for (auto& devices : devices_) {
    std::vector<int> kept;
    for (int x : devices)
      if (ids[static_cast<size_t>(x)] >= 0) kept.push_back(ids[static_cast<size_t>(x)]);
    devices = kept;
  }
}

StatusOr<std::vector<MachineReport>> exchange_reports(const std::string& dir, int attempt, int node_rank,
                                                      const std::vector<bool>& waited, const MachineReport& mine,
                                                      double wait_s, double started_unix, Clock& clock) {
  const std::string folder = dir + "/attempt_" + std::to_string(attempt);
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) return io_error(folder + ": cannot create the folder: " + ec.message());
  auto file_of = [&](int r) { return folder + "/node_" + std::to_string(r) + ".json"; };
  const Json report = {{"lost", mine.lost}, {"exit_code", mine.exit_code}, {"written_unix", clock.unix_s()}};
  HARP_RETURN_IF_ERROR(write_text_file_atomic(file_of(node_rank), report.dump() + "\n"));
  const int nnodes = static_cast<int>(waited.size());
  std::vector<MachineReport> out(waited.size());
  const double deadline = clock.now_s() + wait_s;
  for (;;) {
    bool all = true;
    for (int r = 0; r < nnodes; ++r) {
      MachineReport& m = out[static_cast<size_t>(r)];
      if (!m.heard && waited[static_cast<size_t>(r)]) {
        auto doc = load_document(file_of(r));
        if (doc.ok() && doc->is_object() && doc->value("written_unix", 0.0) >= started_unix &&
            doc->contains("lost") && (*doc)["lost"].is_array()) {
          m.heard = true;
          for (const Json& d : (*doc)["lost"])
            if (const auto n = whole_number_in(d, 0, 1 << 26)) m.lost.push_back(static_cast<int>(*n));
          m.exit_code = doc->value("exit_code", 0);
        }
      }
      all = all && (m.heard || !waited[static_cast<size_t>(r)]);
    }
    if (all || clock.now_s() >= deadline) return out;
    clock.sleep_s(0.02);
  }
}

}  // namespace harp::launch
