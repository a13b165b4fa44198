// Fuzz target: the OpenAI request parser. The first byte picks the endpoint; the rest is the
// body. Any input parses or yields an ApiError; no exception escapes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  auto endpoint = data[0] & 1 ? ember::server::Endpoint::Chat : ember::server::Endpoint::Completion;
  std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto r = ember::server::parse_completion_request(body, endpoint);
  if (auto* c = std::get_if<ember::server::CompletionRequest>(&r)) {
    if (c->max_tokens && *c->max_tokens < 1) __builtin_trap();  // validated: at least 1
  }
  return 0;
}
