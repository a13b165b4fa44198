// `ember serve`: the OpenAI-compatible HTTP server with the engine in this process (the
// subprocess engine is a later step). The listener comes up first and the model loads after,
// so /health answers "loading" meanwhile. The CLI11 declarations below are the settings table:
// flag, environment variable, default and help for each option.
#include <CLI/CLI.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "base/log.h"
#include "cli/commands.h"
#include "cli/model_path.h"
#include "engine/engine.h"
#include "gguf/reader.h"
#include "model/backend.h"
#include "server/server.h"
#include "text/text_codec.h"
#include "text/tokenizer.h"
#include "worker/inprocess_client.h"

namespace ember::cli {
namespace {

struct ServeOptions {
  std::string model = "default";
  std::string host = "127.0.0.1";
  int port = 8080;
  int threads = 0;
  int ctx_size = 0;
  int max_sequences = 8;
  int max_queued = 64;
  double drain_timeout_s = 30;
  std::string api_key;
  std::vector<std::string> served_model_names;
  int64_t max_body_bytes = 4 << 20;
  double header_timeout_s = 10;
  double body_timeout_s = 30;
  double write_timeout_s = 30;
  int io_threads = 2;
  double stall_limit_s = 60;
  std::string log_level = "info";
  std::vector<std::string> cors_origins;
  std::string system_prompt = text::kDefaultSystemPrompt;
  int max_tokens = 4096;
  bool no_web_ui = false;
  bool reuse_port = false;
  double handover_s = 1.0;
  int64_t kv_cache_bytes = int64_t{512} << 20;
  std::string warm_cache_dir;
  int64_t warm_cache_bytes = int64_t{256} << 20;
};

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

Result<std::shared_ptr<server::ServedModel>> load_model(const ServeOptions& o) {
  EMBER_TRY(std::string path, resolve_model_path(o.model));
  EMBER_TRY(gguf::File file, gguf::File::open(path));
  auto shared = std::make_shared<const gguf::File>(std::move(file));
  EMBER_TRY(text::Vocab vocab, text::load_vocab(*shared));
  EMBER_TRY(auto tok, text::Tokenizer::create(std::move(vocab)));
  std::shared_ptr<const text::Tokenizer> tokenizer(std::move(tok));
  model::LoadOptions lo;
  lo.n_threads = o.threads;
  lo.n_ctx = o.ctx_size;
  EMBER_TRY(auto backend, model::load_cpu_model(shared, lo));
  const model::ModelConfig cfg = backend->config();
  EMBER_TRY(auto codec, text::TextCodec::create(tokenizer, {cfg.arch_name, o.system_prompt}));

  engine::EngineOptions eo;
  eo.max_sequences = o.max_sequences;
  eo.max_queued = o.max_queued;
  eo.eog_tokens = codec->eog_tokens();
  eo.prefix_cache_bytes = o.kv_cache_bytes;
  eo.warm.dir = o.warm_cache_dir;
  eo.warm.max_bytes = o.warm_cache_bytes;
  auto served = std::make_shared<server::ServedModel>();
  served->engine = std::make_shared<worker::InProcessEngineClient>(
      std::shared_ptr<model::Backend>(std::move(backend)), eo);
  served->text = std::shared_ptr<const text::TextCodec>(std::move(codec));
  if (!o.served_model_names.empty()) {
    served->names = o.served_model_names;
  } else {
    served->names.push_back(!cfg.name.empty() ? cfg.name
                                              : std::filesystem::path(path).stem().string());
  }
  // A model given by name (or the default) also answers to its name, e.g. smollm2-135m.
  if (const NamedModel* nm = find_named_model(o.model);
      nm && path != o.model && o.served_model_names.empty()) {
    served->names.insert(served->names.begin(), nm->name);
  }
  if (std::find(served->names.begin(), served->names.end(), "default") == served->names.end()) {
    served->names.push_back("default");
  }
  served->created = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  return served;
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  CLI::App app{"Serve a model over the OpenAI-compatible HTTP API", "ember serve"};
  ServeOptions o;
  app.add_option("-m,--model", o.model, "GGUF file, or a model name (ember models lists them)")
      ->envname("EMBER_MODEL")
      ->capture_default_str();
  app.add_option("--host", o.host, "address to listen on")
      ->envname("EMBER_HOST")
      ->capture_default_str();
  app.add_option("--port", o.port, "TCP port (0: an ephemeral port, printed at start)")
      ->envname("EMBER_PORT")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("-t,--threads", o.threads, "compute threads (0: all cores)")
      ->envname("EMBER_THREADS")
      ->capture_default_str();
  app.add_option("-c,--ctx-size", o.ctx_size, "context size (0: min(model's, 4096))")
      ->envname("EMBER_CTX_SIZE")
      ->capture_default_str();
  app.add_option("--max-sequences", o.max_sequences, "sequences decoded together at most")
      ->envname("EMBER_MAX_SEQUENCES")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--max-queued", o.max_queued,
                 "requests waiting for admission at most; beyond: 429 with Retry-After")
      ->envname("EMBER_MAX_QUEUED")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  app.add_option("--drain-timeout", o.drain_timeout_s,
                 "seconds in-flight requests may keep running after SIGTERM/SIGINT")
      ->envname("EMBER_DRAIN_TIMEOUT")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--api-key", o.api_key, "require 'Authorization: Bearer KEY' on /v1 routes")
      ->envname("EMBER_API_KEY");
  app.add_option("--served-model-name", o.served_model_names,
                 "model names clients may ask for (default: the GGUF's general.name); "
                 "'default' is always accepted")
      ->envname("EMBER_SERVED_MODEL_NAME");
  app.add_option("--max-body-bytes", o.max_body_bytes, "largest request body; beyond: 413")
      ->envname("EMBER_MAX_BODY_BYTES")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 32))
      ->capture_default_str();
  app.add_option("--header-timeout", o.header_timeout_s,
                 "seconds to receive a whole request head (defeats slow-loris clients)")
      ->envname("EMBER_HEADER_TIMEOUT")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--body-timeout", o.body_timeout_s, "seconds to receive a whole request body")
      ->envname("EMBER_BODY_TIMEOUT")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--write-timeout", o.write_timeout_s,
                 "seconds one write of an answer may take; a client that stops reading is "
                 "cancelled as a slow consumer")
      ->envname("EMBER_WRITE_TIMEOUT")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--io-threads", o.io_threads, "HTTP threads")
      ->envname("EMBER_IO_THREADS")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--stall-limit", o.stall_limit_s,
                 "seconds the engine may make no progress with work pending before /health "
                 "reports unhealthy")
      ->envname("EMBER_STALL_LIMIT")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--cors-origins", o.cors_origins,
                 "origins browsers may call from (CORS), e.g. https://app.example; '*': any; "
                 "default: none")
      ->envname("EMBER_CORS_ORIGINS")
      ->delimiter(',');
  app.add_option("--system-prompt", o.system_prompt,
                 "system prompt for chats that bring none (\"\": none)")
      ->envname("EMBER_SYSTEM_PROMPT")
      ->capture_default_str();
  app.add_option("--max-tokens", o.max_tokens,
                 "most tokens generated for a request that sets no max_tokens (the context "
                 "bounds every request)")
      ->envname("EMBER_MAX_TOKENS")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  app.add_flag("--no-web-ui", o.no_web_ui, "do not serve the chat page at /")
      ->envname("EMBER_NO_WEB_UI");
  app.add_flag("--reuse-port", o.reuse_port,
               "share the port with a successor (SO_REUSEPORT; `ember restart`): listen once "
               "the model is loaded, hand new connections over at drain")
      ->envname("EMBER_REUSE_PORT");
  app.add_option("--handover", o.handover_s,
                 "seconds a draining --reuse-port server still takes connections queued to it")
      ->envname("EMBER_HANDOVER_S")
      ->check(CLI::Range(0.0, 60.0))
      ->capture_default_str();
  app.add_option("--kv-cache-bytes", o.kv_cache_bytes,
                 "KV bytes the prefix cache keeps for reuse by later requests (0: no cache)")
      ->envname("EMBER_KV_CACHE_BYTES")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--warm-cache-dir", o.warm_cache_dir,
                 "directory for the warm-state file: the hottest cached KV is saved there on "
                 "graceful exit and loaded at start (empty: off)")
      ->envname("EMBER_WARM_CACHE_DIR");
  app.add_option("--warm-cache-bytes", o.warm_cache_bytes,
                 "KV bytes written to the warm-state file at most")
      ->envname("EMBER_WARM_CACHE_BYTES")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--log-level", o.log_level, "trace, debug, info, warn, error or off")
      ->envname("EMBER_LOG_LEVEL")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  log::init(o.log_level);
  std::signal(SIGPIPE, SIG_IGN);

  server::ServerOptions so;
  so.host = o.host;
  so.port = static_cast<uint16_t>(o.port);
  so.io_threads = o.io_threads;
  so.api_key = o.api_key;
  so.max_body_bytes = static_cast<size_t>(o.max_body_bytes);
  so.header_timeout = ms(o.header_timeout_s);
  so.body_timeout = ms(o.body_timeout_s);
  so.write_timeout = ms(o.write_timeout_s);
  so.drain_timeout = ms(o.drain_timeout_s);
  so.stall_limit = ms(o.stall_limit_s);
  so.cors_origins = o.cors_origins;
  so.default_max_tokens = o.max_tokens;
  so.web_ui = !o.no_web_ui;
  so.reuse_port = o.reuse_port;
  so.handover = ms(o.handover_s);
  server::Server srv(so);
  auto port = srv.listen();
  if (!port) {
    std::fprintf(stderr, "ember serve: %s\n", port.message().c_str());
    return 1;
  }
  srv.start();
  std::fprintf(stderr, "ember: listening on http://%s:%u%s%s\n", o.host.c_str(), unsigned{*port},
               so.web_ui ? "  (chat page at /)" : "",
               so.reuse_port ? "  (--reuse-port: connections taken once the model is loaded)" : "");
  std::fflush(stderr);

  // The model loads while the listener already answers (/health: loading; completions: 503).
  std::thread loader([&] {
    auto loaded = load_model(o);
    if (!loaded) {
      std::fprintf(stderr, "ember serve: %s\n", loaded.message().c_str());
      srv.set_load_failed(loaded.message());
      return;
    }
    srv.set_model(*loaded);
    std::fprintf(stderr, "ember: model loaded; ready (names: %s)\n",
                 fmt::format("{}", fmt::join((*loaded)->names, ", ")).c_str());
    std::fflush(stderr);
  });
  int code = srv.wait();
  loader.join();
  std::fprintf(stderr, "ember: stopped (exit %d)\n", code);
  return code;
}

}  // namespace ember::cli
