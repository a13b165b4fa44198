// Everything between a parsed chat or completion request and the engine, shared by every
// route that generates (OpenAI chat and completions in completion.cc, Anthropic Messages in
// messages.cc): the server's state checks, the model name, the chat template with or without
// tools, tokenization, the output constraint and the sampling settings, as a GenerationJob.
// Each route keeps its own parser and writer; this is the one place a request becomes a job.
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <variant>

#include "server/generation.h"
#include "server/openai_request.h"
#include "server/server_impl.h"

namespace ember::server {

// A route's body parser: JSON to the request every route is prepared from.
using RequestParser = std::function<std::variant<CompletionRequest, ApiError>(std::string_view)>;

struct Prepared {
  CompletionRequest request;
  GenerationJob job;
};

// The server's state checks first (past the drain deadline, or the model still loading: 503),
// then `parse(body)`, then the job for the request. Errors: the parser's, a model name the
// server does not serve (404), a template or schema it cannot take (400), an empty prompt
// (400). The context check has one owner, the engine (its submit error names both numbers).
// The caller counts the request in flight BEFORE calling: a drain that begins while the
// request is being templated then waits for it rather than missing it.
std::variant<Prepared, ApiError> prepare_request(Server::Impl& s, std::string_view body,
                                                 const RequestParser& parse);

// What run_generation takes: the job and the writer of the route's wire format.
struct RoutedJob {
  GenerationJob job;
  std::unique_ptr<ResponseWriter> writer;
};

}  // namespace ember::server
