// The `ember` subcommands. Each takes the argv that follows the subcommand name (argv[0] is
// the subcommand) and returns the process exit code. Options are declared with CLI11, each
// with its flag, environment variable, default and help: that declaration is the settings table.
#pragma once

namespace ember::cli {

int cmd_run(int argc, char** argv);      // generate text in-process (one prompt, or --chat)
int cmd_inspect(int argc, char** argv);  // print a GGUF file's metadata and tensor table
int cmd_fixture(int argc, char** argv);  // write a small random-weight test model
int cmd_serve(int argc, char** argv);    // the OpenAI-compatible HTTP server
int cmd_engine(int argc, char** argv);   // the engine worker behind `ember serve`
int cmd_stop(int argc, char** argv);     // stop a server through its pid file
int cmd_restart(int argc, char** argv);  // replace a --reuse-port server in place
int cmd_bench(int argc, char** argv);    // prefill / decode / batched-decode benchmark
int cmd_models(int argc, char** argv);   // list the named models and where they are installed

}  // namespace ember::cli
