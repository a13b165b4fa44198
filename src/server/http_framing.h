// Request framing checks Beast leaves to the server (RFC 9112): which transfer codings a request
// may use, and which request-target forms name a route. Used by the session (session.cc) and
// the http_head fuzz target.
//
// Transfer codings: ember decodes chunked and nothing else. A request whose Transfer-Encoding
// names any other coding ("gzip, chunked", "xchunked") is answered 501; one whose framing cannot
// be trusted (an empty list, chunked twice, Transfer-Encoding in HTTP/1.0) 400. Both close the
// connection: the body that follows was not read, and read as a next request it would be the
// request smuggling RFC 9112 §6.3 warns of. Beast itself turns away a head with both
// Content-Length and Transfer-Encoding, or with two Transfer-Encoding fields that both say
// chunked (400, closed too).
#pragma once

#include <boost/beast/http/message.hpp>

#include <optional>
#include <string_view>

#include "server/api_error.h"

namespace ember::server {

// Longest coding name quoted back in an error (the rest is cut: the header limit is 64 KiB).
inline constexpr size_t kMaxQuotedCoding = 64;

// nullopt: no Transfer-Encoding, or exactly chunked. Otherwise the error to answer before
// closing the connection (NotImplemented: 501, InvalidRequest: 400).
std::optional<ApiError> check_transfer_encoding(const boost::beast::http::request_header<>& head);

// The path a target names, without its query: "/v1/models" for origin-form "/v1/models?x=1"
// and for absolute-form "http://host:8080/v1/models" (which a server must accept, RFC 9112
// §3.2.2; "/" when it has no path). Any other form (asterisk "*", authority "host:443", another
// scheme) comes back as it is and routes nowhere.
std::string_view request_path(std::string_view target);

}  // namespace ember::server
