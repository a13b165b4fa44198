// The submission: a prepared request into the engine and its answer back out over the
// connection, whatever the wire format. It owns
// - the engine requests: one per prompt, n choices each, all sharing one CancelToken, their
//   event streams and the wakers that bring the engine's events to the connection's executor;
// - the disconnect watch: a read on the socket while the answer is produced, which cancels
//   every choice the moment the client is seen to leave (details in submission.cc);
// - every write of the answer, each under the write deadline: a write that fails cancels too.
// Dropping a Submission drops its streams, which cancels whatever still runs (a handler torn
// down early by an exception leaks no engine work).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "server/constraint.h"
#include "server/server_impl.h"
#include "worker/types.h"

namespace ember::server {

// What the engine is asked for.
struct SubmitSpec {
  std::vector<std::vector<int32_t>> prompts;  // one engine request each
  worker::SamplingParams sampling;
  int32_t max_tokens = 0;
  int32_t n = 1;  // choices per prompt (choice i of a prompt samples with seed + i)
  ConstraintSpec constraint_spec;  // the output constraint asked for (empty spec: none)
  // Built from it: compiled, or unbuilt for an engine worker to compile. The driver compiles
  // a spec left unbuilt before submitting (server/generation.h).
  std::shared_ptr<worker::TokenConstraint> constraint;
  const char* prompt_param = "messages";  // named by a context-length error
};

class Submission {
 public:
  using Clock = std::chrono::steady_clock;
  struct Watch;
  struct Wake;

  // Submits every prompt; the choices are numbered prompt by prompt. On a refusal, cancels
  // what was already submitted and returns the error.
  static std::variant<std::unique_ptr<Submission>, ApiError> submit(
      Server::Impl& s, std::shared_ptr<Conn> c, std::shared_ptr<worker::EngineClient> engine,
      SubmitSpec spec);
  ~Submission();
  Submission(const Submission&) = delete;
  Submission& operator=(const Submission&) = delete;

  size_t size() const { return streams_.size(); }
  // The next event the engine sent for a choice, if any.
  std::optional<worker::Event> next(size_t choice);
  // A stop string ended this choice: the engine stops it (the others go on).
  void end_choice(size_t choice);

  // Starts watching the socket. `stream`: the answer is an SSE stream, probed with SSE
  // comments after a half-close; otherwise `interim_100` says whether an interim
  // `100 Continue` may probe (HTTP/1.1, nothing written yet).
  void watch(bool stream, bool interim_100);
  // Until an engine event, a departure, or a due probe (cleared when it returns).
  asio::awaitable<void> wait();

  // Streaming: the head, then each piece as one HTTP chunk, then the last chunk.
  asio::awaitable<void> write_head(const Request& req, std::string_view route,
                                   const char* content_type);
  asio::awaitable<void> write_piece(const std::string& piece);
  asio::awaitable<void> probe();  // a half-closed stream's probe, when one is due
  asio::awaitable<void> write_end();
  // Not streaming: the whole answer; returns whether the connection may be kept.
  asio::awaitable<bool> send(const Request& req, std::string_view route, const Reply& reply);

  bool writable() const;
  bool client_gone() const;
  // Why the server cancelled (the client left, or stopped reading), if it did.
  std::optional<worker::CancelCause> cause() const;
  // When the front first had evidence that the client was gone (see submission.cc).
  std::optional<Clock::time_point> gone_at() const;

  // Stops the watch and waits until its read has ended (the next request reads the socket).
  // Returns `keep` unless the client left, half-closed, or sent too much to keep.
  asio::awaitable<bool> close(bool keep);

 private:
  Submission(Server::Impl& s, std::shared_ptr<Conn> c);
  void cancel_all(worker::CancelCause cause);
  void on_write(const boost::system::error_code& ec);

  Server::Impl& s_;
  std::shared_ptr<Conn> c_;
  std::shared_ptr<worker::EngineClient> engine_;
  worker::CancelToken token_;
  std::vector<std::shared_ptr<worker::EventStream>> streams_;
  std::vector<uint64_t> rids_;
  std::shared_ptr<Wake> wake_;
  std::shared_ptr<Watch> watch_;
  bool write_failed_ = false;
};

}  // namespace ember::server
