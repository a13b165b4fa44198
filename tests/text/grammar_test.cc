// The JSON-schema grammar, its recognizer, and token masks over a vocabulary.
#include "text/grammar.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "text/grammar_mask.h"

namespace ember::text {
namespace {

using json = nlohmann::ordered_json;

Grammar compile(const char* schema) {
  auto g = Grammar::from_schema(json::parse(schema));
  EXPECT_TRUE(g.ok()) << g.message();
  return std::move(g).value();
}

bool accepts(const Grammar& g, std::string_view text) {
  Machine m(g);
  return m.step(text) && m.can_end();
}

constexpr const char* kPerson = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer", "minimum": 0},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
    "nick": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "kind": {"enum": ["cat", "dog", 12]}
  },
  "required": ["name", "age", "kind"]})";

TEST(Grammar, accepts_values_of_the_schema_in_property_order) {
  Grammar g = compile(kPerson);
  EXPECT_TRUE(accepts(g, R"({"name":"Ann","age":31,"kind":"cat"})"));
  EXPECT_TRUE(
      accepts(g, R"({"name":"A\"\u00e9\n","age":0,"tags":["x","y"],"nick":null,"kind":12})"));
  EXPECT_TRUE(accepts(g, R"({"name":"日本","age":7,"nick":"b","kind":"dog"})"));
}

TEST(Grammar, refuses_what_the_schema_does_not_allow) {
  Grammar g = compile(kPerson);
  EXPECT_FALSE(accepts(g, R"({"name":"Ann","kind":"cat"})")) << "required age missing";
  EXPECT_FALSE(accepts(g, R"({"age":3,"name":"Ann","kind":"cat"})")) << "out of order";
  EXPECT_FALSE(accepts(g, R"({"name":"Ann","age":-1,"kind":"cat"})")) << "minimum 0";
  EXPECT_FALSE(accepts(g, R"({"name":"Ann","age":1.5,"kind":"cat"})")) << "integer";
  EXPECT_FALSE(accepts(g, R"({"name":"Ann","age":1,"kind":"cow"})")) << "enum";
  EXPECT_FALSE(accepts(g, R"({"name":"Ann","age":1,"tags":["a","b","c"],"kind":"cat"})"));
  EXPECT_FALSE(accepts(g, R"({"name":"Ann","age":1,"kind":"cat","x":1})")) << "extra key";
  EXPECT_FALSE(accepts(g, R"({ "name":"Ann","age":1,"kind":"cat"})")) << "no whitespace";
  EXPECT_FALSE(accepts(g, "{\"name\":\"a\x01\",\"age\":1,\"kind\":\"cat\"}")) << "control char";
  for (const char* bad : {"\xff", "\xc0\x80", "\xe0\x80\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                          "\\ud800", "\\uDFFF"}) {
    EXPECT_FALSE(accepts(g, std::string("{\"name\":\"") + bad + "\",\"age\":1,\"kind\":\"cat\"}"))
        << "bad UTF-8 or a surrogate: " << bad;
  }
  EXPECT_TRUE(accepts(g, "{\"name\":\"\xf0\x9f\x8e\x89\\u20ac\",\"age\":1,\"kind\":\"cat\"}"));
  EXPECT_FALSE(accepts(g, R"({"name":"Ann","age":1)")) << "unfinished";
}

TEST(Grammar, a_value_is_done_once_its_object_closes) {
  Grammar g = compile(kPerson);
  Machine m(g);
  ASSERT_TRUE(m.step(R"({"name":"A","age":1,"kind":"dog")"));
  EXPECT_FALSE(m.done());
  EXPECT_FALSE(m.can_end());
  ASSERT_TRUE(m.step("}"));
  EXPECT_TRUE(m.done());
  EXPECT_FALSE(Machine(m).step(" "));
}

TEST(Grammar, numbers_follow_json_syntax) {
  Grammar g = compile(R"({"type":"array","items":{"type":"number"}})");
  EXPECT_TRUE(accepts(g, "[0,-1,2.5,1e10,-0.25E-3,10]"));
  EXPECT_TRUE(accepts(g, "[123456789012345678e-123,0.123456789012345678]"));
  Machine m(g);
  ASSERT_TRUE(m.step("[123456789012345678"));
  EXPECT_FALSE(Machine(m).step('9')) << "integer digits are capped";
  EXPECT_TRUE(m.step("E-12")) << "a capped part can still go on to the exponent";
  for (const char* bad : {"[01]", "[1.]", "[.5]", "[1e]", "[-]", "[+1]", "[1,]", "[,]"}) {
    EXPECT_FALSE(accepts(g, bad)) << bad;
  }
}

TEST(Grammar, refs_and_recursion_resolve) {
  Grammar g = compile(R"({"$ref": "#/$defs/Node", "$defs": {"Node": {"type": "object",
      "properties": {"v": {"type": "integer"},
                     "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
      "required": ["v", "kids"]}}})");
  EXPECT_TRUE(accepts(g, R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(accepts(g, R"({"v":1,"kids":[{"v":2}]})"));
}

TEST(Grammar, any_object_takes_any_json_object) {
  Grammar g = Grammar::any_object();
  EXPECT_TRUE(accepts(g, R"({"a":[1,{"b":null}],"c":"d","e":true,"f":-2.5})"));
  EXPECT_TRUE(accepts(g, "{}"));
  EXPECT_FALSE(accepts(g, "[1]"));
  EXPECT_FALSE(accepts(g, R"({"a":})"));
}

TEST(Grammar, unsupported_features_are_errors_naming_them_and_where) {
  auto e = Grammar::from_schema(
      json::parse(R"({"type":"object","properties":{"id":{"type":"string","pattern":"^a"}}})"));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.message(), "#/properties/id: the schema feature 'pattern' is not supported");
  auto f = Grammar::from_schema(json::parse(R"({"type":"string","format":"date-time"})"));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("'format'"), std::string::npos);
  auto a = Grammar::from_schema(
      json::parse(R"({"anyOf":[{"type":"object","properties":{"a":{}}},{"type":"object"}]})"));
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.message().find("anyOf"), std::string::npos);
}

// A byte-level toy vocabulary: every single byte plus some multi-byte pieces.
std::shared_ptr<const TokenTable> toy_vocab(int32_t* eog) {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, char(b)));
  for (const char* p : {"{\"",
                        "\":",
                        "\",\"",
                        "name",
                        "age",
                        "kind",
                        "cat",
                        "dog",
                        "12",
                        "}",
                        " {",
                        "\"}",
                        "true",
                        "null",
                        ",\"",
                        "\"\n",
                        "ab\"c",
                        "\xc3\xa9",
                        "\xe6\x97\xa5\xe6\x9c\xac",
                        "\xed\xa0\x80",
                        "\xe0\xa0",
                        "x\xe0",
                        "\\n",
                        "\x01a"}) {
    pieces.push_back(p);
  }
  pieces.push_back("");  // a control token
  *eog = int32_t(pieces.size());
  pieces.push_back("</s>");
  return std::make_shared<TokenTable>(pieces, std::vector<int32_t>{*eog});
}

TEST(GrammarMask, mask_allows_exactly_the_tokens_whose_bytes_step_the_recognizer) {
  int32_t eog = 0;
  auto vocab = toy_vocab(&eog);
  auto cg = std::make_shared<CompiledGrammar>(compile(kPerson), vocab);
  GrammarMatcher gm(cg);
  ASSERT_TRUE(gm.accept_text(R"({"name":"x)"));
  std::vector<float> logits(size_t(vocab->n_vocab()), 1.f);
  ASSERT_TRUE(gm.apply(logits));
  Machine probe(cg->grammar());
  ASSERT_TRUE(probe.step(R"({"name":"x)"));
  for (int32_t id = 0; id < vocab->n_vocab(); ++id) {
    Machine m(probe);
    bool ok = !vocab->piece(id).empty() && m.step(vocab->piece(id));
    EXPECT_EQ(std::isfinite(logits[size_t(id)]), ok) << "token '" << vocab->piece(id) << "'";
  }
  EXPECT_FALSE(std::isfinite(logits[size_t(eog)])) << "the value cannot end inside a string";
}

TEST(GrammarMask, random_walks_always_produce_valid_json_and_end_with_eog) {
  int32_t eog = 0;
  auto vocab = toy_vocab(&eog);
  auto cg = std::make_shared<CompiledGrammar>(compile(kPerson), vocab);
  std::mt19937 rng(7);
  for (int walk = 0; walk < 40; ++walk) {
    GrammarMatcher gm(cg);
    std::string out;
    bool ended = false;
    for (int step = 0; step < 400 && !ended; ++step) {
      std::vector<float> logits(size_t(vocab->n_vocab()), 0.f);
      ASSERT_TRUE(gm.apply(logits));
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->n_vocab(); ++id) {
        if (std::isfinite(logits[size_t(id)])) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty());
      // Prefer closing once the string is long: walks must end.
      int32_t id = allowed[rng() % allowed.size()];
      if (step > 60) {  // close: end, then a quote, then a brace, whichever is allowed
        int best = 3;
        for (int32_t a : allowed) {
          int rank = a == eog ? 0 : vocab->piece(a) == "\"" ? 1 : vocab->piece(a) == "}" ? 2 : 3;
          if (rank < best) {
            best = rank;
            id = a;
          }
        }
      }
      if (id == eog) {
        ended = true;
        break;
      }
      ASSERT_TRUE(gm.accept(id));
      out += vocab->piece(id);
      if (gm.done()) ended = true;
    }
    ASSERT_TRUE(ended) << out;
    json j = json::parse(out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << out;
    EXPECT_TRUE(j.contains("name") && j.contains("age") && j.contains("kind")) << out;
    EXPECT_TRUE(j["age"].is_number_integer() && j["age"].get<int64_t>() >= 0) << out;
  }
  EXPECT_GT(cg->cached_masks(), 0u);
}

TEST(GrammarMask, a_refused_token_leaves_the_matcher_unchanged) {
  int32_t eog = 0;
  auto vocab = toy_vocab(&eog);
  GrammarMatcher gm(std::make_shared<CompiledGrammar>(Grammar::any_object(), vocab));
  EXPECT_FALSE(gm.accept('['));
  EXPECT_TRUE(gm.accept('{'));
  EXPECT_FALSE(gm.accept(eog));
  EXPECT_TRUE(gm.accept('}'));
  EXPECT_TRUE(gm.done());
}

}  // namespace
}  // namespace ember::text
