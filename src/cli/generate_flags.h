// The flags `harp generate` (torch-free: the tokenizer, the prompt, the stream of text;
// cmd_generate.cc) and `harp-train generate-tokens` (the model: token ids in on stdin,
// each new token id out on its own line, then "# " and a summary; cmd_generate_tokens.cc)
// share. Two processes,
// because SentencePiece's protobuf cannot live beside libtorch's (data/sentencepiece.h):
// `harp generate` tokenizes, starts harp-train for the model, and decodes what it streams.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace harp::cli {

struct GenerateFlags {
  std::string checkpoint, plan_file, model, hf;
  int step = 0;  // 0: the latest
  int max_new_tokens = 128;
  double temperature = 1.0, top_p = 1.0;
  int top_k = 0;
  std::uint64_t seed = 1;
  std::string dtype = "float32", device = "cpu";
  int threads = 0;  // 0: libtorch's default
  bool no_cache = false;
};

// Registers the shared flags on `cmd` (generate_flags.cc).
void add_generate_flags(CLI::App* cmd, GenerateFlags& f);
// The shared flags as arguments for harp-train generate-tokens.
std::vector<std::string> generate_flag_args(const GenerateFlags& f);
// "" when the model's source is given once (--hf, or --checkpoint with --plan); else the
// message.
std::string generate_source_error(const GenerateFlags& f);

}  // namespace harp::cli
