#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace ember::server {

ErrorInfo error_info(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidJson:
      return {400, "invalid_request_error", "invalid_json", 0};
    case ErrorKind::InvalidRequest:
      return {400, "invalid_request_error", nullptr, 0};
    case ErrorKind::InvalidType:
      return {400, "invalid_request_error", "invalid_type", 0};
    case ErrorKind::Unsupported:
      return {400, "invalid_request_error", "unsupported_parameter", 0};
    case ErrorKind::ContextTooLong:
      return {400, "invalid_request_error", "context_length_exceeded", 0};
    case ErrorKind::Unauthorized:
      return {401, "invalid_request_error", "invalid_api_key", 0};
    case ErrorKind::NotFound:
      return {404, "invalid_request_error", "not_found", 0};
    case ErrorKind::ModelNotFound:
      return {404, "invalid_request_error", "model_not_found", 0};
    case ErrorKind::MethodNotAllowed:
      return {405, "invalid_request_error", "method_not_allowed", 0};
    case ErrorKind::BodyTooLarge:
      return {413, "invalid_request_error", "request_too_large", 0};
    case ErrorKind::Overloaded:
      return {429, "rate_limit_error", "overloaded", 1};
    case ErrorKind::Internal:
      return {500, "server_error", "internal_error", 0};
    case ErrorKind::NotReady:
      return {503, "server_error", "model_loading", 5};
    case ErrorKind::Draining:
      return {503, "server_error", "shutting_down", 5};
    case ErrorKind::EngineRestarting:
      return {503, "server_error", "engine_restarting", 1};
    case ErrorKind::Timeout:
      return {408, "invalid_request_error", "request_timeout", 0};
    case ErrorKind::NotImplemented:
      return {501, "invalid_request_error", "not_implemented", 0};
  }
  return {500, "server_error", "internal_error", 0};
}

std::string error_body(const ApiError& e) {
  ErrorInfo info = error_info(e.kind);
  nlohmann::json j;
  j["error"]["message"] = e.message;
  j["error"]["type"] = info.type;
  j["error"]["param"] = e.param ? nlohmann::json(*e.param) : nlohmann::json(nullptr);
  j["error"]["code"] = info.code ? nlohmann::json(info.code) : nlohmann::json(nullptr);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ApiError from_submit_error(const worker::SubmitError& e) {
  using K = worker::SubmitError::Kind;
  switch (e.kind) {
    case K::Overloaded:
      return {ErrorKind::Overloaded, "server overloaded: " + e.message, {}};
    case K::PromptTooLong:
      return {ErrorKind::ContextTooLong, e.message, "messages"};
    case K::InvalidRequest:
      return {ErrorKind::InvalidRequest, e.message, {}};
    case K::ShuttingDown:
      return {ErrorKind::Draining, "server is shutting down: " + e.message, {}};
    case K::EngineUnavailable:
      return {ErrorKind::EngineRestarting, e.message, {}};
    case K::BadConstraint:  // submission.cc names the parameter (constraint_error)
      return {ErrorKind::Unsupported, e.message, {}};
  }
  return {ErrorKind::Internal, e.message, {}};
}

}  // namespace ember::server
