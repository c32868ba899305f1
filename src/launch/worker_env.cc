// The launcher-worker environment (see worker_env.h): the one place its names live.
#include "harp/launch/worker_env.h"

#include <cstdlib>
#include <cstring>

namespace harp::launch {
namespace {

constexpr const char* kStoreFile = "HARP_STORE_FILE";
constexpr const char* kStoreServer = "HARP_STORE_SERVER";
constexpr const char* kClockOrigin = "HARP_CLOCK_ORIGIN_NS";
constexpr const char* kEmulate = "HARP_EMULATE";
constexpr const char* kTestbed = "HARP_TESTBED";
constexpr const char* kGlooAddr = "HARP_GLOO_ADDR";
constexpr const char* kSecret = "HARP_RENDEZVOUS_SECRET";

}  // namespace

std::map<std::string, std::string> WorkerEnv::harp_env() const {
  std::map<std::string, std::string> vars;
  if (!store_file.empty()) vars[kStoreFile] = store_file;
  if (!store_server.empty()) vars[kStoreServer] = store_server;
  if (clock_origin_ns > 0) vars[kClockOrigin] = std::to_string(clock_origin_ns);
  if (emulate) vars[kEmulate] = "1";
  if (!testbed.empty()) vars[kTestbed] = testbed;
  if (!gloo_addr.empty()) vars[kGlooAddr] = gloo_addr;
  if (!rendezvous_secret.empty()) vars[kSecret] = rendezvous_secret;
  return vars;
}

std::map<std::string, std::string> WorkerEnv::to_env() const {
  std::map<std::string, std::string> vars = harp_env();
  vars["RANK"] = std::to_string(rank);
  vars["WORLD_SIZE"] = std::to_string(world_size);
  vars["LOCAL_RANK"] = std::to_string(local_rank);
  vars["LOCAL_WORLD_SIZE"] = std::to_string(local_world_size);
  vars["GROUP_RANK"] = std::to_string(group_rank);
  vars["MASTER_ADDR"] = master_addr;
  vars["MASTER_PORT"] = master_port;
  return vars;
}

WorkerEnv WorkerEnv::from(const std::function<const char*(const char*)>& lookup) {
  WorkerEnv e;
  auto text = [&](const char* name, std::string* out) {
    const char* v = lookup(name);
    if (v != nullptr && *v != '\0') *out = v;
  };
  auto number = [&](const char* name, auto* out) {
    const char* v = lookup(name);
    if (v != nullptr && *v != '\0') *out = static_cast<std::remove_pointer_t<decltype(out)>>(std::atoll(v));
  };
  number("RANK", &e.rank);
  number("WORLD_SIZE", &e.world_size);
  number("LOCAL_RANK", &e.local_rank);
  number("LOCAL_WORLD_SIZE", &e.local_world_size);
  number("GROUP_RANK", &e.group_rank);
  text("MASTER_ADDR", &e.master_addr);
  text("MASTER_PORT", &e.master_port);
  number("TORCHELASTIC_RESTART_COUNT", &e.restart_count);
  const char* agent = lookup("TORCHELASTIC_USE_AGENT_STORE");
  e.agent_store = agent != nullptr && std::strcmp(agent, "True") == 0;
  text("GLOO_SOCKET_IFNAME", &e.gloo_ifname);
  text(kStoreFile, &e.store_file);
  text(kStoreServer, &e.store_server);
  // A clock origin that is not a positive whole number is ignored (each rank's own clock).
  if (const char* v = lookup(kClockOrigin); v != nullptr) {
    char* end = nullptr;
    const long long ns = std::strtoll(v, &end, 10);
    if (end != v && *end == '\0' && ns > 0) e.clock_origin_ns = ns;
  }
  int emulate = 0;
  number(kEmulate, &emulate);
  e.emulate = emulate != 0;
  text(kTestbed, &e.testbed);
  text(kGlooAddr, &e.gloo_addr);
  text(kSecret, &e.rendezvous_secret);
  return e;
}

WorkerEnv WorkerEnv::from_env() {
  return from([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace harp::launch
