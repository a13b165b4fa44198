#include "text/chat_template.h"

#include "text/jinja/template.h"

namespace ember::text {

namespace {

// google/gemma-2-*-it tokenizer_config.json "chat_template", verbatim (tests compare it with
// tests/golden/templates/gemma2.jinja). It refuses a system turn; TextCodec folds system text
// into the first user turn instead.
constexpr std::string_view kGemma2Template =
    R"TPL({{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %})TPL";

// google/gemma-3-*-it tokenizer_config.json "chat_template", verbatim (tests compare it with
// tests/golden/templates/gemma3.jinja).
constexpr std::string_view kGemma3Template = R"TPL({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
)TPL";

std::tm local_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string source) {
  auto t = jinja::Template::parse(source, "chat template");
  if (!t.ok()) return t.error();
  auto shared = std::make_shared<const jinja::Template>(std::move(t).value());
  return ChatTemplate(std::move(source), std::move(shared));
}

Result<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt, const std::string& bos_token,
                                         const std::string& eos_token) const {
  return render(messages, add_generation_prompt, bos_token, eos_token, ChatRenderOptions{});
}

Result<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt, const std::string& bos_token,
                                         const std::string& eos_token,
                                         const ChatRenderOptions& options) const {
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  nlohmann::ordered_json ctx =
      make_context(std::move(msgs), nullptr, add_generation_prompt, bos_token, eos_token);
  if (!options.extra_context.is_object()) {
    return fail("chat template: extra context must be a JSON object");
  }
  for (auto it = options.extra_context.begin(); it != options.extra_context.end(); ++it) {
    ctx[it.key()] = *it;
  }
  return render_context(ctx, options.now);
}

nlohmann::ordered_json ChatTemplate::make_context(nlohmann::ordered_json messages,
                                                  nlohmann::ordered_json tools,
                                                  bool add_generation_prompt,
                                                  const std::string& bos_token,
                                                  const std::string& eos_token) {
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = std::move(messages);
  ctx["tools"] = std::move(tools);
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = bos_token;
  ctx["eos_token"] = eos_token;
  return ctx;
}

Result<std::string> ChatTemplate::render_context(const nlohmann::ordered_json& context,
                                                 const std::optional<std::tm>& now) const {
  if (!context.is_object()) return fail("chat template: context must be a JSON object");
  return template_->render(jinja::Value::from_json(context), now ? *now : local_now());
}

std::optional<std::string> builtin_template(std::string_view name) {
  if (name == "gemma2") return std::string(kGemma2Template);
  if (name == "gemma3") return std::string(kGemma3Template);
  return std::nullopt;
}

}  // namespace ember::text
