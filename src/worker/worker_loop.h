// The worker main loop (`ember engine`): the engine behind the worker protocol.
// Frames come in on `in_fd` (stdin), events go out on `out_fd` (stdout), logs go to stderr.
// See docs/architecture.md, "Worker protocol".
//
// Lifecycle: the first frame must be Configure (engine settings); the worker loads the model
// and answers Hello (or LoadFailed, then exits 1). It then accepts Submit/Cancel until it
// drains: EOF on stdin, a Stop frame or the first SIGTERM. Draining accepts nothing new
// (Submit → Rejected shutting_down), lets in-flight requests finish, destroys the engine (which
// saves the warm state when --warm-cache-dir is set), flushes and exits 0. A second SIGTERM exits
// at once (143). When the parent that started it is gone the worker exits at once (1): nobody is
// left to read its answers.
//
// Threads: the loop thread reads stdin and signals (poll on both: a signal is never lost in a
// restarted read); the engine thread computes; one writer thread owns stdout, so frames never
// interleave — control frames first, then each ready request's events, then a Stats frame at
// most every 100 ms. The engine thread only sets wake-up flags (it never blocks on stdout).
#pragma once

#include <sys/types.h>

#include <functional>

#include "base/result.h"
#include "worker/engine_settings.h"

namespace ember::process {
class SignalPipe;
}

namespace ember::worker {

struct WorkerOptions {
  int in_fd = 0;
  int out_fd = 1;
  pid_t parent_pid = 0;     // 0: no parent check
  bool ignore_eof = false;  // test only: EOF on stdin does not start the drain
  // Loads the model for a Configure frame (tests inject a fake engine's backend).
  std::function<Result<LoadedModel>(const EngineSettings&, std::vector<int32_t>)> load = load_model;
  // Loads the text codec that rebuilds output constraints from Submit specs; a failure only
  // makes constrained requests fail (InvalidRequest).
  std::function<Result<std::shared_ptr<const text::TextCodec>>(const EngineSettings&)> load_text =
      [](const EngineSettings& s) { return load_text_codec(s.model, ""); };
};

// Returns the process exit code. `signals` delivers SIGTERM (and SIGINT); may be null.
int run_worker(const WorkerOptions& opts, process::SignalPipe* signals);

}  // namespace ember::worker
