// Fuzz target: the JSON-schema compiler and its recognizer. The input is a schema, a NUL byte,
// then text: the schema is compiled (as response_format and as a tool's parameters) and, when it
// compiles, the text is fed to the recognizer byte by byte (bytes it refuses are skipped).
// Nothing may crash or recurse without a bound, however deep or wide the schema.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "text/grammar.h"
#include "text/json_limits.h"
#include "text/tool_calls.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view schema_text = in.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? "" : in.substr(nul + 1);
  const auto schema = ember::text::parse_json_bounded(schema_text);
  if (schema.is_discarded()) return 0;
  auto g = ember::text::Grammar::from_schema(schema);
  auto t = ember::text::tool_call_grammar(ember::text::ToolFormat::Hermes, {{"f", schema}});
  for (const ember::text::Grammar* grammar : {g.ok() ? &*g : nullptr, t.ok() ? &*t : nullptr}) {
    if (!grammar) continue;
    ember::text::Machine m(*grammar);
    for (char c : text) {
      ember::text::Machine next(m);
      if (next.step(static_cast<uint8_t>(c))) m = next;
    }
    (void)m.can_end();
  }
  return 0;
}
