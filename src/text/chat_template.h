// Chat templates: turning a conversation into the prompt text a model was trained on, by
// rendering the model's `tokenizer.chat_template` (Jinja2) with ember's own interpreter of the
// subset real templates use (text/jinja/). The context matches Hugging Face's
// apply_chat_template: messages, add_generation_prompt, bos_token, eos_token, tools=None,
// documents=None, plus raise_exception() and strftime_now().
// Invariants: parse() validates the whole template at load time (an unsupported filter, test,
// statement or method is an error naming it and its line, never a silently wrong prompt);
// a parsed ChatTemplate is immutable and safe to render from several threads at once.
#pragma once

#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace ember::text {

namespace jinja {
class Template;
}

struct ChatMessage {
  std::string role, content;
};

struct ChatRenderOptions {
  // The date strftime_now() reports (Llama 3.2 prints "Today Date"); unset: the local clock.
  std::optional<std::tm> now;
  // Extra template variables, e.g. {"enable_thinking": false} for Qwen3. Must be an object.
  nlohmann::ordered_json extra_context = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  static Result<ChatTemplate> parse(std::string source);

  Result<std::string> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                             const std::string& bos_token, const std::string& eos_token) const;
  Result<std::string> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                             const std::string& bos_token, const std::string& eos_token,
                             const ChatRenderOptions& options) const;
  // Renders against a full context object (messages with any JSON content, tools, ...), for
  // callers that need more than role/content pairs. strftime_now() formats `now` (or the clock).
  Result<std::string> render_context(const nlohmann::ordered_json& context,
                                     const std::optional<std::tm>& now) const;

  const std::string& source() const { return source_; }

  // The context Hugging Face's apply_chat_template passes (documents = None).
  static nlohmann::ordered_json make_context(nlohmann::ordered_json messages,
                                             nlohmann::ordered_json tools,
                                             bool add_generation_prompt,
                                             const std::string& bos_token,
                                             const std::string& eos_token);

 private:
  ChatTemplate(std::string source, std::shared_ptr<const jinja::Template> t)
      : source_(std::move(source)), template_(std::move(t)) {}
  std::string source_;
  std::shared_ptr<const jinja::Template> template_;
};

// Official chat templates ember carries for models whose GGUF has no tokenizer.chat_template,
// by architecture name: "gemma2", "gemma3" (Google's Gemma 2 and Gemma 3 instruct templates).
// nullopt if none.
std::optional<std::string> builtin_template(std::string_view name);

}  // namespace ember::text
