#include "worker/protocol.h"

#include <gtest/gtest.h>

#include <cstring>

namespace ember::worker::proto {
namespace {

template <typename M>
M round_trip(const M& m) {
  FrameDecoder d;
  d.feed(encode(m));
  auto f = d.next();
  EXPECT_TRUE(f.ok()) << f.message();
  EXPECT_TRUE(f->has_value());
  EXPECT_EQ((*f)->type, M::kType);
  auto back = decode<M>((*f)->payload);
  EXPECT_TRUE(back.ok()) << back.message();
  return *back;
}

TEST(Protocol, every_field_of_a_submit_survives_the_trip) {
  Submit s;
  s.id = 42;
  s.prompt = {1, 2, 3, 70000};
  s.sampling.temperature = 0.25f;
  s.sampling.top_k = 7;
  s.sampling.seed = 0x1234567890ull;
  s.sampling.top_logprobs = 3;
  s.sampling.logprobs = false;
  s.sampling.logit_bias = {{5, -100.f}, {70000, 2.5f}};
  s.max_tokens = 99;
  s.deadline_ms = 1500;
  s.n = 3;
  s.constraint = "schema/{\"type\":\"object\"}";
  Submit b = round_trip(s);
  EXPECT_FALSE(b.sampling.logprobs);
  EXPECT_EQ(b.sampling.logit_bias, s.sampling.logit_bias);
  EXPECT_EQ(b.n, 3);
  EXPECT_EQ(b.constraint, s.constraint);
  EXPECT_EQ(b.id, 42u);
  EXPECT_EQ(b.prompt, s.prompt);
  EXPECT_EQ(b.sampling.temperature, 0.25f);
  EXPECT_EQ(b.sampling.top_k, 7);
  EXPECT_EQ(b.sampling.seed, 0x1234567890ull);
  EXPECT_EQ(b.sampling.top_logprobs, 3);
  EXPECT_EQ(b.max_tokens, 99);
  EXPECT_EQ(b.deadline_ms, 1500);
}

TEST(Protocol, events_and_control_frames_survive_the_trip) {
  Token t{7, {5, -0.5f, {{1, -1.f}, {2, -2.f}}}};
  Token tb = round_trip(t);
  EXPECT_EQ(tb.id, 7u);
  EXPECT_EQ(tb.token.id, 5);
  EXPECT_EQ(tb.token.top.size(), 2u);
  EXPECT_EQ(tb.token.top[1].second, -2.f);

  Done d;
  d.id = 9;
  d.done.reason = FinishReason::Error;
  d.done.message = "worker lost";
  d.done.retryable = true;
  d.done.usage.completion_tokens = 12;
  d.done.usage.cached_tokens = 32;
  Done db = round_trip(d);
  EXPECT_EQ(db.done.usage.cached_tokens, 32);
  EXPECT_EQ(db.done.reason, FinishReason::Error);
  EXPECT_EQ(db.done.message, "worker lost");
  EXPECT_TRUE(db.done.retryable);
  EXPECT_EQ(db.done.usage.completion_tokens, 12);

  Configure c{{{"threads", "4"}, {"model", "/m.gguf"}}};
  EXPECT_EQ(round_trip(c).settings, c.settings);
  Rejected r{3, {SubmitError::Kind::Overloaded, "full"}};
  EXPECT_EQ(round_trip(r).error.kind, SubmitError::Kind::Overloaded);
  Rejected schema{4, {SubmitError::Kind::BadConstraint, "#: the schema feature 'pattern'"}};
  EXPECT_EQ(round_trip(schema).error.kind, SubmitError::Kind::BadConstraint);  // the last kind
  Stats st;
  st.stats.cache_hits = 4;
  st.stats.cached_tokens = 640;
  st.stats.cache_bytes = 1 << 20;
  st.stats.warm_blocks_loaded = 17;
  st.stats.warm_save_seconds = 0.25;
  Stats sb = round_trip(st);
  EXPECT_EQ(sb.stats.cache_hits, 4u);
  EXPECT_EQ(sb.stats.cached_tokens, 640u);
  EXPECT_EQ(sb.stats.cache_bytes, 1 << 20);
  EXPECT_EQ(sb.stats.warm_blocks_loaded, 17);
  EXPECT_EQ(sb.stats.warm_save_seconds, 0.25);
  Hello h{{"llama", "tiny", 2048}, 1234, {}};
  h.stats.warm_blocks_loaded = 9;
  Hello hb = round_trip(h);
  EXPECT_EQ(hb.model.n_ctx, 2048);
  EXPECT_EQ(hb.stats.warm_blocks_loaded, 9);
}

TEST(Protocol, a_warm_save_and_its_report_survive_the_trip) {
  round_trip(SaveWarm{});  // checks the frame type
  WarmSaved w;
  w.report = {true, 42, 1 << 20, 0.5, ""};
  WarmSaved wb = round_trip(w);
  EXPECT_TRUE(wb.report.ok);
  EXPECT_EQ(wb.report.blocks, 42);
  EXPECT_EQ(wb.report.bytes, 1 << 20);
  EXPECT_EQ(wb.report.seconds, 0.5);
  WarmSaved f;
  f.report.message = "no warm-cache directory";
  EXPECT_EQ(round_trip(f).report.message, "no warm-cache directory");
  EXPECT_FALSE(round_trip(f).report.ok);
  // A truncated report is a malformed frame that names itself.
  auto bytes = encode(w);
  auto r = decode<WarmSaved>(std::span<const uint8_t>(bytes).subspan(kHeaderSize, 5));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("warm-saved"), std::string::npos) << r.message();
}

TEST(Protocol, frames_split_anywhere_are_reassembled) {
  std::vector<uint8_t> bytes;
  append(bytes, Accepted{1});
  append(bytes, Token{1, {9, 0.f, {}}});
  append(bytes, Stop{});
  FrameDecoder d;
  std::vector<Type> got;
  for (uint8_t b : bytes) {  // one byte at a time
    d.feed({&b, 1});
    while (true) {
      auto f = d.next();
      ASSERT_TRUE(f.ok());
      if (!*f) break;
      got.push_back((*f)->type);
    }
  }
  EXPECT_EQ(got, (std::vector<Type>{Type::Accepted, Type::Token, Type::Stop}));
  EXPECT_EQ(d.buffered(), 0u);
}

void set_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  std::memcpy(b.data() + at, &v, 4);
}

TEST(Protocol, an_oversized_frame_is_skipped_and_the_stream_continues) {
  std::vector<uint8_t> bytes = encode(Accepted{1});
  set_u32(bytes, 8, kMaxPayload + 1);  // claims a payload beyond the limit
  FrameDecoder d;
  d.feed(bytes);
  auto f = d.next();
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("exceeds the limit"), std::string::npos) << f.message();
  EXPECT_FALSE(d.fatal());
  // The claimed payload bytes arrive (and are discarded), then a good frame.
  std::vector<uint8_t> rest(kMaxPayload + 1 - 8, 0xAB);
  d.feed(rest);
  d.feed(encode(Accepted{2}));
  auto g = d.next();
  ASSERT_TRUE(g.ok()) << g.message();
  ASSERT_TRUE(g->has_value());
  EXPECT_EQ(decode<Accepted>((*g)->payload)->id, 2u);
}

TEST(Protocol, a_bad_magic_is_fatal_for_the_stream) {
  std::vector<uint8_t> bytes = encode(Stop{});
  bytes[0] ^= 0xFF;
  FrameDecoder d;
  d.feed(bytes);
  auto f = d.next();
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("magic"), std::string::npos);
  EXPECT_TRUE(d.fatal());
  d.feed(encode(Stop{}));
  EXPECT_FALSE(d.next().ok());
}

TEST(Protocol, another_version_is_refused_by_name) {
  std::vector<uint8_t> bytes = encode(Stop{});
  bytes[4] = 9;
  FrameDecoder d;
  d.feed(bytes);
  auto f = d.next();
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("version 9"), std::string::npos) << f.message();
}

TEST(Protocol, an_unknown_type_skips_only_that_frame) {
  std::vector<uint8_t> bytes = encode(Accepted{1});
  bytes[6] = 200;  // type 200
  append(bytes, Accepted{5});
  FrameDecoder d;
  d.feed(bytes);
  EXPECT_FALSE(d.next().ok());
  EXPECT_FALSE(d.fatal());
  auto g = d.next();
  ASSERT_TRUE(g.ok() && g->has_value());
  EXPECT_EQ(decode<Accepted>((*g)->payload)->id, 5u);
}

TEST(Protocol, malformed_payloads_are_errors_naming_the_frame) {
  auto submit = encode(Submit{1, {1, 2, 3}});
  std::vector<uint8_t> payload(submit.begin() + kHeaderSize, submit.end());
  auto truncated = std::span<const uint8_t>(payload).first(payload.size() - 1);
  auto r = decode<Submit>(truncated);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("malformed submit frame"), std::string::npos) << r.message();

  payload.push_back(0);
  EXPECT_NE(decode<Submit>(payload).message().find("trailing"), std::string::npos);

  // A prompt count far beyond the payload must not allocate it.
  std::vector<uint8_t> huge(payload.begin(), payload.begin() + 8);
  uint32_t n = 0x40000000;
  huge.insert(huge.end(), reinterpret_cast<uint8_t*>(&n), reinterpret_cast<uint8_t*>(&n) + 4);
  EXPECT_NE(decode<Submit>(huge).message().find("exceeds the payload"), std::string::npos);

  auto cancel = encode(Cancel{1, CancelCause::Client});
  cancel.back() = 99;  // no such cause
  std::vector<uint8_t> cp(cancel.begin() + kHeaderSize, cancel.end());
  EXPECT_NE(decode<Cancel>(cp).message().find("out of range"), std::string::npos);
}

// Version 2's Submit fields (n, logit_bias, the constraint spec) and Hello's stats: each bad in
// its own way is an error naming the frame, never a partial message.
TEST(Protocol, malformed_version_2_fields_are_errors_naming_the_frame) {
  auto payload_of = [](const auto& m) {
    auto f = encode(m);
    return std::vector<uint8_t>(f.begin() + kHeaderSize, f.end());
  };
  Submit s{7, {1, 2}};
  s.n = 0;  // no choices
  auto r = decode<Submit>(payload_of(s));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("malformed submit frame: a value out of range"), std::string::npos)
      << r.message();

  // The constraint spec is the last field: a length beyond the payload must not allocate it.
  s.n = 2;
  s.constraint = "json_object";
  auto p = payload_of(s);
  const size_t len_at = p.size() - s.constraint.size() - 4;
  uint32_t huge = 0x7fffffff;
  std::memcpy(p.data() + len_at, &huge, 4);
  r = decode<Submit>(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("exceeds the payload"), std::string::npos) << r.message();

  // A logit_bias count beyond the payload, likewise.
  s.constraint.clear();
  s.sampling.logit_bias = {{3, 1.f}};
  p = payload_of(s);
  // logit_bias is [count][id, bias]...; after it come max_tokens, deadline_ms, n, constraint.
  const size_t tail = 4 + 8 + 4 + 4;
  const size_t count_at = p.size() - tail - 8 - 4;
  uint32_t one = 0;
  std::memcpy(&one, p.data() + count_at, 4);
  ASSERT_EQ(one, 1u);  // found the count
  uint32_t many = 1u << 28;
  std::memcpy(p.data() + count_at, &many, 4);
  r = decode<Submit>(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("exceeds the payload"), std::string::npos) << r.message();

  // A version 1 Hello (no stats) is truncated for version 2.
  Hello h{{"llama", "tiny", 2048}, 1234, {}};
  auto hp = payload_of(h);
  auto stats_size = payload_of(Stats{}).size();
  hp.resize(hp.size() - stats_size);
  auto hr = decode<Hello>(hp);
  ASSERT_FALSE(hr.ok());
  EXPECT_NE(hr.message().find("malformed hello frame: truncated"), std::string::npos)
      << hr.message();
}

}  // namespace
}  // namespace ember::worker::proto
