// The launcher-worker environment (see worker_env.h): the one place its names live.
#include "harp/launch/worker_env.h"

#include <cstdlib>
#include <cstring>
#include <limits>

#include <sys/stat.h>

#include "harp/common/document.h"
#include "harp/common/parse.h"

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

std::string rendezvous_secret_from_env() {
  const char* v = std::getenv(kSecret);
  return v == nullptr ? std::string() : std::string(v);
}

bool is_loopback_address(const std::string& addr) {
  return addr == "127.0.0.1" || addr == "localhost" || addr == "::1";
}

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
  vars["GROUP_WORLD_SIZE"] = std::to_string(group_world_size);
  vars["MASTER_ADDR"] = master_addr;
  vars["MASTER_PORT"] = master_port;
  return vars;
}

StatusOr<WorkerEnv> WorkerEnv::from(const std::function<const char*(const char*)>& lookup) {
  WorkerEnv e;
  Status error;
  auto text = [&](const char* name, std::string* out) {
    const char* v = lookup(name);
    if (v != nullptr && *v != '\0') *out = v;
  };
  auto number = [&](const char* name, auto* out, std::int64_t lo, std::int64_t hi) {
    const char* v = lookup(name);
    if (v == nullptr || *v == '\0' || !error.ok()) return;
    auto n = parse_integer(v, lo, hi);
    if (!n.ok()) {
      const std::string value(v, strnlen(v, 40));
      error = invalid_argument("the environment variable " + std::string(name) + " = '" + value +
                               (std::strlen(v) > 40 ? "...'" : "'") + ": " + n.status().message() +
                               "; fix: set it as a launcher does (harp launch, torchrun), or unset it");
      return;
    }
    *out = static_cast<std::remove_pointer_t<decltype(out)>>(*n);
  };
  constexpr std::int64_t kMaxRanks = 1 << 26;
  number("RANK", &e.rank, 0, kMaxRanks - 1);
  number("WORLD_SIZE", &e.world_size, 1, kMaxRanks);
  number("LOCAL_RANK", &e.local_rank, 0, kMaxRanks - 1);
  number("LOCAL_WORLD_SIZE", &e.local_world_size, 1, kMaxRanks);
  number("GROUP_RANK", &e.group_rank, 0, kMaxRanks - 1);
  number("GROUP_WORLD_SIZE", &e.group_world_size, 1, kMaxRanks);
  text("MASTER_ADDR", &e.master_addr);
  text("MASTER_PORT", &e.master_port);
  int port = 0;  // kept as text (the store takes it so), but checked here
  number("MASTER_PORT", &port, 1, 65535);
  number("TORCHELASTIC_RESTART_COUNT", &e.restart_count, 0, 1 << 20);
  const char* agent = lookup("TORCHELASTIC_USE_AGENT_STORE");
  e.agent_store = agent != nullptr && std::strcmp(agent, "True") == 0;
  text("GLOO_SOCKET_IFNAME", &e.gloo_ifname);
  text(kStoreFile, &e.store_file);
  text(kStoreServer, &e.store_server);
  number(kClockOrigin, &e.clock_origin_ns, 1, std::numeric_limits<std::int64_t>::max() / 2);
  int emulate = 0;
  number(kEmulate, &emulate, 0, 1);
  e.emulate = emulate != 0;
  text(kTestbed, &e.testbed);
  text(kGlooAddr, &e.gloo_addr);
  text(kSecret, &e.rendezvous_secret);
  if (!error.ok()) return error;
  // The rendezvous file: created by the first rank, so it may be absent, but never a
  // folder or a special file (the store would throw from its own thread).
  struct stat st {};
  if (!e.store_file.empty() && ::stat(e.store_file.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    return invalid_argument("the environment variable " + std::string(kStoreFile) + " = " +
                            shown_path(e.store_file) +
                            " is not a regular file (a folder?); fix: name a file in a private folder, as harp "
                            "launch does, or unset it");
  auto pair = [](const char* a, int av, const char* b, int bv) {
    return invalid_argument("the environment variable " + std::string(a) + " = " + std::to_string(av) +
                            " is not below " + b + " = " + std::to_string(bv) + "; fix: ranks are 0.." + b +
                            " - 1, set both as a launcher does (harp launch, torchrun)");
  };
  if (e.rank >= e.world_size) return pair("RANK", e.rank, "WORLD_SIZE", e.world_size);
  if (e.local_rank >= e.local_world_size) return pair("LOCAL_RANK", e.local_rank, "LOCAL_WORLD_SIZE", e.local_world_size);
  return e;
}

StatusOr<WorkerEnv> WorkerEnv::from_env() {
  return from([](const char* name) -> const char* { return std::getenv(name); });
}

std::string testbed_slowdown_dir(const std::string& prefix) { return "/tmp/harp-testbed-" + prefix; }

std::string testbed_slowdown_file(const std::string& prefix, const std::string& subcluster) {
  return testbed_slowdown_dir(prefix) + "/slowdown-" + subcluster;
}

}  // namespace harp::launch
