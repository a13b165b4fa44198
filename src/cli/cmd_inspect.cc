// `ember inspect FILE`: prints a GGUF file's header, metadata and tensor table, then a last line
// that says whether ember runs the file ("supported: ...") or the first reason it does not
// ("not supported: ..."): the architecture, every weight's name, shape and type, the vocabulary
// and the chat template are checked as loading would check them, without computing anything.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <set>
#include <string_view>

#include "cli/commands.h"
#include "cli/model_path.h"
#include "gguf/reader.h"
#include "model/backend.h"
#include "model/weights.h"
#include "text/text_codec.h"
#include "text/tokenizer.h"
#include "text/vocab.h"

namespace ember::cli {
namespace {

// Where the chat template comes from, as TextCodec picks it.
std::string template_origin(const text::Vocab& v, const text::TextCodec& codec) {
  std::string origin = !v.chat_template.empty()       ? "the file's"
                       : codec.template_is_fallback() ? "none in the file, ChatML fallback"
                                                      : "ember's built-in";
  if (codec.folds_system()) origin += " (no system role: system text opens the first user turn)";
  return origin;
}

Result<std::string> check_supported(const gguf::File& f) {
  EMBER_TRY(model::ModelConfig cfg, model::read_config(f));
  EMBER_TRY(model::Weights w, model::bind_weights(f, cfg));
  EMBER_TRY(text::Vocab vocab, text::load_vocab(f));
  const text::Vocab copy = vocab;
  EMBER_TRY(std::unique_ptr<text::Tokenizer> tok, text::Tokenizer::create(std::move(vocab)));
  EMBER_TRY(std::unique_ptr<text::TextCodec> codec,
            text::TextCodec::create(std::shared_ptr<const text::Tokenizer>(std::move(tok)),
                                    {cfg.arch_name, ""}));
  std::set<std::string_view> types;  // of the matrices, in name order
  types.insert(tensor::dtype_name(w.token_embd.type));
  types.insert(tensor::dtype_name(w.output.type));
  for (const model::LayerWeights& l : w.layers) {
    for (const tensor::Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      types.insert(tensor::dtype_name(m->type));
    }
  }
  std::string window;
  if (cfg.sliding_window > 0) window = fmt::format(", sliding window {}", cfg.sliding_window);
  return fmt::format("{}, {} layers{}, weights {}, chat template: {}", cfg.arch_name, cfg.n_layer,
                     window, fmt::join(types, "/"), template_origin(copy, *codec));
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  CLI::App app{"Print a GGUF file's metadata and tensor table, and whether ember runs it",
               "ember inspect"};
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
    // Unreadable (an unsupported tensor type among the reasons): the reason is the verdict.
    std::fprintf(stdout, "not supported: %s\n", file.message().c_str());
    return 1;
  }
  std::string text = gguf::describe(*file);
  auto verdict = check_supported(*file);
  text +=
      verdict ? "\nsupported: " + *verdict + "\n" : "\nnot supported: " + verdict.message() + "\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
  return verdict ? 0 : 1;
}

}  // namespace ember::cli
