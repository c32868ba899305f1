// `harp profile`: measure a model's unique layers on this machine (`harp profile --job
// JOB -o P.json`, measuring done by harp-train), check a plan's stage times against
// this machine (`harp profile check`), merge profile DBs from several machines (`merge`)
// and import other tools' measurements (`import`, torch-free). Formats in
// docs/file_formats.md.
#include "validators.h"
#include "cmd_profile.h"

#include <memory>

#include "harp/common/document.h"
#include "harp/job/job.h"
#include "harp/profile/import.h"
#include "harp/profile/profile_db.h"
#include "harp/profile/unique_layers.h"

namespace harp::cli {
namespace {

ProfileHook g_measure = nullptr;
ProfileHook g_check = nullptr;
ProfileHook g_links = nullptr;

// Runs a measuring hook, or says that this build cannot measure.
int run_hook(ProfileHook hook, const char* name, const ProfileOpts& o, Context& ctx) {
  if (hook == nullptr) {
    ctx.err << "harp " << name << ": this build has no profiler (libtorch was not found when it was built); "
               "install libtorch-dev and rebuild (make build)\n";
    return ctx.rc = kExitUsage;
  }
  return ctx.rc = hook(o, ctx);
}

struct MergeOpts {
  std::vector<std::string> inputs;
  std::string output;
};

int run_merge(const MergeOpts& o, Context& ctx) {
  profile::ProfileDb db;
  for (const std::string& f : o.inputs) {
    auto part = profile::load_profile_db(f);
    if (!part.ok()) return ctx.fail("profile merge", part.status());
    const int replaced = db.merge(*part);
    ctx.out << f << ": " << part->size() << " entries, " << part->devices().size() << " device type(s)";
    if (replaced > 0) ctx.out << "; replaced " << replaced << " entries of the files before it";
    ctx.out << "\n";
  }
  Status s = profile::save_profile_db(db, o.output);
  if (!s.ok()) return ctx.fail("profile merge", s);
  ctx.out << "wrote " << o.output << ": " << db.size() << " entries;";
  for (const auto& [name, d] : db.devices()) ctx.out << " " << name << " (" << db.entries_of(name) << ")";
  ctx.out << "\n";
  return kExitOk;
}

struct ImportOpts {
  std::string format, dir, job_file, output, as = "profile";
  std::vector<std::string> gpus;  // SRC=DEVICE
  int microbatch_size = 0;        // with --as cost-table
};

int run_import(const ImportOpts& o, Context& ctx) {
  auto job = job::load_job(o.job_file);
  if (!job.ok()) return ctx.fail("profile import", job.status());
  if (job->model.gpt.granularity != 1)
    return ctx.fail("profile import",
                    invalid_argument(o.job_file + ": model.granularity = " + std::to_string(job->model.gpt.granularity) +
                                     ": imported profiles time whole blocks; use granularity 1"));
  profile::ImportRequest r;
  r.format = o.format;
  r.dir = o.dir;
  for (const std::string& g : o.gpus) {
    const size_t eq = g.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == g.size()) {
      ctx.err << "harp profile import: --gpu " << g << ": expected SRC=DEVICE, e.g. A100-40=A100-40GB\n";
      return ctx.rc = kExitUsage;
    }
    const std::string src = g.substr(0, eq), device = g.substr(eq + 1);
    // One source per device type and one type per source: two GPUs' timings merged under
    // one name, or one GPU given twice, would be a profile of neither.
    for (const auto& [other_src, other_device] : r.gpu_names)
      if (other_device == device && other_src != src) {
        ctx.err << "harp profile import: --gpu " << g << ": device type " << device << " is already " << other_src
                << "'s; each GPU needs its own device type (e.g. " << device << "-b)\n";
        return ctx.rc = kExitUsage;
      }
    if (r.gpu_names.count(src) != 0 && r.gpu_names[src] != device) {
      ctx.err << "harp profile import: --gpu " << g << ": " << src << " is already imported as " << r.gpu_names[src]
              << "; give each GPU once\n";
      return ctx.rc = kExitUsage;
    }
    r.gpu_names[src] = device;
  }
  auto db = profile::import_profiles(r, job->model);
  if (!db.ok()) return ctx.fail("profile import", db.status());
  Status s;
  if (o.as == "cost-table") {
    if (o.microbatch_size < 1) {
      ctx.err << "harp profile import: --as cost-table needs --microbatch-size N\n";
      return ctx.rc = kExitUsage;
    }
    auto table = profile::cost_table_json(*db, job->model, o.microbatch_size);
    if (!table.ok()) return ctx.fail("profile import", table.status());
    s = write_text_file_atomic(o.output, table->dump(1) + "\n");
  } else {
    s = profile::save_profile_db(*db, o.output);
  }
  if (!s.ok()) return ctx.fail("profile import", s);
  ctx.out << "imported " << db->size() << " entries (" << profile::unique_layers(job->model).size()
          << " unique layers of " << job->model.num_layers() << ") for";
  for (const auto& [name, d] : db->devices()) ctx.out << " " << name;
  ctx.out << " from " << o.dir << " (" << o.format << "); wrote " << o.output << "\n";
  return kExitOk;
}

}  // namespace

void set_profile_hooks(ProfileHook measure, ProfileHook check, ProfileHook links) {
  g_measure = measure;
  g_check = check;
  g_links = links;
}

void add_profile_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand(
      "profile", "Measure the model's unique layers on this machine (--job JOB -o OUT.json); check, merge, import");
  cmd->require_subcommand(0, 1);
  auto o = std::make_shared<ProfileOpts>();
  cmd->add_option("--job", o->job_file, "Job file: the model, the cluster's device types, the microbatch size");
  cmd->add_option("-o,--output", o->output, "Profile DB to write (JSON)");
  cmd->add_option("--device", o->devices,
                  "Device type to record the measurements as (repeatable; default: the cluster's cpu and "
                  "emulated device types)");
  cmd->add_option("--microbatch-sizes", o->microbatch_sizes, "Samples per device to measure (default: the job's)")
      ->delimiter(',')
      ->check(whole(1, 1 << 16));
  cmd->add_flag("--per-layer", o->per_layer, "Measure every layer, not one per signature (for comparison)");
  cmd->add_flag("--quick", o->quick, "Fewer repetitions: a smoke run, not a profile to plan with");
  cmd->add_option("--threads", o->threads, "Intra-op threads (default: the job's training.threads)")
      ->check(whole(1, 256));
  cmd->add_option("--rounds", o->rounds,
                  "Take each measurement this many times, a pass over the layers apart, and keep the median one "
                  "(default 3; --quick 1)")
      ->check(whole(1, 20));
  cmd->callback([cmd, o, &ctx] {
    if (!cmd->get_subcommands().empty()) return;
    if (o->job_file.empty() || o->output.empty()) {
      ctx.err << "harp profile: give --job JOB and -o OUT.json (or a subcommand: check, merge, import)\n";
      ctx.rc = kExitUsage;
      return;
    }
    run_hook(g_measure, "profile", *o, ctx);
  });

  auto* check = cmd->add_subcommand("check", "Run each stage of a plan here: predicted against measured stage time");
  auto c = std::make_shared<ProfileOpts>();
  check->add_option("--plan", c->plan_file, "Plan (JSON)")->required();
  check->add_flag("--quick", c->quick, "Fewer repetitions");
  check->add_option("--threads", c->threads, "Intra-op threads (default 1)")->check(whole(1, 256));
  check->callback([c, &ctx] { run_hook(g_check, "profile check", *c, ctx); });

  auto* links = cmd->add_subcommand(
      "links", "Measure point-to-point and all-reduce between two local ranks; print cluster-file link entries");
  auto k = std::make_shared<ProfileOpts>();
  links->add_option("--cluster", k->cluster_file, "Cluster file whose links and subclusters to fill in");
  links->add_option("--plan", k->plan_file, "Also measure the sizes this plan sends across its cuts");
  links->add_flag("--quick", k->quick, "Fewer repetitions");
  links->callback([k, &ctx] { run_hook(g_links, "profile links", *k, ctx); });

  auto* merge = cmd->add_subcommand("merge", "Merge profile DBs (later files win on the same key)");
  auto m = std::make_shared<MergeOpts>();
  merge->add_option("inputs", m->inputs, "Profile DBs (JSON)")->required();
  merge->add_option("-o,--output", m->output, "Merged profile DB to write")->required();
  merge->callback([m, &ctx] { ctx.rc = run_merge(*m, ctx); });

  auto* imp = cmd->add_subcommand("import", "Read measurements of other tools (Metis format) into a profile DB");
  auto i = std::make_shared<ImportOpts>();
  imp->add_option("dir", i->dir, "Folder: sailor: <GPU>/mbs<B>_tmp<T>.json; metis: DeviceType.<GPU>_tp<T>_bs<B>.json")
      ->required();
  imp->add_option("--format", i->format, "sailor or metis")->required()->check(CLI::IsMember({"sailor", "metis"}));
  imp->add_option("--job", i->job_file, "Job file whose model (granularity 1) the profiles measured")->required();
  imp->add_option("--gpu", i->gpus, "SRC=DEVICE: import GPU SRC as device type DEVICE (repeatable; given, only these GPUs)");
  imp->add_option("--as", i->as, "profile (default) or cost-table")->check(CLI::IsMember({"profile", "cost-table"}));
  imp->add_option("--microbatch-size", i->microbatch_size, "With --as cost-table: the table's microbatch size")
      ->check(whole(1, 1 << 16));
  imp->add_option("-o,--output", i->output, "File to write")->required();
  imp->callback([i, &ctx] { ctx.rc = run_import(*i, ctx); });
}

}  // namespace harp::cli
