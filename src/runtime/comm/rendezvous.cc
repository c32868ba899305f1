// The rendezvous of a run's ranks (see rendezvous.h).
#include "harp/runtime/comm/rendezvous.h"

#include <unistd.h>

#include <filesystem>

#include <chrono>
#include <string>
#include <thread>

#include <c10/util/Logging.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "harp/common/sha256.h"
#include "harp/runtime/comm/transport.h"

namespace harp::runtime {

namespace {

// MASTER_PORT as a port number: digits only, 1..65535.
std::uint16_t master_port(const std::string& text) {
  int port = 0;
  bool digits = !text.empty() && text.size() <= 5;
  for (char ch : text) digits = digits && ch >= '0' && ch <= '9';
  if (digits) port = std::stoi(text);
  if (!digits || port < 1 || port > 65535)
    throw RuntimeFailure("MASTER_PORT = " + text.substr(0, 40) +
                         ": must be a port number 1..65535; set it as torchrun does, or use harp launch");
  return static_cast<std::uint16_t>(port);
}

// Every rank signs in under its number and waits for the others, so that a rank that
// never starts is named here rather than surfacing as a socket timeout inside Gloo.
void roll_call(c10d::Store& store, int rank, int world_size, std::chrono::milliseconds timeout) {
  store.set("joined/" + std::to_string(rank), std::vector<std::uint8_t>{1});
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back("joined/" + std::to_string(r));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (store.check(keys)) return;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string missing;
  int count = 0;
  for (int r = 0; r < world_size; ++r)
    if (!store.check({keys[r]}) && count++ < 8) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  throw RuntimeFailure("rank" + std::string(count > 1 ? "s " : " ") + missing + (count > 8 ? ", ..." : "") + " of " +
                       std::to_string(world_size) + " never joined the rendezvous (waited " +
                       std::to_string(timeout.count() / 1000.0).substr(0, 6) +
                       " s); start every rank (harp launch --nproc " + std::to_string(world_size) +
                       " starts them together), or raise --timeout-s");
}

}  // namespace

c10::intrusive_ptr<c10d::Store> rendezvous_store(const launch::WorkerEnv& env, std::chrono::milliseconds timeout) {
  const int rank = env.rank, world_size = env.world_size;
  const std::string attempt = std::to_string(env.restart_count);
  // One rank alone (`harp train` without a launcher): nobody else will join, so the store
  // lives in the process and no port is taken; two such runs at once on one machine both
  // wanted 29500 and the second failed (EADDRINUSE).
  if (world_size == 1 && env.store_file.empty() && !env.agent_store && launch::is_loopback_address(env.master_addr))
    return c10::make_intrusive<c10d::PrefixStore>("harp" + attempt, hash_store());
  const std::string& file = env.store_file;
  if (!file.empty()) {
    // One machine (harp launch): the store is a file in the launch's private folder,
    // so the rendezvous listens on no socket at all.
    // c10d's FileStore retries opening its file until the timeout's end and past it (a
    // missing folder hung a run for 90 s with --timeout-s 5): the folder is checked first.
    const std::filesystem::path folder = std::filesystem::path(file).parent_path();
    std::error_code ec;
    if (!std::filesystem::is_directory(folder.empty() ? "." : folder, ec) ||
        ::access((folder.empty() ? std::string(".") : folder.string()).c_str(), W_OK | X_OK) != 0)
      throw RuntimeFailure("HARP_STORE_FILE = " + file.substr(0, 200) +
                           ": its folder does not exist or is not "
                           "writable; name a file in a writable private folder (harp launch sets it)");
    c10::intrusive_ptr<c10d::FileStore> store;
    try {
      store = c10::make_intrusive<c10d::FileStore>(file, world_size);
    } catch (const std::exception& e) {
      throw RuntimeFailure("the rendezvous file " + file.substr(0, 200) + " cannot be used (" +
                           std::string(e.what()).substr(0, 200) + "); name a file in a writable private folder");
    }
    store->setTimeout(timeout);
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("harp" + attempt, store);
    roll_call(*prefixed, rank, world_size, timeout);
    return prefixed;
  }
  const std::string& addr = env.master_addr;
  // Across machines the TCPStore answers anyone who reaches the port: the keys live
  // under a prefix derived from a secret every rank shares, so a stranger who connects
  // can neither read nor overwrite them without it (docs/runtime.md).
  const bool loopback = launch::is_loopback_address(addr);
  const std::string& secret = env.rendezvous_secret;
  if (!loopback && secret.size() < 16)
    throw RuntimeFailure("MASTER_ADDR = " + addr.substr(0, 80) +
                         " is not this machine: set HARP_RENDEZVOUS_SECRET (16+ characters, the same on every "
                         "rank, e.g. `export HARP_RENDEZVOUS_SECRET=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n')`)");
  const std::string prefix = "harp" + (secret.empty() ? std::string() : "/" + sha256_hex(secret).substr(0, 32)) +
                             "/" + attempt;
  c10d::TCPStoreOptions o;
  o.port = master_port(env.master_port);
  // HARP_STORE_SERVER (harp launch --elastic across machines): which rank hosts it, when
  // the plan's rank 0 is not on the master machine.
  const std::string& server = env.store_server;
  o.isServer = (server.empty() ? rank == 0 : server == "1") && !env.agent_store;
  o.numWorkers = world_size;
  o.waitWorkers = false;
  o.timeout = timeout;
  c10::intrusive_ptr<c10d::Store> prefixed;
  // c10d logs each failed try to connect (warnings and errors with a C++ stack) before it
  // throws; the one line below says what failed and what to do, so its log is quiet here.
  struct QuietC10Log {
    int was = FLAGS_caffe2_log_level;
    QuietC10Log() { FLAGS_caffe2_log_level = 3; }  // fatal only
    ~QuietC10Log() { FLAGS_caffe2_log_level = was; }
  };
  try {
    QuietC10Log quiet;
    auto store = c10::make_intrusive<c10d::TCPStore>(addr, o);
    prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  } catch (const std::exception& e) {
    // c10d's message carries a C++ stack trace: keep its first line.
    std::string msg = e.what();
    msg = msg.substr(0, msg.find('\n'));
    while (!msg.empty() && (msg.back() == '.' || msg.back() == ' ')) msg.pop_back();
    const char* why = o.isServer        ? "; is the port in use? pick a free MASTER_PORT"
                      : env.agent_store ? "; is torchrun's agent running? (TORCHELASTIC_USE_AGENT_STORE=True says it "
                                          "hosts the store; unset it when starting ranks by hand)"
                                        : "; is rank 0 running?";
    throw RuntimeFailure("rendezvous at MASTER_ADDR:MASTER_PORT = " + addr + ":" + std::to_string(o.port) +
                         (o.isServer ? " (this rank hosts it)" : "") + " failed: " + msg + why);
  }
  roll_call(*prefixed, rank, world_size, timeout);
  return prefixed;
}

c10::intrusive_ptr<c10d::Store> hash_store() { return c10::make_intrusive<c10d::HashStore>(); }

}  // namespace harp::runtime
