// `harp data prepare --input TEXT --output FILE.bin`: byte-level tokenisation into the
// uint16 token file the runtime reads (harp/data/token_file.h). Torch-free.
#include "commands.h"
#include "harp/common/document.h"
#include "harp/data/token_file.h"

namespace harp::cli {
namespace {

struct Opts {
  std::string input;
  std::string output;
};

int run_data_prepare(const Opts& o, Context& ctx) {
  auto text = read_text_file(o.input);
  if (!text.ok()) return ctx.fail("data prepare", text.status());
  if (text->empty())
    return ctx.fail("data prepare", invalid_argument(o.input + ": input is empty; nothing to tokenise"));
  const std::vector<std::uint16_t> tokens = data::byte_tokens(*text);
  Status s = data::write_token_file(tokens, o.output);
  if (!s.ok()) return ctx.fail("data prepare", s);
  ctx.out << "wrote " << tokens.size() << " tokens (byte-level, vocabulary 256) to " << o.output << "\n";
  return kExitOk;
}

}  // namespace

void add_data_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand("data", "Prepare training data");
  cmd->require_subcommand(1, 1);
  auto* prepare = cmd->add_subcommand("prepare", "Tokenise a text file byte by byte into a .bin token file");
  auto o = std::make_shared<Opts>();
  prepare->add_option("--input", o->input, "Text file to tokenise")->required();
  prepare->add_option("--output", o->output, "Token file to write (uint16 little-endian)")->required();
  prepare->callback([o, &ctx] { ctx.rc = run_data_prepare(*o, ctx); });
}

}  // namespace harp::cli
