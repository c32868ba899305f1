// `harp data prepare --input TEXT --output FILE.bin [--tokenizer byte|PATH]
// [--format raw|llmc] [--val-fraction F [--val-output FILE]]`: tokenises a text file
// (byte level, GPT-2 BPE or SentencePiece: harp/data/tokenizer.h) into a token file the
// runtime reads (harp/data/token_file.h): raw uint16 (nanoGPT) or llm.c's headed file
// (uint16, or uint32 when the vocabulary exceeds 65,536). With a validation fraction the
// last F of the tokens go to the validation file, as nanoGPT splits. Torch-free.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "validators.h"
#include "harp/common/document.h"
#include "harp/data/prepare.h"
#include "harp/data/token_file.h"
#include "harp/data/tokenizer.h"

namespace harp::cli {
namespace {

struct Opts {
  std::string input;
  std::string output;
  std::string format = "raw";
  std::string tokenizer = "byte";
  double val_fraction = 0;
  std::string val_output;
};

// OUT with "_val" before its extension: corpus.bin -> corpus_val.bin.
std::string default_val_output(const std::string& out) {
  const std::filesystem::path p(out);
  return (p.parent_path() / (p.stem().string() + "_val" + p.extension().string())).string();
}

int run_data_prepare(const Opts& o, Context& ctx) {
  auto tokenizer = data::load_tokenizer(o.tokenizer);
  if (!tokenizer.ok()) return ctx.fail("data prepare", tokenizer.status());
  const std::int64_t vocab = (*tokenizer)->vocab_size();
  data::TokenFormat format = data::TokenFormat::kRaw16;
  if (o.format == "llmc") format = vocab > 65536 ? data::TokenFormat::kLlmc32 : data::TokenFormat::kLlmc16;
  if (format == data::TokenFormat::kRaw16 && vocab > 65536)
    return ctx.fail("data prepare", invalid_argument("--tokenizer " + o.tokenizer + ": vocabulary " +
                                                     std::to_string(vocab) +
                                                     " does not fit raw uint16 tokens; pass --format llmc "
                                                     "(llm.c's uint32 file)"));
  data::PrepareOptions p;
  p.input = o.input;
  p.output = o.output;
  p.format = format;
  p.val_fraction = o.val_fraction;
  p.val_output = o.val_output.empty() ? default_val_output(o.output) : o.val_output;
  // Long inputs show progress on a terminal; pipes and tests stay quiet.
  if (isatty(STDERR_FILENO))
    p.progress = [](std::int64_t done, std::int64_t total) {
      std::fprintf(stderr, "\r  tokenising: %lld of %lld MiB", static_cast<long long>(done >> 20),
                   static_cast<long long>(total >> 20));
    };
  auto r = data::prepare_tokens(**tokenizer, p);
  if (p.progress) std::fprintf(stderr, "\r\033[K");
  if (!r.ok()) return ctx.fail("data prepare", r.status());
  ctx.out << "wrote " << r->tokens << " tokens (" << (*tokenizer)->describe() << "; "
          << data::token_format_name(format) << ") to " << o.output;
  if (r->val_tokens > 0) ctx.out << " and " << r->val_tokens << " validation tokens to " << p.val_output;
  ctx.out << "\n";
  return kExitOk;
}

}  // namespace

void add_data_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand("data", "Prepare training data");
  cmd->require_subcommand(1, 1);
  auto* prepare = cmd->add_subcommand("prepare", "Tokenise a text file into a .bin token file");
  auto o = std::make_shared<Opts>();
  prepare->add_option("--input", o->input, "Text file to tokenise")->required();
  prepare->add_option("--output", o->output, "Token file to write")->required();
  prepare->add_option("--format", o->format,
                      "raw (nanoGPT uint16, no header; default) or llmc (llm.c's 1 KiB header; uint32 past 65,536 ids)")
      ->check(CLI::IsMember({"raw", "llmc"}));
  prepare->add_option("--tokenizer", o->tokenizer,
                      "byte (default); a SentencePiece .model; a tokenizer.json (BPE); or a folder with "
                      "tokenizer.json, tokenizer.model or vocab.json + merges.txt");
  prepare->add_option("--val-fraction", o->val_fraction, "Put the last fraction of the tokens in a validation file")
      ->check(real(0, 0.5));
  prepare->add_option("--val-output", o->val_output, "Validation token file (default: OUTPUT with _val)");
  prepare->callback([o, &ctx] { ctx.rc = run_data_prepare(*o, ctx); });
}

}  // namespace harp::cli
