#include "text/tool_calls.h"

#include <algorithm>

#include "text/json_limits.h"

namespace ember::text {

using json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kMistral = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

// ember's own ChatML template with Hermes-style tool calls (tools listed in the system turn,
// calls in <tool_call> tags, results in <tool_response> tags inside a user turn).
const char* const kChatmlTools = R"TPL({%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}
{{- messages[0].content + '\n\n' }}
{%- endif %}
{{- 'You can call functions. Their signatures, as JSON, are listed between <tools> and </tools>:\n<tools>' }}
{%- for tool in tools %}
{{- '\n' + (tool | tojson) }}
{%- endfor %}
{{- '\n</tools>\n\nTo call a function, answer with a JSON object holding its name and arguments between <tool_call> and </tool_call>:\n<tool_call>\n{"name": "function_name", "arguments": {"argument": "value"}}\n</tool_call><|im_end|>\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'assistant' and message.tool_calls %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}
{{- '\n' + message.content }}
{%- endif %}
{%- for call in message.tool_calls %}
{{- '\n<tool_call>\n{"name": "' + call.function.name + '", "arguments": ' + (call.function.arguments | tojson) + '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>user\n<tool_response>\n' + message.content + '\n</tool_response><|im_end|>\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- endif %}
)TPL";

// Length of the longest suffix of `s` that is a proper prefix of `marker`.
size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

std::string_view trim_left(std::string_view s) {
  size_t i = s.find_first_not_of(" \t\r\n");
  return i == std::string_view::npos ? std::string_view() : s.substr(i);
}

}  // namespace

ToolFormat tool_format_for_template(std::string_view source) {
  if (source.find(kMistral) != std::string_view::npos) return ToolFormat::Mistral;
  if (source.find("<tool_call>") != std::string_view::npos) return ToolFormat::Hermes;
  if (source.find("<|python_tag|>") != std::string_view::npos ||
      (source.find("<|eot_id|>") != std::string_view::npos &&
       source.find("parameters") != std::string_view::npos)) {
    return ToolFormat::Llama3;
  }
  return ToolFormat::Hermes;
}

std::string_view tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::Hermes:
      return "hermes";
    case ToolFormat::Llama3:
      return "llama3";
    case ToolFormat::Mistral:
      return "mistral";
  }
  return "?";
}

bool template_renders_tools(std::string_view source) {
  return source.find("tools") != std::string_view::npos;
}

const std::string& chatml_tool_template() {
  static const std::string t = kChatmlTools;
  return t;
}

bool parse_call_object(const json& j, ToolCall* out) {
  if (!j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return false;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  json a = args == j.end() || args->is_null() ? json::object() : *args;
  if (a.is_string()) {  // arguments already serialized: must hold an object
    a = parse_json_bounded(a.get<std::string>());
  }
  if (!a.is_object()) return false;
  out->name = name->get<std::string>();
  out->arguments = a.dump(-1, ' ', false, json::error_handler_t::replace);
  return true;
}

ToolCallParser::Out ToolCallParser::push(std::string_view text) {
  buf_ += text;
  return run(false);
}

ToolCallParser::Out ToolCallParser::finish() {
  return run(true);
}

ToolCallParser::Out ToolCallParser::run(bool at_end) {
  Out out;
  if (format_ == ToolFormat::Hermes) {
    hermes(out, at_end);
  } else {
    whole_answer(out, at_end);
  }
  return out;
}

// Content streams until "<tool_call>"; a call is held until "</tool_call>" (or the end). The
// whitespace between consecutive calls (and after the last) is not content.
void ToolCallParser::hermes(Out& out, bool at_end) {
  for (;;) {
    if (after_call_) {
      std::string_view rest = trim_left(buf_);
      if (rest.empty()) {
        if (at_end) buf_.clear();
        return;
      }
      if (rest.starts_with(kOpen) || (!at_end && kOpen.starts_with(rest))) {
        buf_.erase(0, buf_.size() - rest.size());
        if (!buf_.starts_with(kOpen)) return;  // wait: it may be another call
      }
      after_call_ = false;
    }
    size_t open = buf_.find(kOpen);
    if (open == std::string::npos) {
      size_t keep = at_end ? 0 : partial_marker(buf_, kOpen);
      out.content += buf_.substr(0, buf_.size() - keep);
      buf_.erase(0, buf_.size() - keep);
      return;
    }
    out.content += buf_.substr(0, open);
    buf_.erase(0, open);
    size_t close = buf_.find(kClose);
    if (close == std::string::npos && !at_end) return;  // the call is still being generated
    std::string_view body = std::string_view(buf_).substr(
        kOpen.size(), (close == std::string::npos ? buf_.size() : close) - kOpen.size());
    const size_t used = close == std::string::npos ? buf_.size() : close + kClose.size();
    ToolCall call;
    json j = parse_json_bounded(body);
    if (!j.is_discarded() && parse_call_object(j, &call)) {
      out.calls.push_back(std::move(call));
      after_call_ = true;
    } else {
      out.content += buf_.substr(0, used);  // not a call: the model's text, as it was
    }
    buf_.erase(0, used);
    if (buf_.empty() && !after_call_) return;
    if (buf_.empty() && !at_end) return;
  }
}

// Llama 3.x and Mistral: a call is the whole answer, recognized by how it begins.
void ToolCallParser::whole_answer(Out& out, bool at_end) {
  if (!decided_) {
    std::string_view head = trim_left(buf_);
    if (head.empty() && !at_end) return;
    std::vector<std::string_view> starts;
    if (format_ == ToolFormat::Llama3) {
      starts = {"{", kPythonTag};
    } else {
      starts = {kMistral, "[{"};
    }
    bool maybe = false;
    for (std::string_view s : starts) {
      if (head.starts_with(s)) whole_is_call_ = true;
      if (s.starts_with(head)) maybe = true;  // could still become one
    }
    if (!whole_is_call_ && maybe && !at_end) return;
    decided_ = true;
  }
  if (!whole_is_call_) {
    out.content += buf_;
    buf_.clear();
    return;
  }
  if (!at_end) return;
  std::string_view body = trim_left(buf_);
  if (body.starts_with(kPythonTag)) body.remove_prefix(kPythonTag.size());
  if (body.starts_with(kMistral)) body.remove_prefix(kMistral.size());
  std::vector<ToolCall> calls;
  json j = parse_json_bounded(body);
  bool ok = !j.is_discarded();
  if (ok && j.is_array()) {
    for (const json& c : j) {
      ToolCall call;
      if (!parse_call_object(c, &call)) ok = false;
      calls.push_back(std::move(call));
    }
    ok = ok && !calls.empty();
  } else if (ok) {
    ToolCall call;
    ok = parse_call_object(j, &call);
    calls.push_back(std::move(call));
  } else if (format_ == ToolFormat::Llama3) {
    // Several calls separated by ';' (Llama 3.2 sometimes does this).
    ok = true;
    size_t start = 0;
    std::string s(body);
    while (ok && start < s.size()) {
      size_t semi = s.find(';', start);
      std::string part =
          s.substr(start, semi == std::string::npos ? std::string::npos : semi - start);
      json p = parse_json_bounded(part);
      ToolCall call;
      ok = !p.is_discarded() && parse_call_object(p, &call);
      calls.push_back(std::move(call));
      start = semi == std::string::npos ? s.size() : semi + 1;
      while (start < s.size() && (s[start] == ' ' || s[start] == '\n')) ++start;
    }
    ok = ok && !calls.empty();  // a bare tag with nothing after it is text, not zero calls
  }
  if (ok) {
    out.calls = std::move(calls);
  } else {
    out.content += buf_;
  }
  buf_.clear();
}

Result<Grammar> tool_call_grammar(ToolFormat f, const std::vector<ToolSpec>& tools) {
  EMBER_ASSERT(!tools.empty());
  Grammar g;
  const char* args_key = f == ToolFormat::Llama3 ? "parameters" : "arguments";
  std::vector<std::pair<std::string, uint32_t>> heads;
  const uint32_t close = g.add_literals({{"}", kNoNode}});
  SchemaBudget budget;  // the limits hold for all tools together: one grammar
  for (const ToolSpec& t : tools) {
    // Not copied: a copy of a JSON value recurses once per level.
    static const json kAnyObject = {{"type", "object"}};
    const json& given = t.parameters;
    const json& params =
        given.is_null() || (given.is_object() && given.empty()) ? kAnyObject : given;
    if (auto l = check_schema_limits(params, budget); !l.ok()) {
      return fail("tool '{}' parameters: {}", t.name, l.message());
    }
    auto p = g.add_schema(params);
    if (!p.ok()) return fail("tool '{}' parameters: {}", t.name, p.message());
    std::string head = fmt::format("{{\"name\":{},\"{}\":", json(t.name).dump(), args_key);
    heads.emplace_back(std::move(head), g.add_seq({*p, close}));
  }
  const uint32_t call = g.add_literals(std::move(heads));
  switch (f) {
    case ToolFormat::Hermes:
      g.set_root(g.add_seq({g.add_literals({{"<tool_call>\n", kNoNode}}), call,
                            g.add_literals({{"\n</tool_call>", kNoNode}})}));
      break;
    case ToolFormat::Llama3:
      g.set_root(call);
      break;
    case ToolFormat::Mistral:
      g.set_root(
          g.add_seq({g.add_literals({{"[", kNoNode}}), call, g.add_literals({{"]", kNoNode}})}));
      break;
  }
  return g;
}

}  // namespace ember::text
