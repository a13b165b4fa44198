// Tool calls in a model's own words: which format a chat template uses, the parser that turns
// generated text back into calls (streaming, one piece of text at a time), and the grammar that
// forces a well-formed call (tool_choice "required" or a named function).
//
// Formats: Hermes (Qwen 2.5/3, Hermes, and ember's built-in ChatML tool template):
// `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, several in a row; Llama 3.x:
// a bare JSON object `{"name": ..., "parameters": {...}}` (optionally after <|python_tag|>) as the
// whole answer; Mistral: `[TOOL_CALLS]` then a JSON array of {"name", "arguments"}.
//
// Invariants: the parser never fails. Text that is not a well-formed call (bad JSON, no name,
// an unclosed tag) comes back as content, byte for byte; content before a call streams as it
// is generated, holding back only what could be the start of a call marker.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "text/grammar.h"

namespace ember::text {

enum class ToolFormat { Hermes, Llama3, Mistral };

// The format a chat template's tool support speaks (Hermes for templates that have none: ember
// then renders tools with its built-in ChatML template, which uses Hermes calls).
ToolFormat tool_format_for_template(std::string_view source);
std::string_view tool_format_name(ToolFormat f);
// Whether a template renders `tools` at all.
bool template_renders_tools(std::string_view source);
// ember's ChatML template with Hermes-style tools, for ChatML models whose template has none.
const std::string& chatml_tool_template();

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as compact text
};

class ToolCallParser {
 public:
  explicit ToolCallParser(ToolFormat f) : format_(f) {}
  struct Out {
    std::string content;          // safe to show now
    std::vector<ToolCall> calls;  // completed calls, in order
  };
  Out push(std::string_view text);
  Out finish();  // end of generation: whatever is held back, as calls or as content

 private:
  Out run(bool at_end);
  void hermes(Out& out, bool at_end);
  void whole_answer(Out& out, bool at_end);
  ToolFormat format_;
  std::string buf_;       // text not yet emitted
  bool decided_ = false;  // Llama3/Mistral: whether the answer is a call was decided
  bool whole_is_call_ = false;
  bool after_call_ = false;  // Hermes: a call just ended; whitespace is held, not content
};

// Parses `{"name": ..., "arguments"|"parameters": {...}}` into a call; false if it is not one.
bool parse_call_object(const nlohmann::ordered_json& j, ToolCall* out);

struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON schema; null or empty: any object
};

// A grammar for exactly one call, in format `f`, of one of `tools`. Errors: a parameter schema
// the grammar does not support (naming the function and the feature).
Result<Grammar> tool_call_grammar(ToolFormat f, const std::vector<ToolSpec>& tools);

}  // namespace ember::text
