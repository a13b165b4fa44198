// The writer side of the request pipeline (docs/architecture.md, "The path of one request"):
// one ResponseWriter per wire format turns the events of a generation — start, text delta,
// tool call, finish (with the reason per choice, the usage, or the error) — into the bytes of
// that format. Writers do no I/O: the driver (server/generation.h) takes what they produced
// and writes it, so a writer is a plain object, unit-testable without a socket, and none of
// its JSON is built inside a coroutine (GCC 12 miscompiles some of that).
//
// A new wire format (a Responses or an Anthropic route) is a request parser that fills a
// GenerationJob plus one ResponseWriter; the submission, the disconnect watch and the text
// pipeline are shared.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/api_error.h"
#include "server/responses.h"
#include "server/server_impl.h"
#include "worker/types.h"

namespace ember::server {

// How one choice ended, in the engine's terms; each format names it its own way.
struct ChoiceEnd {
  worker::FinishReason reason = worker::FinishReason::Stop;
  bool stop_string = false;   // a stop string ended it
  bool tool_calls = false;    // it produced at least one tool call
  std::string stop_sequence;  // stop_string: which one
};

struct Finish {
  std::vector<ChoiceEnd> choices;  // by choice index
  worker::Usage usage;             // all choices together
  // The request was cancelled (not by a stop string) or failed: the answer ends with this.
  std::optional<ApiError> error;
};

class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;

  // Streaming: the head (content_type()) goes out before the first event, and every piece
  // the writer produces is sent as it comes. Otherwise finish() produces one whole reply.
  virtual bool streaming() const = 0;
  virtual const char* content_type() const { return "text/event-stream"; }

  // Once, first. `echo`: empty, or the text each choice starts with (completions `echo`).
  virtual void start(uint32_t n_choices, const std::vector<std::string>& echo) = 0;
  // Text of a choice, with its token's log-probability when they were asked for (a piece may
  // carry a log-probability and no text: the text is still held back).
  virtual void text(uint32_t choice, const std::string& content, const TokenLogprob* logprob) = 0;
  virtual void tool_call(uint32_t choice, const ToolCallOut& call) = 0;
  // Once, last.
  virtual void finish(const Finish& f) = 0;
  // The whole answer to a request that fails before anything was sent.
  virtual Reply error_reply(const ApiError& e) const { return server::error_reply(e); }

  // What to send now: streaming, the pieces produced since the last call, in order (each
  // one HTTP chunk); otherwise, after finish(), the reply.
  std::vector<std::string> take_pieces() { return std::exchange(pieces_, {}); }
  std::optional<Reply> take_reply() { return std::exchange(reply_, std::nullopt); }

 protected:
  std::vector<std::string> pieces_;
  std::optional<Reply> reply_;
};

}  // namespace ember::server
