// `harp data prepare --input TEXT --output FILE.bin [--format raw|llmc]`: byte-level
// tokenisation into a token file the runtime reads (harp/data/token_file.h): raw uint16
// (nanoGPT) or llm.c's headed uint16 file. Torch-free.
#include "commands.h"
#include "harp/common/document.h"
#include "harp/data/token_file.h"

namespace harp::cli {
namespace {

struct Opts {
  std::string input;
  std::string output;
  std::string format = "raw";
};

int run_data_prepare(const Opts& o, Context& ctx) {
  auto text = read_text_file(o.input);
  if (!text.ok()) return ctx.fail("data prepare", text.status());
  if (text->empty())
    return ctx.fail("data prepare", invalid_argument(o.input + ": input is empty; nothing to tokenise"));
  const std::vector<std::uint16_t> tokens = data::byte_tokens(*text);
  const data::TokenFormat format = o.format == "llmc" ? data::TokenFormat::kLlmc16 : data::TokenFormat::kRaw16;
  Status s = data::write_tokens(std::vector<std::uint32_t>(tokens.begin(), tokens.end()), format, o.output);
  if (!s.ok()) return ctx.fail("data prepare", s);
  ctx.out << "wrote " << tokens.size() << " tokens (byte-level, vocabulary 256; " << data::token_format_name(format)
          << ") to " << o.output << "\n";
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
  prepare->add_option("--format", o->format, "raw (nanoGPT, no header; default) or llmc (llm.c's 1 KiB header)")
      ->check(CLI::IsMember({"raw", "llmc"}));
  prepare->callback([o, &ctx] { ctx.rc = run_data_prepare(*o, ctx); });
}

}  // namespace harp::cli
