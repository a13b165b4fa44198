// The `ember` executable: dispatches to a subcommand (cli/commands.h).
#include <cstdio>
#include <cstring>
#include <string_view>

#include "cli/commands.h"
#include "cli/version.h"

namespace {

struct Subcommand {
  const char* name;
  int (*fn)(int, char**);
  const char* help;
};

constexpr Subcommand kCommands[] = {
    {"serve", ember::cli::cmd_serve, "serve a model over the OpenAI-compatible HTTP API"},
    {"stop", ember::cli::cmd_stop, "stop a running `ember serve` gracefully (--pid-file)"},
    {"restart", ember::cli::cmd_restart,
     "replace a running `ember serve --reuse-port` in place (--pid-file)"},
    {"engine", ember::cli::cmd_engine, "the engine worker process (started by serve)"},
    {"run", ember::cli::cmd_run, "generate text from a prompt, or chat, in this process"},
    {"inspect", ember::cli::cmd_inspect, "print a GGUF file's metadata and tensor table"},
    {"models", ember::cli::cmd_models, "list the named models --model accepts"},
    {"fixture", ember::cli::cmd_fixture, "write a small random-weight model for tests"},
    {"bench", ember::cli::cmd_bench, "measure prefill, decode and batched decode on this host"},
    {"version", ember::cli::cmd_version,
     "version, commit, compiler, and the kernel levels this CPU has (also --version)"},
};

void usage(FILE* out) {
  std::fprintf(out, "usage: ember <command> [options]   (ember <command> --help for more)\n\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-8s %s\n", c.name, c.help);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string_view cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    usage(stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "-V") return ember::cli::cmd_version(argc - 1, argv + 1);
  for (const auto& c : kCommands) {
    if (cmd == c.name) return c.fn(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "ember: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
