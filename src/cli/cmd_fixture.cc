// `ember fixture`: writes a small random-weight model with a working vocabulary, so tests run
// in seconds without downloads. The same options always write the same bytes.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "fixture/fixture.h"
#include "tensor/dtype.h"

namespace ember::cli {

int cmd_fixture(int argc, char** argv) {
  CLI::App app{"Write a small random-weight GGUF model for tests", "ember fixture"};
  fixture::FixtureSpec spec;
  std::string type = "F32";
  std::string out;
  app.add_option("--arch", spec.arch, "architecture")
      ->check(CLI::IsMember({"llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"}))
      ->capture_default_str();
  app.add_flag("--tied", spec.tied, "share the output projection with the token embeddings");
  app.add_option("--type", type, "weight type: F32, F16, BF16, Q8_0, Q4_0, Q4_K, ...")
      ->capture_default_str();
  app.add_option("--layers", spec.n_layer, "transformer blocks")->capture_default_str();
  app.add_option("--embd", spec.n_embd, "hidden size")->capture_default_str();
  app.add_option("--heads", spec.n_head, "attention heads")->capture_default_str();
  app.add_option("--kv-heads", spec.n_head_kv, "key/value heads (GQA)")->capture_default_str();
  app.add_option("--ff", spec.n_ff, "feed-forward size")->capture_default_str();
  app.add_option("--ctx", spec.n_ctx, "context length")->capture_default_str();
  app.add_flag("--rope-freqs", spec.rope_freqs, "llama3 rope scaling (rope_freqs tensor)");
  app.add_option("--seed", spec.seed, "weight seed")->capture_default_str();
  app.add_option("--sliding-window", spec.sliding_window,
                 "gemma2/3: attention window of local layers")
      ->capture_default_str();
  app.add_option("--sliding-pattern", spec.sliding_pattern,
                 "gemma2/3: attention.sliding_window_pattern period (-1: key not written)")
      ->capture_default_str();
  app.add_option("--rope-base-swa", spec.rope_base_swa,
                 "gemma2/3: rope.freq_base_swa (0: key not written)")
      ->capture_default_str();
  app.add_option("--out", out, "output .gguf path")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto dt = tensor::dtype_from_name(type);
  if (!dt) {
    std::fprintf(stderr, "ember fixture: unknown --type '%s'\n", type.c_str());
    return 2;
  }
  spec.type = *dt;
  if (auto st = fixture::write_fixture(spec, out); !st) {
    std::fprintf(stderr, "ember fixture: %s\n", st.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "ember fixture: wrote %s (%s, %s%s)\n", out.c_str(), spec.arch.c_str(),
               type.c_str(), spec.tied ? ", tied" : "");
  return 0;
}

}  // namespace ember::cli
