// Dispatch only: builds the root app, lets each subcommand register, maps CLI11's parse
// errors to one line and exit code 2.
#include <unistd.h>

#include <sstream>
#include <utility>
#include <vector>

#include "commands.h"
#include "harp/common/inputs.h"

namespace harp::cli {

int Context::fail(const char* command, const Status& status) {
  err << "harp " << command << ": " << status.message() << "\n";
  rc = status.code() == StatusCode::kInfeasible ? kExitInfeasible : kExitInput;
  return rc;
}

namespace {

bool is_allocation_failure(const std::string& what) {
  return what.find("can't allocate memory") != std::string::npos ||
         what.find("out of memory") != std::string::npos || what.find("std::bad_alloc") != std::string::npos;
}

constexpr const char* kOutOfMemory =
    "out of memory; the input asks for more than this machine has (see docs/file_formats.md, Limits)";

// An exception's message as one line: its first (libtorch appends a stack trace), clipped.
std::string first_line(const std::exception& e) {
  std::string what = e.what();
  what = what.substr(0, what.find('\n'));
  return what.size() > 400 ? what.substr(0, 400) + "..." : what;
}

}  // namespace

int Context::fail(const char* command, const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr || is_allocation_failure(e.what())) {
    err << "harp " << command << ": " << kOutOfMemory << "\n";
    return rc = kExitInput;
  }
  err << "harp " << command << ": " << first_line(e) << "\n";
  return rc = kExitInput;
}

namespace {

std::string (*g_version_details)() = nullptr;

std::string version_text() {
  std::string text = std::string("harp ") + HARP_VERSION;
  if (g_version_details != nullptr)
    text += "\n" + g_version_details();
  else
    text += " (the runtime's libtorch, CUDA, cuDNN and NCCL: harp-train --version)";
  return text;
}

std::vector<std::pair<std::string, AddCommand>>& registered() {
  static std::vector<std::pair<std::string, AddCommand>> commands;
  return commands;
}

// `harp train` and `harp export` when this process has no runtime: main.cc normally
// hands them to harp-train before parsing, so this is reached only by a build without
// libtorch.
void add_torch_stand_in(CLI::App& app, Context& ctx, const std::string& name, const std::string& what) {
  auto* cmd = app.add_subcommand(name, what + " (runs harp-train)");
  cmd->allow_extras();
  cmd->prefix_command();
  cmd->callback([&ctx, name] {
    ctx.err << "harp " << name << ": this build has no runtime (libtorch was not found when it was built); "
               "build with `make build`, which installs the pinned PyTorch into .venv\n";
    ctx.rc = kExitUsage;
  });
}

void build_app(CLI::App& app, Context& ctx) {
  app.require_subcommand(1, 1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  app.set_version_flag("--version", version_text,
                       "Print harp's version (harp-train's also names its libtorch, CUDA, cuDNN and NCCL)");
  add_cluster_command(app, ctx);
  add_model_command(app, ctx);
  add_schedule_command(app, ctx);
  add_simulate_command(app, ctx);
  add_plan_command(app, ctx);
  add_launch_command(app, ctx);
  add_data_command(app, ctx);
  add_trace_command(app, ctx);
  add_profile_command(app, ctx);
  add_testbed_command(app, ctx);
  add_generate_command(app, ctx);
  bool have_train = false, have_export = false;
  for (const auto& [name, add] : registered()) {
    add(app, ctx);
    have_train = have_train || name == "train";
    have_export = have_export || name == "export";
  }
  if (!have_train) add_torch_stand_in(app, ctx, "train", "Train with a plan (one rank; see harp launch)");
  if (!have_export) add_torch_stand_in(app, ctx, "export", "Write a checkpoint as Hugging Face safetensors");
  // The commands that only read their inputs and write new files: no output of theirs may
  // replace a file they read (common/inputs.h). Not train, launch or export (a run rewrites
  // its own state), nor profile measure and merge (merging into one of the inputs keeps
  // its entries).
  auto find = [](CLI::App* parent, const std::string& name) -> CLI::App* {
    if (parent == nullptr) return nullptr;
    for (CLI::App* sub : parent->get_subcommands({}))
      if (sub->get_name() == name) return sub;
    return nullptr;
  };
  auto protect = [](CLI::App* sub) {
    if (sub != nullptr) sub->parse_complete_callback([] { protect_inputs(); });
  };
  for (const char* name : {"cluster", "model", "schedule", "simulate", "plan", "data", "trace", "generate"})
    protect(find(&app, name));
  protect(find(find(&app, "testbed"), "probe"));
  protect(find(find(&app, "profile"), "import"));
}

void list_flags(const CLI::App& app, const std::string& prefix, std::vector<std::string>* out) {
  for (const CLI::Option* o : app.get_options()) {
    const std::string name = o->get_name();
    if (name != "--help" && name != "--help-all") out->push_back(prefix + name);
  }
  for (const CLI::App* sub : app.get_subcommands({}))
    list_flags(*sub, prefix + sub->get_name() + " ", out);
}

}  // namespace

std::string harp_train_path() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "harp-train";
  const std::string path(buf, static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  return (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/harp-train";
}

void set_version_details(std::string (*details)()) { g_version_details = details; }

void register_command(const char* name, AddCommand add) {
  for (const auto& [n, a] : registered())
    if (n == name) return;
  registered().emplace_back(name, add);
}

std::vector<std::string> accepted_flags() {
  std::ostringstream sink;
  Context ctx{sink, sink};
  CLI::App app{"harp", "harp"};
  build_app(app, ctx);
  std::vector<std::string> flags;
  list_flags(app, "harp ", &flags);
  return flags;
}

int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  forget_inputs();  // one command's inputs (tests run several in one process)
  Context ctx{out, err};
  CLI::App app{"harp: plan, simulate and train pipelines on heterogeneous GPU clusters", "harp"};
  build_app(app, ctx);
  // An unknown command is named (CLI11 would say "A subcommand is required", and print the
  // top-level help with exit 0 for `harp generat --help`).
  if (argc >= 2 && argv[1][0] != '-') {
    const std::string word = argv[1];
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == word;
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      err << "harp: unknown command '" << word.substr(0, 40) << (word.size() > 40 ? "..." : "")
          << "'; the commands are " << names << " (run `harp --help`)\n";
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const std::bad_alloc&) {
    err << "harp: " << kOutOfMemory << "\n";
    return kExitInput;
  } catch (const CLI::CallForVersion& e) {
    out << e.what() << "\n";
    return kExitOk;
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    // Help for a subcommand arrives as CallForHelp from the subcommand's parse.
    if (e.get_exit_code() == 0) {
      for (const auto* sub : app.get_subcommands()) out << sub->help();
      if (app.get_subcommands().empty()) out << app.help();
      return kExitOk;
    }
    std::string where = app.get_subcommands().empty() ? "" : app.get_subcommands()[0]->get_name() + " ";
    err << "harp " << where << "error: " << e.what() << " (run `harp " << where << "--help`)\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    // Every input error is a Status with its own message; reaching here is a bug (or an
    // allocation failure libtorch reports as its own error). One line either way.
    if (is_allocation_failure(e.what())) {
      err << "harp: " << kOutOfMemory << "\n";
      return kExitInput;
    }
    err << "harp: internal error (a bug in HARP; please report it with the command): " << first_line(e) << "\n";
    return kExitInput;
  }
  return ctx.rc;
}

}  // namespace harp::cli
