// Fuzz target: the stop-string matcher. Input: up to 4 stop strings (each a length byte and
// bytes), then text fed in pieces of sizes taken from the input. Checked against its contract:
// what it emits never contains a stop string and is a prefix of the text; without a stop it
// emits (with flush) exactly the text; with one, the text goes on with a stop string there.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "server/stop_matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t pos = 0;
  auto byte = [&]() -> int { return pos < size ? data[pos++] : -1; };
  const int n_stops = byte();
  if (n_stops < 0) return 0;
  std::vector<std::string> stops;
  for (int i = 0; i < n_stops % 5; ++i) {
    int len = byte();
    if (len < 0) return 0;
    len %= 8;
    if (pos + size_t(len) > size) return 0;
    std::string s(reinterpret_cast<const char*>(data + pos), size_t(len));
    pos += size_t(len);
    if (!s.empty()) stops.push_back(s);
  }
  const int piece_byte = byte();
  if (piece_byte < 0) return 0;
  const size_t piece = 1 + size_t(piece_byte) % 7;
  std::string text(reinterpret_cast<const char*>(data + pos), size - pos);

  ember::server::StopMatcher m(stops);
  std::string emitted;
  bool stopped = false;
  for (size_t i = 0; i < text.size() && !stopped; i += piece) {
    auto step = m.push(std::string_view(text).substr(i, piece));
    emitted += step.emit;
    stopped = step.stopped;
  }
  if (!stopped) emitted += m.flush();
  for (const auto& s : stops) {
    if (emitted.find(s) != std::string::npos) __builtin_trap();
  }
  if (text.compare(0, emitted.size(), emitted) != 0) __builtin_trap();
  if (!stopped && emitted != text) __builtin_trap();
  if (stopped) {
    bool found = false;
    for (const auto& s : stops) found |= text.compare(emitted.size(), s.size(), s) == 0;
    if (!found) __builtin_trap();
  }
  return 0;
}
