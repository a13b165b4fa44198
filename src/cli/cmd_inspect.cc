// `ember inspect FILE`: prints a GGUF file's header, metadata and tensor table.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "cli/model_path.h"
#include "gguf/reader.h"

namespace ember::cli {

int cmd_inspect(int argc, char** argv) {
  CLI::App app{"Print a GGUF file's metadata and tensor table", "ember inspect"};
  std::string model = "default";
  app.add_option("model", model, "GGUF file (or 'default' for the embedded default model)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto path = resolve_model_path(model);
  if (!path) {
    std::fprintf(stderr, "ember inspect: %s\n", path.message().c_str());
    return 1;
  }
  auto file = gguf::File::open(*path);
  if (!file) {
    std::fprintf(stderr, "ember inspect: %s\n", file.message().c_str());
    return 1;
  }
  std::string text = gguf::describe(*file);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace ember::cli
