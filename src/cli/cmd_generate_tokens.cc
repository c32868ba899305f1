// `harp-train generate-tokens`: the model half of `harp generate` (generate_flags.h). Reads
// the prompt's token ids (decimal, white-space separated) from stdin, writes each new
// token id on its own line to stdout as it comes, then "# " and the summary line.
#include <algorithm>
#include <iostream>
#include <sstream>
#include <iterator>
#include <limits>
#include <thread>

#include "commands.h"
#include "generate_flags.h"
#include "run_checkpoint.h"
#include "harp/common/format.h"
#include "harp/common/parse.h"
#include "harp/runtime/exec/device.h"
#include "harp/runtime/generate.h"

namespace harp::cli {
namespace {

StatusOr<std::vector<std::int64_t>> read_prompt_ids(std::istream& in) {
  std::vector<std::int64_t> ids;
  std::string word;
  while (in >> word) {
    auto id = parse_integer(word, 0, std::numeric_limits<std::int64_t>::max());
    if (!id.ok())
      return invalid_argument("stdin: \"" + word.substr(0, 20) + "\" is not a token id (a whole number >= 0)");
    ids.push_back(*id);
  }
  return ids;
}

int run_generate_tokens(const GenerateFlags& f, Context& ctx) {
  if (const std::string e = generate_source_error(f); !e.empty()) {
    ctx.err << "harp generate: " << e << "\n";
    return ctx.rc = kExitUsage;
  }
  if (f.device == "cuda" && !torch::cuda::is_available()) {
    ctx.err << "harp generate: --device cuda: libtorch sees no CUDA device; use --device cpu\n";
    return ctx.rc = kExitUsage;
  }
  const torch::Dtype dtype = f.dtype == "float64" ? torch::kFloat64 : torch::kFloat32;
  const torch::Device device = f.device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  // Default: every core this process may run on (libtorch's own default may be one).
  if (device.is_cpu())
    runtime::set_compute_threads(f.threads > 0 ? f.threads : std::max(1u, std::thread::hardware_concurrency()), dtype);
  auto prompt = read_prompt_ids(std::cin);
  if (!prompt.ok()) return ctx.fail("generate", prompt.status());
  StatusOr<runtime::LanguageModel> lm = [&]() -> StatusOr<runtime::LanguageModel> {
    if (!f.hf.empty()) return runtime::LanguageModel::from_hf(f.hf, dtype, device);
    HARP_ASSIGN_OR_RETURN(RunCheckpoint run, read_run_checkpoint(f.checkpoint, f.plan_file, f.model, f.step));
    return runtime::LanguageModel::from_params(run.model, run.tensors, dtype, device);
  }();
  if (!lm.ok()) return ctx.fail("generate", lm.status());
  runtime::GenerateOptions o;
  o.max_new_tokens = f.max_new_tokens;
  o.sampling = {f.temperature, f.top_k, f.top_p, f.seed};
  o.use_cache = !f.no_cache;
  auto result = runtime::generate(*lm, *prompt, o, [&ctx](std::int64_t id) {
    ctx.out << id << "\n" << std::flush;
    return static_cast<bool>(ctx.out);  // the reader went away: stop
  });
  if (!result.ok()) return ctx.fail("generate", result.status());
  const auto& c = lm->model().gpt;
  const std::size_t n = result->tokens.size();
  // The summary after the ids, on the same stream, marked: harp generate prints it to
  // stderr once the text is complete (a line of its own, not inside the text).
  std::ostringstream line;
  line << "harp generate: " << prompt->size() << " prompt tokens in " << fmt_time(result->prompt_s) << ", " << n
       << " new tokens";
  if (n > 1) line << fmt(" at %.1f tokens/s", static_cast<double>(n - 1) / result->decode_s);
  line << " (" << c.family << " " << c.name << fmt(", %.2fM parameters, ", lm->model().param_count() / 1e6)
       << f.dtype << " on " << f.device;
  if (f.device == "cpu") line << ", " << torch::get_num_threads() << (torch::get_num_threads() == 1 ? " thread" : " threads");
  line << ", " << (o.use_cache ? "KV cache" : "no cache") << ")";
  ctx.out << "# " << line.str() << "\n" << std::flush;
  return kExitOk;
}

}  // namespace

void add_generate_tokens_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand("generate-tokens", "The model half of harp generate: token ids in, token ids out");
  cmd->group("");  // internal: harp generate runs it
  auto f = std::make_shared<GenerateFlags>();
  add_generate_flags(cmd, *f);
  cmd->callback([f, &ctx] { ctx.rc = run_generate_tokens(*f, ctx); });
}

}  // namespace harp::cli
