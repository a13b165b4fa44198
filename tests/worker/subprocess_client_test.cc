// SubprocessEngineClient against a scripted worker (a real child process speaking the worker
// protocol): the client's bookkeeping when the worker answers faster than the submitting
// thread wakes up.
#include "worker/subprocess_client.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace ember::worker {
namespace {

// Replies to Configure with the file's first `hello` bytes and to the k-th Submit with the k-th
// `chunk`-byte slice after them, each in one write: its Accepted and Done frames arrive in the
// same read of the client's reader thread. With a fourth argument N, it exits (a crash, for the
// client) right after its N-th reply.
constexpr const char* kScriptedWorker = R"(
import struct, sys
data = open(sys.argv[1], 'rb').read()
hello, chunk = int(sys.argv[2]), int(sys.argv[3])
last = int(sys.argv[4]) if len(sys.argv) > 4 else -1
inp, out, k = sys.stdin.buffer, sys.stdout.buffer, 0
while True:
    head = inp.read(12)
    if len(head) < 12:
        break
    magic, version, kind, n = struct.unpack('<IHHI', head)
    inp.read(n)
    if kind == 1:
        out.write(data[:hello])
    elif kind == 2:
        out.write(data[hello + k * chunk:hello + (k + 1) * chunk])
        k += 1
    out.flush()
    if k == last:
        sys.exit(3)
)";

// Writes `bytes` to a file of its own for the scripted worker; removed with the object.
struct ReplyFile {
  std::filesystem::path path;
  explicit ReplyFile(const std::vector<uint8_t>& bytes)
      : path(std::filesystem::temp_directory_path() /
             ("ember_scripted_worker_" + std::to_string(::getpid()) + "_" +
              std::to_string(reinterpret_cast<uintptr_t>(this)))) {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  ~ReplyFile() { std::filesystem::remove(path); }
};

GenerateRequest two_choices() {
  GenerateRequest g;
  g.prompt = {1, 2, 3};
  g.max_tokens = 4;
  g.n = 2;
  return g;
}

TEST(SubprocessClient, a_request_that_ends_as_it_is_accepted_still_gets_its_streams_and_dones) {
  constexpr int kRequests = 300;
  constexpr int kChoices = 2;
  std::vector<uint8_t> replies = proto::encode(proto::Hello{{"llama", "scripted", 64}, 1, {}});
  const size_t hello = replies.size();
  size_t chunk = 0;
  for (int k = 0; k < kRequests; ++k) {
    const size_t before = replies.size();
    const uint64_t base = 1 + uint64_t{kChoices} * k;  // the client's ids: n per request
    proto::append(replies, proto::Accepted{base});
    for (uint64_t i = 0; i < kChoices; ++i) {
      DoneEvent d;
      d.reason = FinishReason::Length;
      d.usage.completion_tokens = static_cast<int32_t>(base + i);  // tells the choices apart
      proto::append(replies, proto::Done{base + i, d});
    }
    chunk = replies.size() - before;
  }
  ReplyFile file(replies);
  SubprocessOptions o;
  o.argv = {"/usr/bin/python3",   "-c", kScriptedWorker, file.path.string(), std::to_string(hello),
            std::to_string(chunk)};
  auto client = SubprocessEngineClient::start(o);
  ASSERT_TRUE(client->wait_first_load(std::chrono::seconds(30)).ok());
  for (int k = 0; k < kRequests; ++k) {
    auto sub = client->submit(two_choices());
    ASSERT_TRUE(sub.ok()) << "request " << k << ": " << sub.error->message;
    ASSERT_EQ(sub.forks.size(), size_t{kChoices - 1});
    std::vector<std::shared_ptr<EventStream>> streams = {sub.stream, sub.forks[0]};
    for (int i = 0; i < kChoices; ++i) {
      auto ev = streams[i]->next();
      ASSERT_TRUE(ev.has_value());
      auto* d = std::get_if<DoneEvent>(&*ev);
      ASSERT_NE(d, nullptr);
      EXPECT_EQ(d->reason, FinishReason::Length);
      EXPECT_EQ(d->usage.completion_tokens, 1 + kChoices * k + i);
      EXPECT_FALSE(streams[i]->next().has_value());  // exactly one DoneEvent
    }
  }
  client->shutdown();
  EXPECT_EQ(client->stats().active, 0);
}

TEST(SubprocessClient, a_worker_lost_right_after_accepting_ends_every_choice_retryably) {
  std::vector<uint8_t> replies = proto::encode(proto::Hello{{"llama", "scripted", 64}, 1, {}});
  const size_t hello = replies.size();
  proto::append(replies, proto::Accepted{1});
  ReplyFile file(replies);
  SubprocessOptions o;
  o.argv = {"/usr/bin/python3",
            "-c",
            kScriptedWorker,
            file.path.string(),
            std::to_string(hello),
            std::to_string(replies.size() - hello),
            "1"};
  o.backoff_initial = std::chrono::milliseconds(1);
  auto client = SubprocessEngineClient::start(o);
  ASSERT_TRUE(client->wait_first_load(std::chrono::seconds(30)).ok());
  auto sub = client->submit(two_choices());  // accepted, then the worker is gone
  ASSERT_TRUE(sub.ok()) << sub.error->message;
  ASSERT_EQ(sub.forks.size(), 1u);
  for (const auto& stream : {sub.stream, sub.forks[0]}) {
    auto ev = stream->next();
    ASSERT_TRUE(ev.has_value());
    auto* d = std::get_if<DoneEvent>(&*ev);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->reason, FinishReason::Error);
    EXPECT_TRUE(d->retryable) << d->message;
    EXPECT_FALSE(stream->next().has_value());
  }
  client->shutdown();
}

// Tokens a stream of request 1 holds unread, with `settings` sent to the worker: each Submit is
// answered with three tokens and a Done. Request 2 is a barrier: the reader thread handles frames
// in order, so once request 2 is done every frame of request 1 has been pushed.
size_t unread_tokens_kept(std::vector<std::pair<std::string, std::string>> settings) {
  std::vector<uint8_t> replies = proto::encode(proto::Hello{{"llama", "scripted", 64}, 1, {}});
  const size_t hello = replies.size();
  size_t chunk = 0;
  for (uint64_t id : {1, 2}) {
    const size_t before = replies.size();
    proto::append(replies, proto::Accepted{id});
    for (int32_t t = 0; t < 3; ++t)
      proto::append(replies, proto::Token{id, TokenEvent{t, 0.f, {}}});
    proto::append(replies, proto::Done{id, DoneEvent{}});
    chunk = replies.size() - before;
  }
  ReplyFile file(replies);
  SubprocessOptions o;
  o.argv = {"/usr/bin/python3",   "-c", kScriptedWorker, file.path.string(), std::to_string(hello),
            std::to_string(chunk)};
  o.settings = std::move(settings);
  auto client = SubprocessEngineClient::start(o);
  EXPECT_TRUE(client->wait_first_load(std::chrono::seconds(30)).ok());
  GenerateRequest g;
  g.prompt = {1};
  g.max_tokens = 3;
  auto first = client->submit(g);
  auto barrier = client->submit(g);
  EXPECT_TRUE(first.ok() && barrier.ok());
  if (!first.ok() || !barrier.ok()) return 0;
  while (barrier.stream->next()) {
  }
  size_t tokens = 0;
  while (auto ev = first.stream->next()) tokens += std::holds_alternative<TokenEvent>(*ev);
  client->shutdown();
  return tokens;
}

TEST(SubprocessClient, the_event_queue_capacity_is_the_engine_setting_sent_to_the_worker) {
  EXPECT_EQ(unread_tokens_kept({}), 3u);  // the table's default (1024) holds them all
  EXPECT_EQ(unread_tokens_kept({{"event-queue-capacity", "2"}}), 2u);
}

}  // namespace
}  // namespace ember::worker
