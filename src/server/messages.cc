// POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages request parser
// (server/anthropic_request.h) and writers (server/anthropic_writers.h) on the shared request
// pipeline (docs/architecture.md, "The path of one request"): the parsed request is prepared
// like any chat request (server/prepare.h) and run by the driver (server/generation.h).
#include <random>

#include "server/anthropic_request.h"
#include "server/anthropic_writers.h"
#include "server/prepare.h"
#include "server/sse.h"

namespace ember::server {
namespace {

std::string new_message_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("msg_{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
}

// The request prepared (server/prepare.h) with the Anthropic writer of its format.
std::variant<RoutedJob, ApiError> prepare(Server::Impl& s, const Request& req,
                                          MessagesRoute route) {
  auto parse = [route](std::string_view body) { return parse_messages_request(body, route); };
  auto prepared = prepare_request(s, req.body(), parse);
  if (auto* e = std::get_if<ApiError>(&prepared)) return *e;
  auto& [r, job] = std::get<Prepared>(prepared);
  MessagesContext ctx{new_message_id(), r.model,
                      static_cast<int32_t>(job.submit.prompts.at(0).size())};
  auto writer = make_anthropic_writer(std::move(ctx), r.stream);
  return RoutedJob{std::move(job), std::move(writer)};
}

// count_tokens' answer, built outside the coroutine (see the note below).
Reply count_reply(const GenerationJob& job) {
  const auto n = static_cast<int32_t>(job.submit.prompts.at(0).size());
  return {
      http::status::ok, "application/json", dump_json(nlohmann::json{{"input_tokens", n}}), 0, {}};
}

}  // namespace

// Note: no temporaries with destructors inside co_await expressions (GCC 12 may destroy them
// twice); answers are built into named values first.
asio::awaitable<bool> handle_messages(Server::Impl& s, std::shared_ptr<Conn> c, const Request& req,
                                      bool count_tokens, std::string_view route) {
  const auto t0 = std::chrono::steady_clock::now();
  InFlight in_flight(s);
  auto prepared =
      prepare(s, req, count_tokens ? MessagesRoute::CountTokens : MessagesRoute::Create);
  if (auto* e = std::get_if<ApiError>(&prepared)) {
    Reply reply = anthropic_error_reply(*e);
    co_return co_await send_reply(s, *c, req, route, reply);
  }
  RoutedJob& p = std::get<RoutedJob>(prepared);
  if (count_tokens) {
    Reply reply = count_reply(p.job);
    co_return co_await send_reply(s, *c, req, route, reply);
  }
  co_return co_await run_generation(s, c, req, route, t0, p.job, *p.writer);
}

}  // namespace ember::server
