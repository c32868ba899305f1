// `harp-train`: the `harp` command line plus the commands that link libtorch. `harp train`
// execs it (main.cc); it can also be run directly (`harp-train train --plan ...`).
#include <iostream>

#include "commands.h"
#include "harp/runtime/build_info.h"

int main(int argc, char** argv) {
  harp::cli::set_version_details(harp::runtime::build_info);
  harp::cli::register_command("train", harp::cli::add_train_command);
  harp::cli::register_command("profile", harp::cli::add_profiler_commands);
  harp::cli::register_command("export", harp::cli::add_export_command);
  harp::cli::register_command("generate-tokens", harp::cli::add_generate_tokens_command);
  return harp::cli::run(argc, argv, std::cout, std::cerr);
}
