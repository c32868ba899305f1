// `harp launch --nproc N [--nnodes M --node-rank R --master-addr A --master-port P]
// [--emulate] [--grace-s S] [--testbed CLUSTER [--plan PLAN]] -- COMMAND ARGS...`: the
// launcher (harp/launch/launcher.h), one per machine with --nnodes as torchrun. The exit code is the
// first failed worker's, so scripts see the same code as from torchrun; the summary goes
// to stderr. With --testbed each rank starts inside the namespace of its device's host
// (harp/testbed/testbed.h) and binds Gloo to that host's address, so its messages cross
// the shaped links; the testbed is brought up if it is not, and then taken down at the end.
#include <cstdlib>
#include <optional>
#include <thread>

#include "cmd_launch.h"
#include "commands.h"
#include "harp/cluster/cluster_io.h"
#include "harp/launch/launcher.h"
#include "harp/launch/node_rendezvous.h"
#include "harp/launch/slurm.h"
#include "harp/launch/worker_env.h"
#include "harp/plan/plan_io.h"
#include "harp/testbed/launch_ranks.h"
#include "harp/testbed/testbed.h"
#include "validators.h"

namespace harp::cli {
namespace {

struct Opts {
  int nproc = 0;
  int nnodes = 1, node_rank = 0, master_port = 29500;
  std::string master_addr = "127.0.0.1";
  bool elastic = false;
  bool slurm = false;
  bool master_addr_given = false, nodes_given = false;
  std::string job_file;
  int max_restarts = 3;
  bool emulate = false;
  std::string testbed_file, plan_file, prefix;
  double packet_us = testbed::kDefaultPacketUs;
  double grace_s = 5.0;
  double join_timeout_s = 600;
  double replan_min_gain = -1;  // -1: the job's training.replan_min_gain
  std::vector<std::string> command;
};

// Fills the per-rank namespace and address; `*owned` when this launch brought it up.
Status use_testbed(const Opts& o, launch::LaunchOptions* options, std::string* owned, Context& ctx) {
  HARP_ASSIGN_OR_RETURN(cluster::Cluster c, cluster::load_cluster(o.testbed_file));
  std::optional<plan::Plan> p;
  if (!o.plan_file.empty()) {
    HARP_ASSIGN_OR_RETURN(p, plan::load_plan(o.plan_file));
  }
  HARP_ASSIGN_OR_RETURN(std::vector<int> devices,
                        testbed::rank_devices(c, p ? &*p : nullptr, o.plan_file, o.testbed_file, &options->nproc));
  HARP_ASSIGN_OR_RETURN(testbed::Topology t, testbed::topology_for(c, o.prefix, o.packet_us));
  HARP_ASSIGN_OR_RETURN(testbed::RankPlacement placed, testbed::place_ranks(c, t, devices, options));
  if (!placed.testbed) {
    ctx.err << "harp launch: note: no testbed (" << placed.unavailable << "); the ranks talk over 127.0.0.1, unshaped\n";
    return Status();
  }
  if (placed.brought_up) *owned = t.prefix;
  ctx.err << "harp launch: testbed " << t.prefix << (owned->empty() ? " (already up)" : " (brought up)")
          << ", links shaped as " << o.testbed_file << " says; ranks " << placed.map << "\n";
  return Status();
}

// With --nnodes and --plan: the workers of this node are the plan's devices on it (the
// plan's `nodes`, from its cluster file's nodes in order); --nproc, if given, must agree.
StatusOr<int> plan_workers_on_node(const Opts& o) {
  HARP_ASSIGN_OR_RETURN(plan::Plan p, plan::load_plan(o.plan_file));
  const std::vector<int> counts = p.ranks_per_node();
  if (counts.empty())
    return invalid_argument(o.plan_file +
                            ": the plan does not say which machine each device is on (no `nodes`); "
                            "plan it with `harp plan` and its cluster file, or give --nproc");
  if (static_cast<int>(counts.size()) > o.nnodes)
    return invalid_argument(o.plan_file + ": the plan puts devices on machine " + std::to_string(counts.size() - 1) +
                            ", and --nnodes is " + std::to_string(o.nnodes) + "; launch one node per machine of " +
                            "the cluster file (" + std::to_string(counts.size()) + " or more)");
  const int here = o.node_rank < static_cast<int>(counts.size()) ? counts[static_cast<size_t>(o.node_rank)] : 0;
  if (here == 0)
    return invalid_argument(o.plan_file + ": the plan uses no device of machine " + std::to_string(o.node_rank) +
                            "; leave this node out, and number the others' --node-rank by the cluster file's nodes");
  if (o.nproc != 0 && o.nproc != here)
    return invalid_argument("--nproc " + std::to_string(o.nproc) + ": the plan " + o.plan_file + " runs " +
                            std::to_string(here) + " ranks on machine " + std::to_string(o.node_rank) +
                            "; leave --nproc out or set it to that");
  return here;
}

// --slurm: the machines, this node's rank and node 0's address from srun's variables.
int apply_slurm(Opts* o, Context& ctx) {
  if (o->nodes_given) {
    ctx.err << "harp launch: --slurm reads the node count and rank from SLURM; leave out --nnodes and --node-rank\n";
    return kExitUsage;
  }
  auto node = launch::slurm_node([](const char* name) { return std::getenv(name); });
  if (!node.ok()) {
    ctx.err << "harp launch: " << node.status().message() << "\n";
    return kExitUsage;
  }
  o->nnodes = node->nnodes;
  o->node_rank = node->node_rank;
  if (!o->master_addr_given) o->master_addr = node->master_addr;
  if (o->nproc == 0 && o->plan_file.empty() && !o->elastic) o->nproc = node->gpus_on_node;
  ctx.err << "harp launch: SLURM node " << o->node_rank << " of " << o->nnodes << ", node 0 at " << o->master_addr
          << ":" << o->master_port << "\n";
  return kExitOk;
}

int run_launch(const Opts& o, Context& ctx) {
  if (o.elastic) {
    if (o.job_file.empty() || !o.plan_file.empty() || o.nproc != 0) {
      ctx.err << "harp launch: --elastic takes --job JOB (its cluster, model and planner options) and plans the "
                 "ranks itself; leave out --nproc and --plan\n";
      return kExitUsage;
    }
    if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
      ctx.err << "harp launch: --node-rank " << o.node_rank << " with --nnodes " << o.nnodes
              << ": a node's rank is 0.." << o.nnodes - 1 << "\n";
      return kExitUsage;
    }
    launch::ElasticOptions e;
    e.job_file = o.job_file;
    e.max_restarts = o.max_restarts;
    e.grace_s = o.grace_s;
    e.emulate = o.emulate;
    e.command = o.command;
    e.nnodes = o.nnodes;
    e.node_rank = o.node_rank;
    e.master_addr = o.master_addr;
    e.master_port = o.master_port;
    e.replan_min_gain = o.replan_min_gain;
    if (!o.testbed_file.empty() && o.nnodes > 1) {
      ctx.err << "harp launch: --testbed runs on one machine; leave out --nnodes\n";
      return kExitUsage;
    }
    return run_elastic(e, o.testbed_file, o.prefix, o.packet_us, ctx);
  }
  if (!o.job_file.empty()) {
    ctx.err << "harp launch: --job goes with --elastic\n";
    return kExitUsage;
  }
  launch::LaunchOptions options;
  options.nproc = o.nproc;
  if (o.nnodes > 1) {
    if (!o.testbed_file.empty()) {
      ctx.err << "harp launch: --testbed runs on one machine; leave out --nnodes\n";
      return kExitUsage;
    }
    if (o.node_rank >= o.nnodes) {
      ctx.err << "harp launch: --node-rank " << o.node_rank << " with --nnodes " << o.nnodes
              << ": a node's rank is 0.." << o.nnodes - 1 << "\n";
      return kExitUsage;
    }
    if (!o.plan_file.empty()) {
      auto n = plan_workers_on_node(o);
      if (!n.ok()) return ctx.fail("launch", n.status());
      options.nproc = *n;
    } else if (o.nproc == 0) {
      ctx.err << "harp launch: give --nproc N (this machine's workers), or --plan PLAN to run its devices on this "
                 "node\n";
      return kExitUsage;
    }
    // The machines agree on their workers' ranks, in node-rank order, before any starts.
    launch::NodeMeeting meet;
    meet.master_addr = o.master_addr;
    meet.master_port = o.master_port;
    meet.nnodes = o.nnodes;
    meet.node_rank = o.node_rank;
    meet.nproc = options.nproc;
    meet.secret = launch::rendezvous_secret_from_env();
    meet.timeout_s = o.join_timeout_s;
    meet.progress = [&](const std::string& line) {
      ctx.err << "harp launch: node " << o.node_rank << ": " << line << std::endl;
    };
    auto met = launch::meet_nodes(meet);
    if (!met.ok()) return ctx.fail("launch", met.status());
    for (int i = 0; i < options.nproc; ++i) options.ranks.push_back(met->first_rank + i);
    options.world_size = met->world_size;
    options.nnodes = o.nnodes;
    options.node_rank = o.node_rank;
    options.master_addr = o.master_addr;
    options.master_port = o.master_port;
    ctx.err << "harp launch: node " << o.node_rank << " of " << o.nnodes << " runs ranks " << met->first_rank << ".."
            << met->first_rank + options.nproc - 1 << " of " << met->world_size << " (workers per node: ";
    for (int r = 0; r < o.nnodes; ++r) ctx.err << (r ? " + " : "") << met->nprocs[static_cast<size_t>(r)];
    ctx.err << ")\n";
  }
  std::string owned;  // the testbed prefix to take down at the end
  if (!o.testbed_file.empty()) {
    if (Status s = use_testbed(o, &options, &owned, ctx); !s.ok()) return ctx.fail("launch", s);
  } else if (o.nnodes == 1 && (!o.plan_file.empty() || o.nproc == 0)) {
    ctx.err << "harp launch: give --nproc N (--plan goes with --testbed or --nnodes)\n";
    return kExitUsage;
  }
  options.command = o.command;
  options.grace_s = o.grace_s;
  // The trainer reads HARP_EMULATE to apply the plan's emulated slowdowns; an explicit
  // flag keeps them from ever being applied silently.
  launch::WorkerEnv vars;
  vars.emulate = o.emulate;
  options.env = vars.harp_env();
  // More busy ranks than cores: they take turns, and every measured time (and so every
  // comparison with a prediction) is inflated by it.
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores > 0 && static_cast<unsigned>(options.nproc) > cores)
    ctx.err << "harp launch: note: " << options.nproc << " ranks share " << cores
            << " cores; measured times include their competition for the cores\n";
  auto result = launch::launch(options, ctx.out);
  if (!owned.empty()) {
    auto removed = testbed::down(owned);
    if (!removed.ok()) ctx.err << "harp launch: taking the testbed down: " << removed.status().message() << "\n";
  }
  if (!result.ok()) return ctx.fail("launch", result.status());
  ctx.err << "harp launch: " << result->summary << "\n";
  return ctx.rc = documented_exit(result->exit_code);
}

}  // namespace

int documented_exit(int worker_code) {
  return worker_code >= kExitOk && worker_code <= kExitCheck ? worker_code : kExitInput;
}

void add_launch_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand("launch", "Run N local worker processes with the torchrun variables");
  auto o = std::make_shared<Opts>();
  cmd->add_option("--nproc", o->nproc, "Number of worker processes (ranks); with --plan, the plan's by default")
      ->check(whole(1, 1 << 16));
  cmd->add_option("--testbed", o->testbed_file,
                  "Cluster file: run each rank in its device's namespace of the emulated cluster (harp testbed)");
  cmd->add_option("--plan", o->plan_file,
                  "With --testbed: the plan the ranks run, for their devices; with --nnodes: this node's workers "
                  "are the plan's devices on its machine");
  cmd->add_option("--testbed-prefix", o->prefix, "With --testbed: the testbed's namespace prefix");
  cmd->add_option("--testbed-packet-us", o->packet_us,
                  "With --testbed, where this launch brings it up: the time one packet takes on a shaped link")
      ->capture_default_str()
      ->check(real(10, 100000, false, "us"));
  cmd->add_option("--nnodes", o->nnodes,
                  "Machines (launchers) taking part; each gives its own --nproc, and ranks follow node-rank order")
      ->capture_default_str()
      ->check(whole(1, 65536));
  cmd->add_option("--node-rank", o->node_rank,
                  "This machine's rank, 0..nnodes-1 (its workers: the ranks after those of nodes 0..node_rank-1)")
      ->capture_default_str()
      ->check(whole(0, 65535));
  cmd->add_option("--master-addr", o->master_addr, "Node 0's address: rank 0 hosts the rendezvous store there")
      ->capture_default_str();
  cmd->add_option("--master-port", o->master_port, "The rendezvous port on node 0 (the same on every node)")
      ->capture_default_str()
      ->check(whole(1, 65535));
  cmd->add_option("--join-timeout-s", o->join_timeout_s,
                  "With --nnodes: how long the launchers wait for each other before any worker starts")
      ->capture_default_str()
      ->check(real(1, 86400, false, "s"));
  cmd->add_flag("--slurm", o->slurm,
                "One launcher per node of a SLURM allocation (srun --ntasks-per-node=1): --nnodes, --node-rank and "
                "--master-addr from SLURM_NNODES, SLURM_NODEID and the first host of SLURM_JOB_NODELIST; --nproc "
                "from SLURM_GPUS_ON_NODE when neither it nor --plan is given");
  cmd->add_flag("--elastic", o->elastic,
                "Re-plan over the surviving devices and resume from the last checkpoint when ranks are lost");
  cmd->add_option("--job", o->job_file, "With --elastic: the job (cluster, model, planner options, training)");
  cmd->add_option("--max-restarts", o->max_restarts, "With --elastic: restarts before giving up")
      ->capture_default_str()
      ->check(whole(0, 1000));
  cmd->add_option("--replan-min-gain", o->replan_min_gain,
                  "With --elastic: on a drift, adopt a plan made for the measured costs when it is predicted at "
                  "least this fraction faster, restart counted (0: off; default: the job's training.replan_min_gain)")
      ->check(real(0, 0.99, false, "fraction"));
  cmd->add_flag("--emulate", o->emulate, "Set HARP_EMULATE=1: apply the plan's emulated device slowdowns");
  cmd->add_option("--grace-s", o->grace_s, "Seconds between SIGTERM and SIGKILL when a worker fails")
      ->capture_default_str()
      ->check(real(0, 3600, false, "s"));
  // A positional vector: after `--` CLI11 hands it every word, flags included.
  cmd->add_option("command", o->command, "Worker command and its arguments, after `--`")->required();
  cmd->callback([o, cmd, &ctx] {
    Opts opts = *o;
    opts.master_addr_given = cmd->count("--master-addr") > 0;
    opts.nodes_given = cmd->count("--nnodes") > 0 || cmd->count("--node-rank") > 0;
    if (opts.slurm && (ctx.rc = apply_slurm(&opts, ctx)) != kExitOk) return;
    ctx.rc = run_launch(opts, ctx);
  });
}

}  // namespace harp::cli
