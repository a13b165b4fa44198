// `ember run`: loads a model in this process and generates text from one prompt, or holds a
// chat (--chat) reading user turns line by line from stdin (a terminal or a pipe) until EOF.
// Text streams to stdout as it is generated; the summary line goes to stderr.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cli/chat_interrupt.h"
#include "cli/commands.h"
#include "cli/model_path.h"
#include "cli/serve_settings.h"
#include "cli/settings_cli.h"
#include "engine/engine.h"
#include "model/backend.h"
#include "tensor/quant.h"
#include "text/text_codec.h"
#include "worker/engine_settings.h"

namespace ember::cli {

namespace {

// No defaults of its own: shared options take theirs from the settings tables (add_setting),
// the sampling options from engine::SamplingParams.
struct RunOptions {
  std::string prompt;
  int32_t n_predict{};  // serve's --max-tokens
  engine::SamplingParams sampling;
  int64_t seed = -1;  // -1: a fresh seed per run (SamplingParams' constant default is for tests)
  worker::EngineSettings engine;  // --model, --threads, --ctx-size, --kv-type, --simd-level
  bool chat = false;
  std::string system;  // serve's --system-prompt
};

struct Loaded {
  std::shared_ptr<const gguf::File> file;
  std::unique_ptr<text::TextCodec> text;
  std::unique_ptr<engine::Engine> engine;
};

// The same text path as `ember serve` (text/text_codec.h): template, default system prompt,
// prompt encoding and end-of-generation ids are decided there once.
Result<Loaded> load(const RunOptions& o) {
  EMBER_TRY(std::string path, resolve_model_path(o.engine.model));
  EMBER_TRY(gguf::File file, gguf::File::open(path));
  auto shared = std::make_shared<const gguf::File>(std::move(file));
  EMBER_TRY(text::Vocab vocab, text::load_vocab(*shared));
  EMBER_TRY(auto tok, text::Tokenizer::create(std::move(vocab)));
  model::LoadOptions lo;
  lo.n_threads = o.engine.threads;
  lo.n_ctx = o.engine.ctx_size;
  lo.kv_type = model::kv_type_from_name(o.engine.kv_type).value();  // checked by the option
  lo.copy_weights_in_background = true;  // the first answer need not wait for the copy
  EMBER_TRY(auto backend, model::load_cpu_model(shared, lo));
  EMBER_TRY(auto codec,
            text::TextCodec::create(std::shared_ptr<const text::Tokenizer>(std::move(tok)),
                                    {backend->config().arch_name, o.system}));
  engine::EngineOptions eo;
  eo.max_sequences = 1;
  eo.eog_tokens = codec->eog_tokens();
  auto eng =
      std::make_unique<engine::Engine>(std::shared_ptr<model::Backend>(std::move(backend)), eo);
  return Loaded{shared, std::move(codec), std::move(eng)};
}

struct Outcome {
  std::string text;
  engine::DoneEvent done;
};

// Generates from `prompt`, streaming text to stdout as whole UTF-8 characters arrive.
// `interrupts`: when given, Ctrl-C cancels this generation (the partial text is returned).
Result<Outcome> generate(Loaded& m, const std::vector<int32_t>& prompt, const RunOptions& o,
                         uint64_t seed, ChatInterrupts* interrupts = nullptr) {
  engine::GenerateRequest req;
  req.prompt = prompt;
  req.max_tokens = o.n_predict;
  req.sampling = o.sampling;
  req.sampling.seed = seed;
  req.sampling.logprobs = false;  // ember run prints text only
  req.cancel = engine::CancelToken::make();
  if (interrupts) interrupts->begin_generation(req.cancel);
  auto sub = m.engine->submit(std::move(req));
  if (!sub.ok()) {
    if (interrupts) interrupts->end_generation();
    return fail("{}", sub.error->message);
  }
  text::IncrementalDetokenizer detok = m.text->detokenizer();
  Outcome out;
  while (auto ev = sub.stream->next()) {
    if (auto* t = std::get_if<engine::TokenEvent>(&*ev)) {
      std::string piece = detok.push(t->id);
      out.text += piece;
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    } else {
      out.done = std::get<engine::DoneEvent>(*ev);
    }
  }
  if (interrupts) interrupts->end_generation();
  std::string rest = detok.flush();
  out.text += rest;
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fflush(stdout);
  if (out.done.reason == engine::FinishReason::Error) return fail("{}", out.done.message);
  return out;
}

void print_summary(const engine::DoneEvent& d) {
  const auto& u = d.usage;
  double prefill_tps =
      d.timings.prefill_ms > 0 ? u.prompt_tokens * 1000.0 / d.timings.prefill_ms : 0;
  int32_t decoded = u.completion_tokens > 1 ? u.completion_tokens - 1 : 0;
  double decode_tps = d.timings.decode_ms > 0 ? decoded * 1000.0 / d.timings.decode_ms : 0;
  std::fprintf(stderr,
               "\nember: prompt %d tokens, generated %d tokens, prefill %.1f tok/s, decode %.1f "
               "tok/s, finish %s, %s kernels\n",
               u.prompt_tokens, u.completion_tokens, prefill_tps, decode_tps,
               std::string(engine::finish_reason_name(d.reason)).c_str(),
               std::string(tensor::simd_level()).c_str());
}

// A notice on stderr, dimmed on a terminal: about the chat, not part of any answer.
void notice(const std::string& msg) {
  const bool tty = ::isatty(2);
  std::fprintf(stderr, "%s%s%s\n", tty ? "\x1b[2m" : "", msg.c_str(), tty ? "\x1b[0m" : "");
}

// The prompt of `conv` (user and assistant turns, ending with a user turn; the system message
// is the codec's and always stays), made to fit the context: while it leaves less than
// `reserve` tokens for the answer, the oldest exchange (a user turn and its answer) is dropped
// from `conv`. The newest user turn is never dropped; its prompt may still leave less room
// (or none: the caller checks). Returns how many exchanges were dropped in `*dropped`.
Result<std::vector<int32_t>> fit_conversation(const text::TextCodec& codec,
                                              std::vector<text::ChatMessage>& conv, int32_t n_ctx,
                                              int32_t reserve, int* dropped) {
  *dropped = 0;
  for (;;) {
    EMBER_TRY(std::vector<int32_t> ids, codec.encode_chat(conv));
    if (static_cast<int64_t>(ids.size()) + reserve <= n_ctx || conv.size() < 3) return ids;
    conv.erase(conv.begin(), conv.begin() + 2);
    ++*dropped;
  }
}

// Ctrl-C during an answer stops it (kept, cut short, in the history); Ctrl-C at the prompt or
// end of input (Ctrl-D) ends the chat with exit 0. Each answer gets at most what the context
// holds after its prompt (and -n); when the conversation grows past the context, its oldest
// exchanges are dropped (with a notice) so that the newest turn is answered.
int run_chat(Loaded& m, ChatInterrupts& interrupts, const RunOptions& o, uint64_t seed) {
  std::vector<text::ChatMessage> conv;
  std::string line;
  const bool tty = ::isatty(0);
  const int32_t n_ctx = m.engine->n_ctx();
  // Room kept for an answer when old turns are dropped: -n, but at most a quarter of the
  // context (a long -n must not drop every earlier turn).
  const int32_t reserve = std::max(1, std::min(o.n_predict, n_ctx / 4));
  for (int turn = 0;; ++turn) {
    if (tty) std::fputs("> ", stdout), std::fflush(stdout);
    auto status = interrupts.read_line(&line);
    if (status != ChatInterrupts::LineStatus::Line) break;
    if (line.empty()) continue;
    conv.push_back({"user", line});
    int dropped = 0;
    auto ids = fit_conversation(*m.text, conv, n_ctx, reserve, &dropped);
    if (!ids) {
      std::fprintf(stderr, "ember run: %s\n", ids.message().c_str());
      return 1;
    }
    if (dropped > 0) {
      notice(
          fmt::format("(the conversation outgrew the {}-token context: dropped its {} oldest "
                      "exchange{})",
                      n_ctx, dropped, dropped == 1 ? "" : "s"));
    }
    if (static_cast<int64_t>(ids->size()) >= n_ctx) {
      // Not even this message fits, with no history: say so and go on with a fresh chat.
      notice(
          fmt::format("(this message and the system prompt are {} tokens, but the context "
                      "holds {} (-c): not sent; the conversation starts afresh)",
                      ids->size(), n_ctx));
      conv.clear();
      continue;
    }
    RunOptions turn_options = o;  // the answer's budget: what the context holds after the prompt
    turn_options.n_predict = std::min<int64_t>(o.n_predict, n_ctx - ids->size());
    auto out = generate(m, *ids, turn_options, seed + static_cast<uint64_t>(turn), &interrupts);
    if (!out) {
      std::fprintf(stderr, "\nember run: %s\n", out.message().c_str());
      return 1;
    }
    // A cut answer is marked: by Ctrl-C, or by the token limit (-n) mid-sentence.
    if (out->done.reason == engine::FinishReason::Cancelled) std::fputs(" [stopped]", stdout);
    if (out->done.reason == engine::FinishReason::Length) std::fputs(" [length]", stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    conv.push_back({"assistant", out->text});
  }
  if (tty) std::fputs("\n", stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  CLI::App app{"Generate text in this process", "ember run"};
  RunOptions o;
  const auto& engine_table = worker::engine_settings_table();
  add_setting(app, engine_table, "model", o.engine.model, "",
              "GGUF file, or a model name (ember models lists them)");
  app.add_option("-p,--prompt", o.prompt, "prompt text");
  // The same setting as `ember serve --max-tokens` (its default and EMBER_MAX_TOKENS).
  add_setting(app, serve_settings_table(), "max-tokens", o.n_predict, "-n,--n-predict,--max-tokens",
              "most tokens generated per answer (the context bounds every answer)");
  // The sampling options' ranges are checked here, where they are read: the engine trusts them.
  app.add_option("--temp", o.sampling.temperature, "temperature (0: greedy)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--top-k", o.sampling.top_k, "top-k (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--top-p", o.sampling.top_p, "top-p (1: off)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--min-p", o.sampling.min_p, "min-p (0: off)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--repeat-penalty", o.sampling.repeat_penalty, "repetition penalty (1: off)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("-s,--seed", o.seed, "sampling seed (-1: random)")->capture_default_str();
  // The engine's own settings: their flags, environment variables, defaults and help.
  add_setting(app, engine_table, "threads", o.engine.threads);
  add_setting(app, engine_table, "ctx-size", o.engine.ctx_size);
  add_setting(app, engine_table, "kv-type", o.engine.kv_type);
  add_setting(app, engine_table, "simd-level", o.engine.simd_level);
  app.add_flag("--chat", o.chat, "interactive chat: user turns are read line by line from stdin");
  // `ember serve --system-prompt` under run's own spelling.
  add_setting(app, serve_settings_table(), "system-prompt", o.system, "--system",
              "system prompt for --chat (\"\": none)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!o.chat && o.prompt.empty()) {
    std::fprintf(stderr, "ember run: give --prompt TEXT, or --chat\n");
    return 2;
  }
  // Before the load: the weights are copied into the selected level's layout.
  if (auto st = tensor::select_simd_level(o.engine.simd_level); !st) {
    std::fprintf(stderr, "ember run: %s\n", st.message().c_str());
    return 2;
  }
  uint64_t seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
  // Before load(): the engine's threads must start with SIGINT blocked (chat_interrupt.h).
  std::optional<ChatInterrupts> interrupts;
  if (o.chat) interrupts.emplace();
  auto loaded = load(o);
  if (interrupts) interrupts->unblock_here();
  if (!loaded) {
    std::fprintf(stderr, "ember run: %s\n", loaded.message().c_str());
    return 1;
  }
  if (o.chat) return run_chat(*loaded, *interrupts, o, seed);
  auto ids = loaded->text->encode_prompt(o.prompt);
  std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);
  auto out = generate(*loaded, ids, o, seed);
  if (!out) {
    std::fprintf(stderr, "\nember run: %s\n", out.message().c_str());
    return 1;
  }
  print_summary(out->done);
  return 0;
}

}  // namespace ember::cli
