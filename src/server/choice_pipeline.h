// The per-choice text pipeline: the generated token ids of one choice become what a client is
// shown, through the incremental detokenizer, the stop strings (server/stop_matcher.h) and,
// when tools are on, the tool-call parser (text/tool_calls.h). No I/O and no wire format:
// the driver (server/generation.h) feeds it the engine's tokens and hands what comes out to
// the response writer (server/response_writer.h). One per choice; a stop string ends only its
// own choice.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/responses.h"
#include "server/stop_matcher.h"
#include "text/text_codec.h"
#include "worker/types.h"

namespace ember::server {

class ChoicePipeline {
 public:
  ChoicePipeline(const text::TextCodec& text, std::vector<std::string> stops, bool parse_tools,
                 bool logprobs);

  struct Out {
    std::string content;                  // text to show now (may be empty)
    std::vector<ToolCallOut> calls;       // tool calls this piece completed, in order
    std::optional<TokenLogprob> logprob;  // the token's, when log-probabilities were asked for
    bool stopped = false;                 // a stop string completed here: end this choice
  };
  // One generated token. After a stop string, nothing: the engine is still finishing the step
  // it was in when the choice was stopped.
  Out push(const worker::TokenEvent& t);
  // The end of generation: whatever the detokenizer, the stop matcher and the tool-call parser
  // still hold.
  Out finish();

  bool stopped_by_string() const { return stopped_; }
  const std::string& stop_string() const { return stop_.matched(); }
  bool made_tool_calls() const { return calls_ > 0; }

 private:
  Out emit(std::string_view piece, bool at_end);

  const text::TextCodec& text_;
  text::IncrementalDetokenizer detok_;
  StopMatcher stop_;
  std::optional<text::ToolCallParser> tools_;
  bool logprobs_;
  bool stopped_ = false;
  size_t calls_ = 0;
};

}  // namespace ember::server
