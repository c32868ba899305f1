// `harp data prepare --input TEXT --output FILE.bin [--tokenizer byte|PATH]
// [--format raw|llmc] [--val-fraction F [--val-output FILE]]`: tokenises a text file
// (byte level, GPT-2 BPE or SentencePiece: harp/data/tokenizer.h) into a token file the
// runtime reads (harp/data/token_file.h): raw uint16 (nanoGPT) or llm.c's headed file
// (uint16, or uint32 when the vocabulary exceeds 65,536). With a validation fraction the
// last F of the tokens go to the validation file, as nanoGPT splits. Torch-free.
#include <filesystem>

#include "commands.h"
#include "harp/common/document.h"
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
  const std::string val_output = o.val_output.empty() ? default_val_output(o.output) : o.val_output;
  if (o.val_fraction > 0 && std::filesystem::path(val_output) == std::filesystem::path(o.output))
    return ctx.fail("data prepare", invalid_argument("--val-output " + val_output +
                                                     " is the training output; name another file"));
  auto text = read_text_file(o.input, std::int64_t{1} << 30);
  if (!text.ok()) return ctx.fail("data prepare", text.status());
  if (text->empty())
    return ctx.fail("data prepare", invalid_argument(o.input + ": input is empty; nothing to tokenise"));
  std::vector<std::uint32_t> tokens = (*tokenizer)->encode(*text);
  std::vector<std::uint32_t> val;
  if (o.val_fraction > 0) {
    const auto n = static_cast<std::int64_t>(static_cast<double>(tokens.size()) * o.val_fraction);
    if (n < 1 || n >= static_cast<std::int64_t>(tokens.size()))
      return ctx.fail("data prepare",
                      invalid_argument("--val-fraction " + std::to_string(o.val_fraction) + " of " +
                                       std::to_string(tokens.size()) + " tokens leaves " +
                                       (n < 1 ? "no validation token" : "no training token") +
                                       "; pass a fraction that keeps both parts non-empty"));
    val.assign(tokens.end() - n, tokens.end());
    tokens.resize(tokens.size() - static_cast<size_t>(n));
  }
  Status s = data::write_tokens(tokens, format, o.output);
  if (s.ok() && !val.empty()) s = data::write_tokens(val, format, val_output);
  if (!s.ok()) return ctx.fail("data prepare", s);
  ctx.out << "wrote " << tokens.size() << " tokens (" << (*tokenizer)->describe() << "; "
          << data::token_format_name(format) << ") to " << o.output;
  if (!val.empty()) ctx.out << " and " << val.size() << " validation tokens to " << val_output;
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
      ->check(CLI::Range(0.0, 0.5));
  prepare->add_option("--val-output", o->val_output, "Validation token file (default: OUTPUT with _val)");
  prepare->callback([o, &ctx] { ctx.rc = run_data_prepare(*o, ctx); });
}

}  // namespace harp::cli
