// `harp` entry point: everything happens in harp::cli::run so tests can drive it. The
// commands that need libtorch (`train`, `export`, measuring `profile`) are handed over to the `harp-train` executable
// next to this one, so planning, simulation and the rest never load libtorch.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>

#include "commands.h"
#include "harp/common/memory_limit.h"
#include "harp/data/sentencepiece.h"

int main(int argc, char** argv) {
  harp::data::enable_sentencepiece();  // for `harp data prepare` (never in harp-train)
  // `harp profile` measures with libtorch, except its torch-free merge and import.
  const bool torch_command =
      argc >= 2 && (std::string(argv[1]) == "train" || std::string(argv[1]) == "export" ||
                    (std::string(argv[1]) == "profile" &&
                     !(argc >= 3 && (std::string(argv[2]) == "merge" || std::string(argv[2]) == "import"))));
  // `harp generate` runs harp-train as its child: the same limit applies to it.
  const bool generate = argc >= 2 && std::string(argv[1]) == "generate";
  if (torch_command || generate) {
    // harp-train maps PyTorch's libraries before any work: PyPI's CUDA libtorch takes
    // about 3 GiB of address space (not memory; measured: harp-train --version fails
    // under `ulimit -v` of 2.5 GiB and starts under 3 GiB). Under a lower limit the loader
    // would fail with its own message, so the limit is named here instead.
    constexpr double kTrainAddressSpace = 4.0 * (1 << 30);
    if (const double limit = harp::address_space_limit(); limit > 0 && limit < kTrainAddressSpace) {
      std::cerr << "harp " << argv[1] << ": the address-space limit (ulimit -v) is " << limit / (1 << 30)
                << " GiB; harp-train maps PyTorch's libraries (about 3 GiB of address space, not memory) before "
                   "any work and cannot start under 4 GiB; remove it (ulimit -v unlimited) and bound memory with a "
                   "cgroup (memory.max) instead, which HARP's memory checks read\n";
      return harp::cli::kExitInfeasible;
    }
  }
  if (torch_command) {
    const std::string target = harp::cli::harp_train_path();
    if (access(target.c_str(), X_OK) == 0) {
      argv[0] = const_cast<char*>(target.c_str());
      execv(target.c_str(), argv);
      std::cerr << "harp " << argv[1] << ": cannot start " << target << ": " << std::strerror(errno) << "\n";
      return harp::cli::kExitInput;
    }
    // No harp-train beside us: run() explains (a build without libtorch).
  }
  return harp::cli::run(argc, argv, std::cout, std::cerr);
}
