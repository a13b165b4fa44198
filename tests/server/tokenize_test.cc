// POST /tokenize and /detokenize (server/tokenize.h) without a socket: llama.cpp's shapes, the
// round trip, pieces, and every bad input answered 400 naming the field.
#include "server/tokenize.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/fixture_codec.h"

namespace ember::server {
namespace {

using json = nlohmann::json;
using testing::fixture_codec;

json ok(const Reply& r) {
  EXPECT_EQ(r.status, http::status::ok) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  return json::parse(r.body);
}

json tokenize(const json& body, const text::TextCodec& c = fixture_codec()) {
  return ok(tokenize_reply(c, body.dump()));
}

// The error object of a 400 answer.
json error_of(const Reply& r) {
  EXPECT_EQ(r.status, http::status::bad_request) << r.body;
  return json::parse(r.body)["error"];
}

std::vector<int32_t> ids_of(const json& tokens) {
  std::vector<int32_t> ids;
  for (const json& t : tokens)
    ids.push_back(t.is_object() ? t["id"].get<int32_t>() : t.get<int32_t>());
  return ids;
}

TEST(Tokenize, text_to_ids_and_back) {
  const std::string text = "Hello, world! Tokens and back.";
  json t = tokenize({{"content", text}});
  ASSERT_TRUE(t["tokens"].is_array());
  EXPECT_EQ(ids_of(t["tokens"]), fixture_codec().tokenizer().encode(text, false, true));
  EXPECT_GT(t["tokens"].size(), 1u);
  json d = ok(detokenize_reply(fixture_codec(), json{{"tokens", t["tokens"]}}.dump()));
  EXPECT_EQ(d["content"], text);
}

TEST(Tokenize, with_pieces_gives_each_id_with_its_text) {
  const std::string text = "one two three";
  json t = tokenize({{"content", text}, {"with_pieces", true}});
  std::string joined;
  for (const json& p : t["tokens"]) {
    ASSERT_TRUE(p.is_object()) << p;
    EXPECT_EQ(p["piece"], fixture_codec().token_text(p["id"].get<int32_t>()));
    joined += p["piece"].get<std::string>();
  }
  EXPECT_EQ(joined, text);
}

TEST(Tokenize, a_piece_that_is_part_of_a_character_comes_as_its_bytes) {
  const std::string text = "\xF0\x9F\x99\x82";  // U+1F642, four bytes, no merge in the fixture
  json t = tokenize({{"content", text}, {"with_pieces", true}});
  std::string bytes;
  bool some_array = false;
  for (const json& p : t["tokens"]) {
    if (p["piece"].is_array()) {
      some_array = true;
      for (const json& b : p["piece"]) bytes += static_cast<char>(b.get<int>());
    } else {
      bytes += p["piece"].get<std::string>();
    }
  }
  EXPECT_TRUE(some_array) << t;
  EXPECT_EQ(bytes, text);
}

TEST(Tokenize, add_special_adds_bos_when_the_vocabulary_asks_for_it) {
  auto c = testing::make_fixture_codec(true);
  const int32_t bos = c->tokenizer().vocab().bos;
  json plain = tokenize({{"content", "hi"}}, *c);
  json special = tokenize({{"content", "hi"}, {"add_special", true}}, *c);
  EXPECT_NE(plain["tokens"][0], bos);
  EXPECT_EQ(special["tokens"][0], bos);
  EXPECT_EQ(special["tokens"].size(), plain["tokens"].size() + 1);
}

TEST(Tokenize, special_tokens_are_parsed_unless_parse_special_is_false_and_written_back) {
  const std::string marker = "<|im_end|>";
  json parsed = tokenize({{"content", marker}});
  ASSERT_EQ(parsed["tokens"].size(), 1u);
  json literal = tokenize({{"content", marker}, {"parse_special", false}});
  EXPECT_GT(literal["tokens"].size(), 1u);
  json d = ok(detokenize_reply(fixture_codec(), json{{"tokens", parsed["tokens"]}}.dump()));
  EXPECT_EQ(d["content"], marker);
}

TEST(Tokenize, empty_content_is_no_tokens_and_no_tokens_is_empty_content) {
  EXPECT_EQ(tokenize({{"content", ""}})["tokens"], json::array());
  EXPECT_EQ(ok(detokenize_reply(fixture_codec(), R"({"tokens":[]})"))["content"], "");
}

TEST(Tokenize, content_over_the_limit_is_a_400_naming_it) {
  std::string big(TokenizeLimits::kMaxContentBytes + 1, 'a');
  json e = error_of(tokenize_reply(fixture_codec(), json{{"content", big}}.dump()));
  EXPECT_EQ(e["param"], "content");
  EXPECT_NE(e["message"].get<std::string>().find("limit is 1048576 bytes"), std::string::npos) << e;
}

TEST(Tokenize, tokens_over_the_limit_are_a_400_naming_it) {
  json ids = json::array();
  for (size_t i = 0; i <= TokenizeLimits::kMaxTokens; ++i) ids.push_back(0);
  json e = error_of(detokenize_reply(fixture_codec(), json{{"tokens", ids}}.dump()));
  EXPECT_EQ(e["param"], "tokens");
  EXPECT_NE(e["message"].get<std::string>().find("the limit is 262144"), std::string::npos) << e;
}

TEST(Tokenize, bad_input_names_the_field) {
  const auto& c = fixture_codec();
  const int32_t n_vocab = c.tokenizer().n_vocab();
  struct Case {
    bool detok;
    std::string body;
    const char* param;  // nullptr: none
    const char* code;   // nullptr: none
    std::string in_message;
  };
  const std::vector<Case> cases = {
      {false, "{}", "content", nullptr, "'content' is required"},
      {false, R"({"content":5})", "content", "invalid_type", "must be a string, got number"},
      {false, R"({"content":"a","with_pieces":"yes"})", "with_pieces", "invalid_type",
       "must be a boolean"},
      {false, R"({"content":"a","add_special":1})", "add_special", "invalid_type",
       "must be a boolean"},
      {false, R"(["content"])", nullptr, nullptr, "must be a JSON object, got array"},
      {false, "not json", nullptr, "invalid_json", "not valid JSON"},
      {true, "{}", "tokens", nullptr, "'tokens' is required"},
      {true, R"({"tokens":"1 2"})", "tokens", "invalid_type", "must be an array"},
      {true, R"({"tokens":[1,"2"]})", "tokens", "invalid_type", "'tokens[1]' must be an integer"},
      {true, R"({"tokens":[1,2.5]})", "tokens", "invalid_type", "'tokens[1]' must be an integer"},
      {true, R"({"tokens":[-1]})", "tokens", nullptr, "'tokens[0]' is -1"},
      {true, fmt::format(R"({{"tokens":[0,{}]}})", n_vocab), "tokens", nullptr,
       fmt::format("'tokens[1]' is {}, not a token id of this model (0 to {})", n_vocab,
                   n_vocab - 1)},
      {true, R"({"tokens":[18446744073709551615]})", "tokens", nullptr, "not a token id"},
  };
  for (const Case& k : cases) {
    Reply r = k.detok ? detokenize_reply(c, k.body) : tokenize_reply(c, k.body);
    json e = error_of(r);
    if (k.param) {
      EXPECT_EQ(e["param"], k.param) << k.body;
    } else {
      EXPECT_TRUE(e["param"].is_null()) << k.body;
    }
    if (k.code) {
      EXPECT_EQ(e["code"], k.code) << k.body;
    }
    EXPECT_NE(e["message"].get<std::string>().find(k.in_message), std::string::npos)
        << k.body << " -> " << e;
  }
}

}  // namespace
}  // namespace ember::server
