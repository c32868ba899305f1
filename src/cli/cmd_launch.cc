// `harp launch --nproc N [--emulate] [--grace-s S] -- COMMAND ARGS...`: the local
// launcher (harp/launch/launcher.h). The exit code is the first failed worker's, so
// scripts see the same code as from torchrun; the summary goes to stderr.
#include <thread>

#include "commands.h"
#include "harp/launch/launcher.h"

namespace harp::cli {
namespace {

struct Opts {
  int nproc = 1;
  bool emulate = false;
  double grace_s = 5.0;
  std::vector<std::string> command;
};

int run_launch(const Opts& o, Context& ctx) {
  launch::LaunchOptions options;
  options.nproc = o.nproc;
  options.command = o.command;
  options.grace_s = o.grace_s;
  // The trainer reads HARP_EMULATE to apply the plan's emulated slowdowns; an explicit
  // flag keeps them from ever being applied silently.
  if (o.emulate) options.env["HARP_EMULATE"] = "1";
  // More busy ranks than cores: they take turns, and every measured time (and so every
  // comparison with a prediction) is inflated by it.
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores > 0 && static_cast<unsigned>(o.nproc) > cores)
    ctx.err << "harp launch: note: " << o.nproc << " ranks share " << cores
            << " cores; measured times include their competition for the cores\n";
  auto result = launch::launch(options, ctx.out);
  if (!result.ok()) return ctx.fail("launch", result.status());
  ctx.err << "harp launch: " << result->summary << "\n";
  ctx.rc = result->exit_code;
  return ctx.rc;
}

}  // namespace

void add_launch_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand("launch", "Run N local worker processes with the torchrun variables");
  auto o = std::make_shared<Opts>();
  cmd->add_option("--nproc", o->nproc, "Number of worker processes (ranks)")
      ->required()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--emulate", o->emulate, "Set HARP_EMULATE=1: apply the plan's emulated device slowdowns");
  cmd->add_option("--grace-s", o->grace_s, "Seconds between SIGTERM and SIGKILL when a worker fails")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  // A positional vector: after `--` CLI11 hands it every word, flags included.
  cmd->add_option("command", o->command, "Worker command and its arguments, after `--`")->required();
  cmd->callback([o, &ctx] { ctx.rc = run_launch(*o, ctx); });
}

}  // namespace harp::cli
