// The driver of one generation, whatever the route and wire format: the submission
// (server/submission.h) takes the job to the engine and watches the client; every choice's
// tokens go through its text pipeline (server/choice_pipeline.h) into the route's writer
// (server/response_writer.h), and what the writer produces is written as it comes (streaming)
// or once at the end. It also keeps the books: token counts, latencies, cancellations.
// A route is a request parser that fills a GenerationJob, plus a writer.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "server/response_writer.h"
#include "server/server_impl.h"
#include "server/submission.h"

namespace ember::server {

struct GenerationJob {
  std::shared_ptr<ServedModel> model;
  SubmitSpec submit;
  bool seed_given = false;  // false: a fresh seed is drawn for this request
  std::vector<std::string> stop;
  bool parse_tools = false;
  bool logprobs = false;
  std::vector<std::string> echo;  // empty, or the text each prompt's choices start with
};

// Keeps the in-flight count honest on every exit path. Count a request BEFORE it is parsed
// and templated: a drain that begins meanwhile then waits for it rather than missing it.
// Which requests the engine is running is the EngineClient's bookkeeping (the drain deadline
// asks it to cancel them all).
struct InFlight {
  Server::Impl& s;
  explicit InFlight(Server::Impl& srv) : s(srv) { s.in_flight++; }
  ~InFlight() { s.in_flight--; }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
};

// Runs the job and answers on `c` in the writer's format; returns whether the connection may
// carry another request. `t0`: when the request arrived (request duration, time to first
// token). Pass named values only (GCC 12 coroutine bug, see session.cc).
asio::awaitable<bool> run_generation(Server::Impl& s, std::shared_ptr<Conn> c, const Request& req,
                                     std::string_view route,
                                     std::chrono::steady_clock::time_point t0, GenerationJob& job,
                                     ResponseWriter& writer);

}  // namespace ember::server
