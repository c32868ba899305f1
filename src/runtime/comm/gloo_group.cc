// A Gloo process group (gloo_group.h says why this is the only file that includes
// ProcessGroupGloo.hpp, and what of Gloo it may touch).
#include "gloo_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace harp::runtime {

c10::intrusive_ptr<c10d::Backend> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                  const std::string& name, int rank, int size,
                                                  std::chrono::milliseconds timeout, const launch::WorkerEnv& env) {
  using Gloo = c10d::ProcessGroupGloo;
  auto options = Gloo::Options::create(timeout);
  const std::string& addr = env.master_addr;
  if (!env.gloo_addr.empty())  // harp launch --testbed: this host's address
    options->devices.push_back(Gloo::createDeviceForHostname(env.gloo_addr));
  else if (addr == "127.0.0.1" || addr == "localhost")
    options->devices.push_back(Gloo::createDeviceForHostname("127.0.0.1"));
  else if (!env.gloo_ifname.empty())
    options->devices.push_back(Gloo::createDeviceForInterface(env.gloo_ifname));
  else
    options->devices.push_back(Gloo::createDefaultDevice());
  options->threads = 2;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name, store);
  return c10::make_intrusive<Gloo>(prefixed, rank, size, options);
}

}  // namespace harp::runtime
