// The build's identity, printed by `ember version` (and `ember --version`): defined in
// build/version.cc, which cmake/version.cmake writes at every build from the project version,
// the git commit of the source tree and the compiler.
#pragma once

namespace ember::cli {

extern const char kVersion[];   // CMake's project version, e.g. "0.1.0"
extern const char kCommit[];    // short git commit, "-dirty" with local changes; or "unknown"
extern const char kCompiler[];  // e.g. "GNU 12.2.0"
extern const char kBuild[];     // CMake build type, and the sanitizer when there is one

int cmd_version(int argc, char** argv);

}  // namespace ember::cli
