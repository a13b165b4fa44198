#include "server/http_framing.h"

#include <gtest/gtest.h>

#include <boost/beast/http.hpp>

namespace ember::server {
namespace {

namespace http = boost::beast::http;

http::request_header<> head(std::initializer_list<std::string_view> te, unsigned version = 11) {
  http::request_header<> h;
  h.version(version);
  h.method(http::verb::post);
  h.target("/v1/completions");
  for (auto v : te) h.insert(http::field::transfer_encoding, v);
  return h;
}

int status_of(const std::optional<ApiError>& e) {
  return e ? error_info(e->kind).status : 0;
}

TEST(HttpFraming, no_transfer_encoding_or_exactly_chunked_is_read) {
  EXPECT_FALSE(check_transfer_encoding(head({})));
  EXPECT_FALSE(check_transfer_encoding(head({"chunked"})));
  EXPECT_FALSE(check_transfer_encoding(head({"CHUNKED"})));
  EXPECT_FALSE(check_transfer_encoding(head({" , chunked ,\t"})));  // empty elements are allowed
  EXPECT_FALSE(check_transfer_encoding(head({"", "chunked"})));
}

TEST(HttpFraming, any_other_coding_is_501_naming_it) {
  for (auto te : {"xchunked", "gzip, chunked", "chunked, gzip", "chunked;q=1", "identity"}) {
    auto e = check_transfer_encoding(head({te}));
    EXPECT_EQ(status_of(e), 501) << te;
  }
  auto e = check_transfer_encoding(head({"gzip", "chunked"}));  // a list over two fields
  ASSERT_EQ(status_of(e), 501);
  EXPECT_EQ(e->message, "transfer coding 'gzip' is not supported (only chunked is)");
  EXPECT_EQ(error_info(e->kind).code, std::string("not_implemented"));
  // A long name is cut where it is quoted.
  e = check_transfer_encoding(head({std::string(1000, 'x')}));
  ASSERT_EQ(status_of(e), 501);
  EXPECT_LT(e->message.size(), kMaxQuotedCoding + 64);
}

TEST(HttpFraming, untrustworthy_framing_is_400) {
  auto e = check_transfer_encoding(head({"chunked"}, 10));
  ASSERT_EQ(status_of(e), 400);
  EXPECT_NE(e->message.find("HTTP/1.0"), std::string::npos) << e->message;
  e = check_transfer_encoding(head({" , "}));
  ASSERT_EQ(status_of(e), 400);
  EXPECT_NE(e->message.find("empty Transfer-Encoding"), std::string::npos) << e->message;
  e = check_transfer_encoding(head({"chunked, chunked"}));
  ASSERT_EQ(status_of(e), 400);
  EXPECT_NE(e->message.find("more than once"), std::string::npos) << e->message;
}

TEST(HttpFraming, origin_and_absolute_forms_name_the_same_path) {
  EXPECT_EQ(request_path("/v1/models"), "/v1/models");
  EXPECT_EQ(request_path("/v1/models?limit=1"), "/v1/models");
  EXPECT_EQ(request_path("http://127.0.0.1:8080/v1/completions"), "/v1/completions");
  EXPECT_EQ(request_path("HTTP://host/health?x=1"), "/health");
  EXPECT_EQ(request_path("https://user@host:443/v1/models/a%2Fb"), "/v1/models/a%2Fb");
  EXPECT_EQ(request_path("http://host"), "/");
  EXPECT_EQ(request_path("http://host?x=1"), "/");
  // Other forms route nowhere.
  EXPECT_EQ(request_path("*"), "*");
  EXPECT_EQ(request_path("host:443"), "host:443");
  EXPECT_EQ(request_path("ftp://host/health"), "ftp://host/health");
  EXPECT_EQ(request_path(""), "");
}

}  // namespace
}  // namespace ember::server
