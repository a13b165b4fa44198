#include "server/prepare.h"

#include <algorithm>

#include "server/constraint.h"

namespace ember::server {

namespace {

std::variant<std::shared_ptr<ServedModel>, ApiError> model_for_new_work(Server::Impl& s) {
  auto model = s.current_model();
  // With --reuse-port a request that reaches a draining server came over a connection the
  // kernel gave it before the handover: serving it (then closing) fails nothing; refusing it
  // would fail a request no client can know to retry. Past the drain deadline nothing new runs.
  if (s.is_draining && (!s.opts.reuse_port || s.cut_off)) {
    return ApiError{ErrorKind::Draining, "the server is shutting down", {}};
  }
  if (!model) return ApiError{ErrorKind::NotReady, "the model is still loading", {}};
  return model;
}

std::variant<GenerationJob, ApiError> prepare_job(Server::Impl& s,
                                                  std::shared_ptr<ServedModel> model,
                                                  const CompletionRequest& r) {
  const auto& names = model->names;
  if (std::find(names.begin(), names.end(), r.model) == names.end()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "'" : ", '") + n + "'";
    return ApiError{ErrorKind::ModelNotFound,
                    fmt::format("model '{}' does not exist; this server serves {}", r.model, list),
                    "model"};
  }
  const text::TextCodec& text = *model->text;
  GenerationJob job;
  SubmitSpec& sub = job.submit;
  if (r.endpoint == Endpoint::Chat) {
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
  return job;
}

}  // namespace

std::variant<Prepared, ApiError> prepare_request(Server::Impl& s, std::string_view body,
                                                 const RequestParser& parse) {
  auto model = model_for_new_work(s);
  if (auto* e = std::get_if<ApiError>(&model)) return *e;
  auto parsed = parse(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  Prepared p{std::move(std::get<CompletionRequest>(parsed)), {}};
  auto job = prepare_job(s, std::get<std::shared_ptr<ServedModel>>(std::move(model)), p.request);
  if (auto* e = std::get_if<ApiError>(&job)) return *e;
  p.job = std::move(std::get<GenerationJob>(job));
  return p;
}

}  // namespace ember::server
