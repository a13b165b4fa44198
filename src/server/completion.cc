// POST /v1/chat/completions and /v1/completions: the OpenAI request parser and writers on
// the shared request pipeline (docs/architecture.md, "The path of one request"). This file
// parses the OpenAI body, has it templated and tokenized (server/prepare.h), picks the writer for
// the wire format (server/openai_writers.h), and hands both to the driver (server/generation.h),
// which submits, watches the client, runs each choice's text pipeline and writes the answer.
#include <random>

#include <nlohmann/json.hpp>

#include "server/openai_writers.h"
#include "server/prepare.h"

namespace ember::server {
namespace {

using Clock = std::chrono::steady_clock;

std::string new_id(Endpoint e) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}", e == Endpoint::Chat ? "chatcmpl-" : "cmpl-", rng());
}

// The request prepared (server/prepare.h) with the OpenAI writer of its format.
std::variant<RoutedJob, ApiError> prepare(Server::Impl& s, const Request& req, Endpoint endpoint) {
  auto parse = [endpoint](std::string_view body) {
    return parse_completion_request(body, endpoint);
  };
  auto prepared = prepare_request(s, req.body(), parse);
  if (auto* e = std::get_if<ApiError>(&prepared)) return *e;
  auto& [r, job] = std::get<Prepared>(prepared);
  ResponseContext ctx{endpoint,
                      new_id(endpoint),
                      std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count(),
                      r.model,
                      r.include_usage,
                      r.legacy_functions};
  auto writer = make_openai_writer(std::move(ctx), r.stream, job.logprobs);
  return RoutedJob{std::move(job), std::move(writer)};
}

}  // namespace

// Note: no temporaries with destructors inside co_await expressions (GCC 12 may destroy them
// twice); answers are built into named values first.
asio::awaitable<bool> handle_completion(Server::Impl& s, std::shared_ptr<Conn> c,
                                        const Request& req, Endpoint endpoint,
                                        std::string_view route) {
  const auto t0 = Clock::now();
  InFlight in_flight(s);
  auto prepared = prepare(s, req, endpoint);
  if (auto* e = std::get_if<ApiError>(&prepared)) {
    Reply reply = error_reply(*e);
    co_return co_await send_reply(s, *c, req, route, reply);
  }
  RoutedJob& p = std::get<RoutedJob>(prepared);
  co_return co_await run_generation(s, c, req, route, t0, p.job, *p.writer);
}

}  // namespace ember::server
