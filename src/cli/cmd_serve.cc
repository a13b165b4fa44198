// `ember serve`: the OpenAI-compatible HTTP server (the front). The engine runs in
// a worker process (`--engine subprocess`, the default: `ember engine`, supervised and
// restarted by worker::SubprocessEngineClient) or in this process (`--engine in-process`).
// The listener comes up first and the model loads after, so /health answers "loading"
// meanwhile. Settings come from two tables (cli/serve_settings.h, worker/engine_settings.h).
// See docs/architecture.md, "Processes and shutdown".
//
// Signals: SIGINT/SIGTERM arrive through a self-pipe on a thread of their own, which outlives
// the HTTP threads: the first begins the drain; a second — at any moment, also while the
// server joins its threads or runs the worker's stop ladder — kills the worker's process group
// and exits at once (130 for SIGINT, 143 for SIGTERM). systemd: READY=1 once the model is
// loaded, STOPPING=1 on drain, WATCHDOG=1 while the engine makes progress, STATUS= lines.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include "base/log.h"
#include "cli/commands.h"
#include "cli/model_path.h"
#include "cli/serve_settings.h"
#include "cli/settings_cli.h"
#include "cli/stop_report.h"
#include "process/child.h"
#include "process/fd_limit.h"
#include "process/pid_file.h"
#include "process/sd_notify.h"
#include "process/signal_pipe.h"
#include "server/server.h"
#include "tensor/quant.h"
#include "text/text_codec.h"
#include "worker/engine_settings.h"
#include "worker/inprocess_client.h"
#include "worker/subprocess_client.h"

namespace ember::cli {
namespace {

using Ms = std::chrono::milliseconds;

// The engine client, reachable from the signal thread before and after the server has it.
struct EngineHolder {
  std::mutex mu;
  std::shared_ptr<worker::EngineClient> client;
  void set(std::shared_ptr<worker::EngineClient> c) {
    std::lock_guard lock(mu);
    client = std::move(c);
  }
  std::shared_ptr<worker::EngineClient> get() {
    std::lock_guard lock(mu);
    return client;
  }
};

Result<std::shared_ptr<worker::EngineClient>> start_engine(const ServeSettings& o,
                                                           const worker::EngineSettings& es,
                                                           const std::vector<int32_t>& eog,
                                                           EngineHolder& holder) {
  if (o.engine == "in-process") {
    EMBER_TRY(auto loaded, worker::load_model(es, eog));
    auto c = std::make_shared<worker::InProcessEngineClient>(loaded.backend, loaded.options);
    holder.set(c);
    return std::shared_ptr<worker::EngineClient>(c);
  }
  worker::SubprocessOptions so;
  // The very binary this front runs (even after it was replaced on disk): the worker must speak
  // the same protocol version, also when it is restarted hours later.
  so.argv = {"/proc/self/exe",           "engine",      "--parent-pid",
             std::to_string(::getpid()), "--log-level", o.log_level};
  for (const auto& f : o.test_worker_flags) so.argv.push_back(f);
  so.settings = worker::engine_settings_table().dump(es);
  so.eog_tokens = eog;
  set_supervision(o, so);
  auto c = worker::SubprocessEngineClient::start(std::move(so));
  holder.set(c);
  EMBER_TRY(auto info, c->wait_first_load(std::chrono::hours(1)));
  (void)info;
  return std::shared_ptr<worker::EngineClient>(c);
}

Result<std::shared_ptr<server::ServedModel>> load(const ServeSettings& o, worker::EngineSettings es,
                                                  EngineHolder& holder) {
  const std::string asked = es.model;  // a path, or a named model (cli/model_path.h)
  EMBER_TRY(es.model, resolve_model_path(es.model));
  EMBER_TRY(auto codec, worker::load_text_codec(es.model, o.system_prompt));
  EMBER_TRY(auto engine, start_engine(o, es, codec->eog_tokens(), holder));
  const worker::ModelInfo& info = engine->model_info();
  auto served = std::make_shared<server::ServedModel>();
  served->engine = engine;
  served->text = codec;
  if (!o.served_model_names.empty()) {
    served->names = o.served_model_names;
  } else {
    served->names.push_back(!info.name.empty() ? info.name
                                               : std::filesystem::path(es.model).stem().string());
  }
  // A model given by name (or the default) also answers to its name, e.g. smollm2-135m.
  if (const NamedModel* nm = find_named_model(asked);
      nm && es.model != asked && o.served_model_names.empty()) {
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

void notify(const process::SdNotifier& n, const std::string& state) {
  if (auto st = n.notify(state); !st) log::warn("ember: sd_notify: {}", st.message());
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  CLI::App app{"Serve a model over the OpenAI-compatible HTTP API", "ember serve"};
  ServeSettings o;
  worker::EngineSettings es;
  bind_settings(app, worker::engine_settings_table(), es);
  bind_settings(app, serve_settings_table(), o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!validate_or_report(serve_settings_table(), o, "ember serve") ||
      !validate_or_report(worker::engine_settings_table(), es, "ember serve")) {
    return 2;
  }
  if (o.engine != "subprocess" && o.engine != "in-process") {
    std::fprintf(stderr, "ember serve: --engine %s: expected 'subprocess' or 'in-process'\n",
                 o.engine.c_str());
    return 2;
  }
  // The worker checks it again where it loads; here a level this CPU lacks fails before the
  // server listens (the front runs on the same CPU).
  if (auto st = tensor::select_simd_level(es.simd_level); !st) {
    std::fprintf(stderr, "ember serve: %s\n", st.message().c_str());
    return 2;
  }
  log::init(o.log_level);
  log::info("ember serve: settings: {} {}", worker::engine_settings_table().describe(es),
            serve_settings_table().describe(o));
  std::signal(SIGPIPE, SIG_IGN);
  // Every connection is a descriptor: take all the open files the hard limit allows.
  if (auto fd = process::raise_fd_limit(); !fd.error.empty()) {
    log::warn("ember: open files limit stays at {}: cannot raise it to the hard limit {}: {}",
              fd.before, fd.hard, fd.error);
  } else if (fd.after != fd.before) {
    log::info("ember: open files limit raised from {} to {} (the hard limit)", fd.before, fd.after);
  } else {
    log::info("ember: open files limit {} (the hard limit)", fd.after);
  }
  // SIGUSR1: save the warm state now (`ember restart` hands it to the successor).
  auto sig = process::SignalPipe::install({SIGINT, SIGTERM, SIGUSR1});
  if (!sig) {
    std::fprintf(stderr, "ember serve: %s\n", sig.message().c_str());
    return 1;
  }
  process::PidFile pid_file;
  if (!o.pid_file.empty()) {
    std::error_code ec;
    std::filesystem::remove(stop_report_path(o.pid_file), ec);
    auto pf = process::PidFile::create(o.pid_file, static_cast<pid_t>(o.successor_of));
    if (!pf) {
      std::fprintf(stderr, "ember serve: %s\n", pf.message().c_str());
      return 1;
    }
    pid_file = std::move(*pf);
  }
  process::SdNotifier notifier(o.notify_socket);

  const server::ServerOptions so = server_options(o);
  server::Server srv(so);
  auto port = srv.listen();
  if (!port) {
    std::fprintf(stderr, "ember serve: %s\n", port.message().c_str());
    return 1;
  }
  if (auto st = pid_file.set_port(*port); !st) {
    log::warn(
        "ember: {}: cannot record the port ({}); ember restart will refuse a --port 0 "
        "server",
        o.pid_file, st.message());
  }
  srv.start();
  std::fprintf(stderr, "ember: listening on http://%s:%u%s%s\n", o.host.c_str(), unsigned{*port},
               so.web_ui ? "  (chat page at /)" : "",
               so.reuse_port ? "  (--reuse-port: connections taken once the model is loaded)" : "");
  std::fflush(stderr);
  notify(notifier, "STATUS=loading the model");

  EngineHolder holder;
  std::atomic<bool> quit{false};
  // Warm saves run here, not on the signal thread, which must stay free for a second signal.
  std::mutex save_mu;
  std::condition_variable save_cv;
  int saves_wanted = 0;
  std::thread saver([&] {
    std::unique_lock lock(save_mu);
    for (;;) {
      save_cv.wait(lock, [&] { return saves_wanted > 0 || quit.load(); });
      if (quit.load()) return;
      saves_wanted = 0;
      lock.unlock();
      engine::WarmReport rep;
      if (auto c = holder.get()) {
        rep = c->save_warm();
      } else {
        rep.message = "the model is not loaded yet";
      }
      if (rep.ok) {
        log::info("ember: SIGUSR1: warm state saved ({} blocks, {} bytes)", rep.blocks, rep.bytes);
      } else {
        log::warn("ember: SIGUSR1: warm state not saved: {}", rep.message);
      }
      if (!o.pid_file.empty()) {
        auto st = write_warm_report(warm_report_path(o.pid_file), rep);
        if (!st) log::warn("ember: warm report: {}", st.message());
      }
      lock.lock();
    }
  });
  std::thread signals([&] {
    int count = 0;
    const Ms watchdog = o.watchdog_usec > 0 ? Ms(o.watchdog_usec / 2000) : Ms(0);
    const Ms tick = watchdog.count() > 0 ? std::min(Ms(200), watchdog) : Ms(200);
    auto next_ping = std::chrono::steady_clock::now();
    while (!quit.load()) {
      auto s = (*sig)->wait(tick);
      if (watchdog.count() > 0 && std::chrono::steady_clock::now() >= next_ping) {
        next_ping = std::chrono::steady_clock::now() + watchdog;
        if (srv.healthy()) notify(notifier, "WATCHDOG=1");  // progress, not mere liveness
      }
      if (!s) continue;
      if (*s == SIGUSR1) {
        std::lock_guard lock(save_mu);
        ++saves_wanted;
        save_cv.notify_one();
        continue;
      }
      const char* name = *s == SIGINT ? "SIGINT" : "SIGTERM";
      if (++count == 1) {
        log::info("ember: {}: draining (a second signal exits at once)", name);
        notify(notifier, "STOPPING=1\nSTATUS=draining");
        srv.begin_drain();
        continue;
      }
      std::fprintf(stderr, "ember: second signal (%s): killing the engine and exiting now\n", name);
      std::fflush(stderr);
      if (auto c = holder.get()) c->kill_now();
      std::_Exit(*s == SIGINT ? 130 : 128 + *s);
    }
  });

  // The model loads while the listener already answers (/health: loading; completions: 503).
  std::thread loader([&] {
    auto loaded = load(o, es, holder);
    if (!loaded) {
      std::fprintf(stderr, "ember serve: %s\n", loaded.message().c_str());
      srv.set_load_failed(loaded.message());
      return;
    }
    srv.set_model(*loaded);
    std::fprintf(stderr, "ember: model loaded; ready (names: %s; engine: %s)\n",
                 fmt::format("{}", fmt::join((*loaded)->names, ", ")).c_str(), o.engine.c_str());
    std::fflush(stderr);
    notify(notifier, "READY=1\nSTATUS=serving");
  });
  int code = srv.wait();                     // drained; the engine shut down (the stop ladder ran)
  if (auto c = holder.get()) c->shutdown();  // a drain while the model was still loading
  loader.join();
  std::string engine_stop = holder.get() ? holder.get()->stop_description() : "never started";
  auto report = srv.drain_report();
  std::fprintf(stderr,
               "ember: stopped (exit %d): %d request(s) in flight at the drain, %d drained, "
               "%d cancelled; engine: %s\n",
               code, report.in_flight, report.in_flight - report.cancelled, report.cancelled,
               engine_stop.c_str());
  if (!o.pid_file.empty()) {
    auto st = write_stop_report(stop_report_path(o.pid_file),
                                {code, report.in_flight, report.cancelled, engine_stop});
    if (!st) log::warn("ember: stop report: {}", st.message());
  }
  {
    std::lock_guard lock(save_mu);
    quit = true;
    save_cv.notify_one();
  }
  saver.join();
  signals.join();
  return code;
}

}  // namespace ember::cli
