// Fuzzes what a model's output passes through: the tool-call parsers of every format (fed in
// pieces whose sizes come from the input) and the JSON grammar's recognizer (any object).
// Neither may crash; the parser must return every byte it was given, as content or as calls.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "text/grammar.h"
#include "text/tool_calls.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 16;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  for (auto f : {ember::text::ToolFormat::Hermes, ember::text::ToolFormat::Llama3,
                 ember::text::ToolFormat::Mistral}) {
    ember::text::ToolCallParser p(f);
    std::string content;
    size_t calls = 0;
    for (size_t i = 0; i < text.size(); i += piece) {
      auto out = p.push(text.substr(i, piece));
      content += out.content;
      calls += out.calls.size();
    }
    auto out = p.finish();
    content += out.content;
    calls += out.calls.size();
    if (calls == 0 && content != text) __builtin_trap();  // nothing may be lost
  }
  static const ember::text::Grammar g = ember::text::Grammar::any_object();
  ember::text::Machine m(g);
  for (char c : text) {
    ember::text::Machine next(m);
    if (next.step(static_cast<uint8_t>(c))) m = next;
  }
  (void)m.can_end();
  return 0;
}
