// `ember version` (also `ember --version`): what was built and what it runs here. The version,
// commit, compiler and build type come from cli/version.h; the kernel levels are this CPU's,
// with the one a command runs by default (EMBER_SIMD_LEVEL when set, else the best).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli/version.h"
#include "tensor/quant.h"

namespace ember::cli {

int cmd_version(int argc, char** argv) {
  if (argc > 1) {
    std::fprintf(stderr, "ember version: takes no arguments (got '%s')\n", argv[1]);
    return 2;
  }
  std::printf("ember %s\ncommit %s\ncompiler %s, %s build\n", kVersion, kCommit, kCompiler, kBuild);
  std::string levels;
  for (auto l : tensor::supported_simd_levels()) {
    levels += (levels.empty() ? "" : ", ") + std::string(l);
  }
  std::printf("kernel levels this CPU has: %s\n", levels.c_str());
  const char* env = std::getenv("EMBER_SIMD_LEVEL");
  const std::string asked = env ? env : "";
  if (auto st = tensor::select_simd_level(asked); !st) {
    std::printf("kernel level chosen: none (EMBER_SIMD_LEVEL: %s)\n", st.message().c_str());
    return 0;
  }
  std::printf("kernel level chosen: %s (%s)\n", std::string(tensor::simd_level()).c_str(),
              asked.empty() ? "the best this CPU has" : "EMBER_SIMD_LEVEL");
  return 0;
}

}  // namespace ember::cli
