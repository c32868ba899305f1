// Runs the `harp` command line in process (harp::cli::run) and captures what it prints.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "commands.h"

namespace harp::testing {

struct CliResult {
  int rc;
  std::string out, err;
};

// `args` without the program name.
inline CliResult run_harp(std::vector<std::string> args) {
  args.insert(args.begin(), "harp");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  int rc = cli::run(static_cast<int>(argv.size()), argv.data(), out, err);
  return {rc, out.str(), err.str()};
}

}  // namespace harp::testing
