// The rendezvous of a run's ranks (see rendezvous.h).
#include "harp/runtime/comm/rendezvous.h"

#include <string>

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

}  // namespace

c10::intrusive_ptr<c10d::Store> rendezvous_store(const launch::WorkerEnv& env, std::chrono::milliseconds timeout) {
  const int rank = env.rank, world_size = env.world_size;
  const std::string attempt = std::to_string(env.restart_count);
  const std::string& file = env.store_file;
  if (!file.empty()) {
    // One machine (harp launch): the store is a file in the launch's private folder,
    // so the rendezvous listens on no socket at all.
    auto store = c10::make_intrusive<c10d::FileStore>(file, world_size);
    store->setTimeout(timeout);
    return c10::make_intrusive<c10d::PrefixStore>("harp" + attempt, store);
  }
  const std::string& addr = env.master_addr;
  // Across machines the TCPStore answers anyone who reaches the port: the keys live
  // under a prefix derived from a secret every rank shares, so a stranger who connects
  // can neither read nor overwrite them without it (docs/runtime.md).
  const bool loopback = addr == "127.0.0.1" || addr == "localhost" || addr == "::1";
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
  try {
    auto store = c10::make_intrusive<c10d::TCPStore>(addr, o);
    return c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  } catch (const std::exception& e) {
    // c10d's message carries a C++ stack trace: keep its first line.
    std::string msg = e.what();
    msg = msg.substr(0, msg.find('\n'));
    throw RuntimeFailure("rendezvous at MASTER_ADDR:MASTER_PORT = " + addr + ":" + std::to_string(o.port) +
                         (o.isServer ? " (this rank hosts it)" : "") + " failed: " + msg +
                         (o.isServer ? "; is the port in use? pick a free MASTER_PORT" : "; is rank 0 running?"));
  }
}

c10::intrusive_ptr<c10d::Store> hash_store() { return c10::make_intrusive<c10d::HashStore>(); }

}  // namespace harp::runtime
