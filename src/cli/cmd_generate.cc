// `harp generate`: text from a trained model. This torch-free process tokenizes the
// prompt, starts `harp-train generate-tokens` for the model (generate_flags.h says why two
// processes), writes it the prompt's ids, and prints the text as the new ids stream back:
// the prompt, then the continuation, decoded as it comes.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "generate_flags.h"
#include "harp/common/parse.h"
#include "harp/data/tokenizer.h"
#include "harp/common/document.h"

namespace harp::cli {
namespace {

struct Opts {
  GenerateFlags model;
  std::string tokenizer, prompt, prompt_file;
  bool prompt_given = false;
};

// The tokenizer: --tokenizer, else the Hugging Face folder's own when it has one, else bytes.
StatusOr<std::unique_ptr<data::Tokenizer>> pick_tokenizer(const Opts& o) {
  if (!o.tokenizer.empty()) return data::load_tokenizer(o.tokenizer);
  std::error_code ec;
  if (!o.model.hf.empty() && std::filesystem::is_directory(o.model.hf, ec))
    for (const char* name : {"tokenizer.json", "tokenizer.model", "vocab.json"})
      if (std::filesystem::exists(o.model.hf + "/" + name, ec)) return data::load_tokenizer(o.model.hf);
  return data::byte_tokenizer();
}

// Writes all of `text` to `fd`; false on an error (the child went away).
bool write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// Prints the decoded text past what is already printed (a decode that rewrites the printed
// part, as SentencePiece's normalisation may, waits for the end).
void print_new_text(const std::string& text, std::string* printed, std::ostream& out) {
  if (text.size() > printed->size() && text.compare(0, printed->size(), *printed) == 0) {
    out << text.substr(printed->size()) << std::flush;
    *printed = text;
  }
}

int run_generate(const Opts& o, Context& ctx) {
  if (const std::string e = generate_source_error(o.model); !e.empty()) {
    ctx.err << "harp generate: " << e << "\n";
    return ctx.rc = kExitUsage;
  }
  if (o.prompt_given == !o.prompt_file.empty()) {
    ctx.err << "harp generate: give the prompt as --prompt TEXT or --prompt-file FILE (one of them)\n";
    return ctx.rc = kExitUsage;
  }
  std::string prompt = o.prompt;
  if (!o.prompt_file.empty()) {
    auto text = read_text_file(o.prompt_file);
    if (!text.ok()) return ctx.fail("generate", text.status());
    prompt = *text;
  }
  auto tokenizer = pick_tokenizer(o);
  if (!tokenizer.ok()) return ctx.fail("generate", tokenizer.status());
  const std::vector<std::uint32_t> encoded = (*tokenizer)->encode(prompt);
  if (encoded.empty()) {
    ctx.err << "harp generate: the prompt is empty (no tokens); give at least one character\n";
    return ctx.rc = kExitUsage;
  }
  std::string ids;
  for (std::uint32_t id : encoded) ids += std::to_string(id) + "\n";

  // harp-train generate-tokens FLAGS, its stdin and stdout on pipes, its stderr ours.
  std::vector<std::string> args = {harp_train_path(), "generate-tokens"};
  for (std::string& a : generate_flag_args(o.model)) args.push_back(std::move(a));
  if (access(args[0].c_str(), X_OK) != 0) {
    ctx.err << "harp generate: " << args[0] << " is missing: this build has no runtime (libtorch was not found when "
            << "it was built); install libtorch-dev and rebuild (make build)\n";
    return ctx.rc = kExitUsage;
  }
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) {
    ctx.err << "harp generate: cannot create a pipe: " << std::strerror(errno) << "\n";
    return ctx.rc = kExitInput;
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(to_child[0], STDIN_FILENO);
    dup2(from_child[1], STDOUT_FILENO);
    for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) close(fd);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  if (pid < 0) {
    close(to_child[1]);
    close(from_child[0]);
    ctx.err << "harp generate: cannot start " << args[0] << ": " << std::strerror(errno) << "\n";
    return ctx.rc = kExitInput;
  }
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old);  // a child that ends early makes write() fail, not kill us
  write_all(to_child[1], ids);
  close(to_child[1]);

  // The prompt is printed with the first new token, so that a model that fails to load
  // prints only its error.
  std::vector<std::uint32_t> all = encoded;
  std::string printed;
  std::string pending, summary;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(from_child[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<std::size_t>(n));
    for (std::size_t eol = pending.find('\n'); eol != std::string::npos; eol = pending.find('\n')) {
      const std::string line = pending.substr(0, eol);
      pending.erase(0, eol + 1);
      if (line.rfind("# ", 0) == 0) {  // the summary, after the last id
        summary = line.substr(2);
        continue;
      }
      auto id = parse_integer(line, 0, 0xffffffffLL);
      if (!id.ok()) continue;
      all.push_back(static_cast<std::uint32_t>(*id));
      print_new_text((*tokenizer)->decode(all), &printed, ctx.out);
    }
    if (!ctx.out) break;  // the reader went away (`| head`): stop the model too
  }
  close(from_child[0]);
  const bool reader_gone = !ctx.out;
  if (reader_gone) kill(pid, SIGTERM);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  sigaction(SIGPIPE, &old, nullptr);
  // As `yes | head` ends: nothing more to say, to a reader that is not there.
  if (reader_gone) return ctx.rc = kExitOk;
  if (all.size() > encoded.size() || (WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    const std::string text = (*tokenizer)->decode(all);
    if (text.compare(0, printed.size(), printed) != 0) ctx.out << "\n" << text;  // rewritten: the whole text once
    else print_new_text(text, &printed, ctx.out);
    ctx.out << "\n" << std::flush;
  }
  if (!summary.empty()) ctx.err << summary << "\n";
  if (WIFSIGNALED(status)) {
    ctx.err << "harp generate: " << args[0] << " ended by signal " << WTERMSIG(status) << "\n";
    return ctx.rc = kExitInput;
  }
  const int code = WEXITSTATUS(status);
  if (code == 127) ctx.err << "harp generate: cannot run " << args[0] << "\n";
  return ctx.rc = code == 127 ? kExitInput : code;
}

}  // namespace

void add_generate_command(CLI::App& root, Context& ctx) {
  auto* cmd = root.add_subcommand("generate", "Generate text from a trained model (a run's checkpoint or a Hugging Face folder)");
  auto o = std::make_shared<Opts>();
  add_generate_flags(cmd, o->model);
  cmd->add_option("--tokenizer", o->tokenizer,
                  "byte, or a tokenizer file or folder as harp data prepare takes (default: the --hf folder's, else byte)");
  cmd->add_option("--prompt", o->prompt, "The text to continue");
  cmd->add_option("--prompt-file", o->prompt_file, "A file holding the text to continue");
  cmd->callback([o, cmd, &ctx] {
    o->prompt_given = cmd->count("--prompt") > 0;
    ctx.rc = run_generate(*o, ctx);
  });
}

}  // namespace harp::cli
