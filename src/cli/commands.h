// The `harp` command line: one file per subcommand (cmd_*.cc), each registering itself
// on the root CLI11 app. Exit codes (docs/errors.md): 0 ok, 1 bad input file or I/O,
// 2 bad command line, 3 infeasible problem.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harp/common/exit_code.h"
#include "harp/common/status.h"
#include "harp/model/model_spec.h"
#include "harp/plan/plan.h"

namespace harp::cli {

// The exit codes (common/exit_code.h), also by their command-line names.
using harp::kExitCheck;
using harp::kExitInfeasible;
using harp::kExitInput;
using harp::kExitOk;
using harp::kExitUsage;


struct Context {
  std::ostream& out;
  std::ostream& err;
  int rc = kExitOk;

  // Prints "harp <cmd>: <message>" to err and returns the exit code for the status.
  int fail(const char* command, const Status& status);
  // An exception out of a library (libtorch's carry a stack trace): its first line, and
  // exit 1; an allocation failure is named as one, with the limits to check.
  int fail(const char* command, const std::exception& e);
};

// Runs `harp` with the given arguments; returns the exit code. Never exits.
int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

// Every accepted flag as "harp <sub> [<sub>] <name>", for the frozen-surface test.
std::vector<std::string> accepted_flags();

void add_cluster_command(CLI::App& root, Context& ctx);
void add_model_command(CLI::App& root, Context& ctx);
void add_schedule_command(CLI::App& root, Context& ctx);
void add_simulate_command(CLI::App& root, Context& ctx);
void add_plan_command(CLI::App& root, Context& ctx);
void add_launch_command(CLI::App& root, Context& ctx);
void add_data_command(CLI::App& root, Context& ctx);
void add_trace_command(CLI::App& root, Context& ctx);
void add_profile_command(CLI::App& root, Context& ctx);
void add_testbed_command(CLI::App& root, Context& ctx);
// The model a plan was made for: its model_config, unless `model` (a preset or file)
// names another; granularity: `granularity` if > 0, else the plan's, else the model's.
// An error with an empty message when the plan names no model and `model` is empty.
StatusOr<model::ModelSpec> plan_model(const plan::Plan& p, const std::string& plan_file, const std::string& model,
                                      int granularity);

// Commands that need libtorch live in the `harp-train` executable (train_main.cc), which
// registers them before run(); `harp` itself never loads libtorch and hands `harp train`
// over to `harp-train` (main.cc). Without a registered `train`, run() lists a stand-in
// that says how to get one.
// The `harp-train` beside this executable (from /proc/self/exe).
std::string harp_train_path();
using AddCommand = void (*)(CLI::App& root, Context& ctx);
void register_command(const char* name, AddCommand add);
// What `--version` prints after its "harp <version>" line: harp-train sets the libtorch,
// CUDA, cuDNN and NCCL versions it was built with (runtime/build_info.h).
void set_version_details(std::string (*details)());

// In harp_train_cli (links the runtime; only when built with libtorch).
void add_train_command(CLI::App& root, Context& ctx);
// In harp_train_cli: `harp export --checkpoint DIR --plan PLAN -o OUT` (cmd_export.cc).
void add_export_command(CLI::App& root, Context& ctx);
// In harp_train_cli: the model half of `harp generate` (cmd_generate_tokens.cc).
void add_generate_tokens_command(CLI::App& root, Context& ctx);
// `harp generate` (cmd_generate.cc): tokenizes, runs harp-train generate-tokens, decodes.
void add_generate_command(CLI::App& root, Context& ctx);
// In harp_train_cli: installs the measuring half of `harp profile` (cmd_profile.h).
void add_profiler_commands(CLI::App& root, Context& ctx);

}  // namespace harp::cli
