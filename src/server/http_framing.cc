#include "server/http_framing.h"

#include <boost/beast/core/string.hpp>

#include <fmt/format.h>

namespace ember::server {

namespace http = boost::beast::http;

namespace {

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string quoted(std::string_view coding) {
  if (coding.size() <= kMaxQuotedCoding) return fmt::format("'{}'", coding);
  return fmt::format("'{}...'", coding.substr(0, kMaxQuotedCoding));
}

}  // namespace

std::optional<ApiError> check_transfer_encoding(const http::request_header<>& head) {
  auto [first, last] = head.equal_range(http::field::transfer_encoding);
  if (first == last) return std::nullopt;
  if (head.version() < 11) {
    return ApiError{ErrorKind::InvalidRequest,
                    "malformed HTTP request: Transfer-Encoding in an HTTP/1.0 request (its body "
                    "length cannot be known)",
                    {}};
  }
  int chunked = 0;
  // Every coding of every Transfer-Encoding field, in order (a list may span several fields;
  // empty elements are allowed). Bounded by the 64 KiB head.
  for (auto it = first; it != last; ++it) {
    std::string_view list = it->value();
    for (;;) {
      const size_t comma = list.find(',');
      std::string_view coding = trim_ows(list.substr(0, comma));
      if (!coding.empty()) {
        if (!boost::beast::iequals(coding, "chunked")) {
          return ApiError{
              ErrorKind::NotImplemented,
              fmt::format("transfer coding {} is not supported (only chunked is)", quoted(coding)),
              {}};
        }
        ++chunked;
      }
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
  }
  if (chunked == 0) {
    return ApiError{
        ErrorKind::InvalidRequest, "malformed HTTP request: an empty Transfer-Encoding", {}};
  }
  if (chunked > 1) {
    return ApiError{ErrorKind::InvalidRequest,
                    "malformed HTTP request: Transfer-Encoding applies chunked more than once",
                    {}};
  }
  return std::nullopt;
}

std::string_view request_path(std::string_view target) {
  std::string_view rest;
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() >= scheme.size() &&
        boost::beast::iequals(target.substr(0, scheme.size()), scheme)) {
      rest = target.substr(scheme.size());
      const size_t path = rest.find_first_of("/?");
      if (path == std::string_view::npos || rest[path] == '?') return "/";
      target = rest.substr(path);
      break;
    }
  }
  return target.substr(0, target.find('?'));
}

}  // namespace ember::server
