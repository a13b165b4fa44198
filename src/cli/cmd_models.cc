// `ember models`: the named models --model accepts, whether each is installed, its size and
// path, and how to install it.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/model_path.h"

namespace ember::cli {

int cmd_models(int argc, char** argv) {
  CLI::App app{"List the named models --model accepts", "ember models"};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (const auto& m : named_models()) {
    const bool is_default = &m == &default_model();
    auto path = locate_named_model(m);
    std::printf("%s%s\n  %s\n", m.name, is_default ? "  (default; alias: default)" : "",
                m.description);
    if (path) {
      std::error_code ec;
      auto bytes = std::filesystem::file_size(*path, ec);
      std::printf("  installed: yes, %.1f MB\n  path: %s\n", ec ? 0.0 : bytes / 1e6, path->c_str());
    } else {
      std::printf("  installed: no (package %s)\n  install: %s\n", m.package, m.install);
    }
  }
  return 0;
}

}  // namespace ember::cli
