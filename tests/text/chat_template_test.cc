// Chat templates against reference renders: tests/golden/templates/cases.json holds what
// python3-jinja2, configured as Hugging Face's apply_chat_template, produced for real model
// templates (regenerate with tools/gen_template_goldens.py). Every case must match byte for byte.
#include "text/chat_template.h"

#include <gtest/gtest.h>

#include "text/tool_calls.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace ember::text {
namespace {

const std::string kGoldenDir = std::string(EMBER_SOURCE_DIR) + "/tests/golden/templates/";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::tm golden_date() {
  std::tm tm{};
  tm.tm_year = 2025 - 1900;
  tm.tm_mon = 2;
  tm.tm_mday = 14;
  tm.tm_hour = 9;
  tm.tm_min = 26;
  tm.tm_sec = 53;
  tm.tm_wday = 5;  // a Friday
  tm.tm_yday = 72;
  return tm;
}

TEST(ChatTemplate, every_golden_case_matches_jinja2_byte_for_byte) {
  auto doc = nlohmann::ordered_json::parse(read_file(kGoldenDir + "cases.json"));
  ASSERT_EQ(doc["strftime_now_date"], "2025-03-14 09:26:53");
  std::map<std::string, ChatTemplate> templates;
  std::map<std::string, int> passed;
  size_t n = 0;
  int tool_cases = 0;
  for (const auto& c : doc["cases"]) {
    std::string name = c["template"];
    if (!templates.count(name)) {
      auto t = ChatTemplate::parse(read_file(kGoldenDir + name + ".jinja"));
      ASSERT_TRUE(t.ok()) << name << ": " << t.message();
      templates.emplace(name, std::move(t).value());
    }
    Result<std::string> r = fail("not rendered");
    if (c.contains("tools")) {  // tool requests and histories: the whole context, as HF passes it
      nlohmann::ordered_json ctx = {
          {"messages", c["messages"]},   {"tools", c["tools"]},
          {"documents", nullptr},        {"add_generation_prompt", c["add_generation_prompt"]},
          {"bos_token", c["bos_token"]}, {"eos_token", c["eos_token"]}};
      for (auto it = c["extra_context"].begin(); it != c["extra_context"].end(); ++it) {
        ctx[it.key()] = *it;
      }
      r = templates.at(name).render_context(ctx, golden_date());
    } else {
      std::vector<ChatMessage> messages;
      for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
      ChatRenderOptions opts;
      opts.now = golden_date();
      opts.extra_context = c["extra_context"];
      r = templates.at(name).render(messages, c["add_generation_prompt"], c["bos_token"],
                                    c["eos_token"], opts);
    }
    std::string label = name + "/" + c["conversation"].get<std::string>() +
                        " agp=" + c["add_generation_prompt"].dump() + " " +
                        c["extra_context"].dump();
    if (c.contains("error")) {
      ASSERT_FALSE(r.ok()) << label << " rendered: " << r.value();
      EXPECT_EQ(r.message(), c["error"].get<std::string>()) << label;
    } else {
      ASSERT_TRUE(r.ok()) << label << ": " << r.message();
      EXPECT_EQ(r.value(), c["expected"].get<std::string>()) << label;
    }
    ++passed[name];
    ++n;
    tool_cases += c.contains("tools") ? 1 : 0;
  }
  EXPECT_EQ(n, doc["cases"].size());
  for (const char* name :
       {"gemma2", "gemma3", "qwen2.5", "qwen3", "llama3.1", "llama3.2", "chatml-tools"}) {
    EXPECT_GT(passed[name], 0) << "no golden cases for " << name;
  }
  EXPECT_GE(tool_cases, 20) << "tool requests and histories are covered";
}

TEST(ChatTemplate, builtin_chatml_tool_template_equals_its_golden_file) {
  EXPECT_EQ(chatml_tool_template(), read_file(kGoldenDir + "chatml-tools.jinja"));
}

TEST(ChatTemplate, builtin_gemma3_template_equals_the_official_file) {
  auto builtin = builtin_template("gemma3");
  ASSERT_TRUE(builtin.has_value());
  EXPECT_EQ(*builtin, read_file(kGoldenDir + "gemma3.jinja"));
  EXPECT_FALSE(builtin_template("no-such-arch").has_value());
}

TEST(ChatTemplate, builtin_gemma2_template_equals_the_official_file) {
  auto builtin = builtin_template("gemma2");
  ASSERT_TRUE(builtin.has_value());
  EXPECT_EQ(*builtin, read_file(kGoldenDir + "gemma2.jinja"));
}

TEST(ChatTemplate, builtin_gemma3_renders_a_generation_prompt) {
  auto t = ChatTemplate::parse(*builtin_template("gemma3"));
  ASSERT_TRUE(t.ok()) << t.message();
  auto r = t->render({{"system", "Be brief."}, {"user", " Hi "}}, true, "<bos>", "<eos>");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplate, unsupported_filter_fails_at_parse_naming_it_and_the_line) {
  auto t = ChatTemplate::parse(
      "{{ bos_token }}\n{% for m in messages %}\n{{ m.content | wordwrap }}"
      "\n{% endfor %}");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.message(), "chat template line 3: unsupported filter 'wordwrap'");
}

TEST(ChatTemplate, raise_exception_surfaces_the_templates_message) {
  auto t = ChatTemplate::parse("{{ raise_exception('System role not supported') }}");
  ASSERT_TRUE(t.ok()) << t.message();
  auto r = t->render({{"user", "x"}}, false, "", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), "System role not supported");
}

TEST(ChatTemplate, strftime_now_uses_the_given_date) {
  auto t = ChatTemplate::parse("{{ strftime_now('%d %b %Y') }}");
  ASSERT_TRUE(t.ok()) << t.message();
  ChatRenderOptions opts;
  opts.now = golden_date();
  auto r = t->render({}, false, "", "", opts);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, "14 Mar 2025");
}

TEST(ChatTemplate, render_context_accepts_structured_message_content) {
  auto t = ChatTemplate::parse(*builtin_template("gemma3"));
  ASSERT_TRUE(t.ok());
  auto ctx = nlohmann::ordered_json::parse(R"({"bos_token": "<bos>", "add_generation_prompt": false,
    "messages": [{"role": "user", "content": [{"type": "text", "text": " look "},
                 {"type": "image"}, {"type": "text", "text": "here"}]}]})");
  auto r = t->render_context(ctx, std::nullopt);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, "<bos><start_of_turn>user\nlook<start_of_image>here<end_of_turn>\n");
}

}  // namespace
}  // namespace ember::text
