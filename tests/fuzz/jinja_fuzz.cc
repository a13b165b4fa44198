// Fuzz target: the Jinja2-subset chat-template parser and renderer. The input is a template;
// it is rendered against a chat-like context. Parse and render errors are fine; crashes,
// hangs and unbounded memory are not (the interpreter bounds its work and output).
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string_view>

#include <nlohmann/json.hpp>

#include "text/jinja/template.h"
#include "text/jinja/value.h"

using ember::text::jinja::Template;
using ember::text::jinja::Value;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Value ctx = Value::from_json(nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "be brief"},
                 {"role": "user", "content": "hi"},
                 {"role": "assistant", "content": "hello"}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]})"));
  std::string_view src(reinterpret_cast<const char*>(data), size);
  auto t = Template::parse(src, "fuzz");
  if (!t.ok()) return 0;
  std::tm now{};
  now.tm_year = 124;
  (void)t->render(ctx, now);
  return 0;
}
