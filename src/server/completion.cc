// POST /v1/chat/completions and /v1/completions: the OpenAI request parser and writers on
// the shared request pipeline (docs/architecture.md, "The path of one request"). This file
// validates, templates and tokenizes (prepare), picks the writer for the wire format
// (server/openai_writers.h), and hands both to the driver (server/generation.h), which
// submits, watches the client, runs each choice's text pipeline and writes the answer.
#include <algorithm>
#include <random>

#include <nlohmann/json.hpp>

#include "server/constraint.h"
#include "server/generation.h"
#include "server/openai_writers.h"
#include "server/server_impl.h"

namespace ember::server {
namespace {

using Clock = std::chrono::steady_clock;

std::string new_id(Endpoint e) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}", e == Endpoint::Chat ? "chatcmpl-" : "cmpl-", rng());
}

struct Prepared {
  GenerationJob job;
  ResponseContext ctx;
  bool stream = false;
};

// Everything before the engine, as a plain function: state checks, parsing, the model name,
// the chat template, tokenization and the output constraint. The context check has one
// owner, the engine (its submit error names both numbers).
// The caller counts the request in flight BEFORE calling: a drain that begins while the
// request is being templated then waits for it rather than missing it.
std::variant<Prepared, ApiError> prepare(Server::Impl& s, const Request& req, Endpoint endpoint) {
  Prepared p;
  auto model = s.current_model();
  // With --reuse-port a request that reaches a draining server came over a connection the
  // kernel gave it before the handover: serving it (then closing) fails nothing; refusing it
  // would fail a request no client can know to retry. Past the drain deadline nothing new runs.
  if (s.is_draining && (!s.opts.reuse_port || s.cut_off)) {
    return ApiError{ErrorKind::Draining, "the server is shutting down", {}};
  }
  if (!model) return ApiError{ErrorKind::NotReady, "the model is still loading", {}};
  auto parsed = parse_completion_request(req.body(), endpoint);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  CompletionRequest& r = std::get<CompletionRequest>(parsed);
  const auto& names = model->names;
  if (std::find(names.begin(), names.end(), r.model) == names.end()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "'" : ", '") + n + "'";
    return ApiError{ErrorKind::ModelNotFound,
                    fmt::format("model '{}' does not exist; this server serves {}", r.model, list),
                    "model"};
  }
  const text::TextCodec& text = *model->text;
  GenerationJob& job = p.job;
  SubmitSpec& sub = job.submit;
  if (endpoint == Endpoint::Chat) {
    const bool use_tools = !r.tools.is_null() && r.tool_choice != ToolChoice::None;
    bool tool_history = false;
    for (const Message& m : r.messages) {
      tool_history = tool_history || !m.tool_calls.empty() || m.role == "tool";
    }
    Result<std::vector<int32_t>> enc = fail("not encoded");
    if (use_tools || tool_history) {
      enc = text.encode_chat_with_tools(template_messages(r.messages),
                                        use_tools ? r.tools : nlohmann::ordered_json());
    } else {
      std::vector<text::ChatMessage> conv;
      conv.reserve(r.messages.size());
      for (const Message& m : r.messages) conv.push_back({m.role, m.content});
      enc = text.encode_chat(conv);
    }
    if (!enc) return ApiError{ErrorKind::InvalidRequest, enc.message(), "messages"};
    sub.prompts.push_back(std::move(*enc));
    job.parse_tools = use_tools;
    auto c = constraint_spec(r, text);
    if (auto* e = std::get_if<ApiError>(&c)) return *e;
    sub.constraint_spec = std::move(std::get<ConstraintSpec>(c));
    if (!sub.constraint_spec.spec.empty() && model->engine->builds_constraints()) {
      sub.constraint = worker::unbuilt_constraint(sub.constraint_spec.spec);
    }
  } else {
    sub.prompt_param = "prompt";
    for (const Prompt& pr : r.prompts) {
      sub.prompts.push_back(pr.is_tokens ? pr.tokens : text.encode_prompt(pr.text));
      if (r.echo) job.echo.push_back(pr.is_tokens ? text.decode(pr.tokens) : pr.text);
    }
  }
  for (const auto& prompt : sub.prompts) {
    if (prompt.empty()) {
      return ApiError{ErrorKind::InvalidRequest, "the prompt is empty", sub.prompt_param};
    }
  }
  job.model = std::move(model);
  sub.sampling = r.sampling;
  // No max_tokens: the server's cap (--max-tokens) bounds it; the engine clips either to the
  // context (one owner for that check).
  sub.max_tokens = r.max_tokens.value_or(s.opts.default_max_tokens);
  sub.n = r.n;
  job.seed_given = r.seed_given;
  job.stop = r.stop;
  job.logprobs = r.logprobs;
  p.stream = r.stream;
  p.ctx = ResponseContext{endpoint,
                          new_id(endpoint),
                          std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count(),
                          r.model,
                          r.include_usage,
                          r.legacy_functions};
  return p;
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
  Prepared& p = std::get<Prepared>(prepared);
  std::unique_ptr<ResponseWriter> writer =
      make_openai_writer(std::move(p.ctx), p.stream, p.job.logprobs);
  co_return co_await run_generation(s, c, req, route, t0, p.job, *writer);
}

}  // namespace ember::server
