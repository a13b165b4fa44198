// Fuzz target: HTTP request parsing as ember's session does it (session.cc): a Beast
// request_parser<string_body> with a 64 KiB header limit and a body limit, fed the bytes in
// pieces whose sizes come from the input, as a socket would deliver them; then the framing
// checks ember adds once the head is read (server/http_framing.h: transfer codings, the
// request target's forms).
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <boost/beast/http.hpp>

#include "server/http_framing.h"

namespace http = boost::beast::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t piece = 1 + data[0] % 64;
  http::request_parser<http::string_body> parser;
  parser.header_limit(64 * 1024);
  parser.body_limit(1 << 20);
  boost::beast::error_code ec;
  std::string pending;
  size_t pos = 1;
  while (!parser.is_done()) {
    if (pos < size) {
      size_t n = std::min(piece, size - pos);
      pending.append(reinterpret_cast<const char*>(data + pos), n);
      pos += n;
    }
    size_t used = parser.put(boost::asio::buffer(pending), ec);
    pending.erase(0, used);
    if (ec == http::error::need_more) {
      if (pos >= size) break;  // end of input
      ec = {};
      continue;
    }
    if (ec) break;
    if (used == 0 && pos >= size) break;
  }
  if (parser.is_header_done() && !ec) {
    const auto& req = parser.get();
    (void)req.target();
    (void)req.keep_alive();
    (void)req.version();
    (void)req.find(http::field::authorization);
    (void)ember::server::check_transfer_encoding(req);
    std::string_view path = ember::server::request_path(req.target());
    if (path.size() > req.target().size()) __builtin_trap();  // always a piece of the target
  }
  return 0;
}
