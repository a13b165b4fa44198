// OpenAI-style API errors. Every error the HTTP layer can answer is an ApiError built from an
// ErrorKind; the kind -> (HTTP status, error type, code) table lives in ONE place
// (api_error.cc), so a route never picks a status by itself.
// Body shape: {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}.
#pragma once

#include <optional>
#include <string>

#include "worker/types.h"

namespace ember::server {

enum class ErrorKind {
  InvalidJson,       // 400: body is not JSON
  InvalidRequest,    // 400: missing or empty field, bad value
  InvalidType,       // 400: a field of the wrong JSON type (code invalid_type)
  Unsupported,       // 400: a known OpenAI parameter ember does not support yet (n > 1, tools)
  ContextTooLong,    // 400: prompt (+ max_tokens) longer than the context
  Unauthorized,      // 401: wrong or missing API key
  NotFound,          // 404: unknown route
  ModelNotFound,     // 404: model is not one of the served names
  MethodNotAllowed,  // 405
  BodyTooLarge,      // 413
  Overloaded,        // 429 + Retry-After
  Internal,          // 500
  NotReady,          // 503 + Retry-After: model still loading
  Draining,          // 503 + Retry-After: shutting down, or cut off by the drain deadline
  EngineRestarting,  // 503 + Retry-After: the engine worker died and is being restarted
  Timeout,           // 408: request header/body not received in time
  NotImplemented,    // 501: a transfer coding ember does not decode (http_framing.h)
};

struct ApiError {
  ErrorKind kind = ErrorKind::InvalidRequest;
  std::string message;
  std::optional<std::string> param;  // the offending request field, e.g. "messages"
};

struct ErrorInfo {
  int status;
  const char* type;
  const char* code;   // nullptr: JSON null
  int retry_after_s;  // 0: no Retry-After header
};

// The single kind -> status/type/code table.
ErrorInfo error_info(ErrorKind kind);

// The JSON body, e.g. {"error":{"message":"...","type":"invalid_request_error",...}}.
std::string error_body(const ApiError& e);

// An engine submit failure in API terms.
ApiError from_submit_error(const worker::SubmitError& e);

}  // namespace ember::server
