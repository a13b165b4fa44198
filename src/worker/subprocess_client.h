// The subprocess EngineClient (`--engine subprocess`, the default): the engine runs in a worker
// process (`ember engine`) started in its own process group, spoken to through the worker
// protocol (worker/protocol.h). One supervisor thread per client starts the worker, reads its
// stdout and demultiplexes events to per-request streams; when the worker dies it ends the
// in-flight requests with a retryable error, reports itself unavailable (/ready 503), and
// restarts the worker with capped exponential backoff (counted in stats().worker_restarts).
// shutdown() runs the stop ladder (close stdin → wait → SIGTERM → wait → SIGKILL).
//
// Invariants: request ids are assigned here (1, 2, ...; a request with n choices takes n
// consecutive ids, one per choice stream), never reused across restarts; every
// stream handed out gets exactly one DoneEvent — from the worker, or from this client when the
// worker is lost or the client shuts down; the worker is spawned from the supervisor thread,
// which lives as long as the worker (PR_SET_PDEATHSIG follows the spawning thread). A model
// that fails to load in the first worker is not retried: wait_first_load() reports it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "process/child.h"
#include "process/stop_ladder.h"
#include "worker/engine_client.h"
#include "worker/protocol.h"

namespace ember::engine {
class EventChannel;
}

namespace ember::worker {

struct SubprocessOptions {
  std::vector<std::string> argv;  // the worker's command line: {ember, "engine", ...}
  std::vector<std::pair<std::string, std::string>> settings;  // sent in the Configure frame
  std::vector<int32_t> eog_tokens;                            // likewise
  process::LadderWindows ladder;
  std::chrono::milliseconds backoff_initial{250};
  std::chrono::milliseconds backoff_max{10'000};
  std::chrono::milliseconds stable_after{60'000};  // a worker up this long resets the backoff
  std::chrono::milliseconds submit_timeout{10'000};
  // The per-request event queue's capacity is the engine's --event-queue-capacity, read from
  // `settings` (the table's default when they leave it out), as the worker reads it.
};

class SubprocessEngineClient final : public EngineClient,
                                     public std::enable_shared_from_this<SubprocessEngineClient> {
 public:
  static std::shared_ptr<SubprocessEngineClient> start(SubprocessOptions opts);
  ~SubprocessEngineClient() override;

  // Blocks until the first worker has loaded its model (its ModelInfo) or failed to.
  Result<ModelInfo> wait_first_load(std::chrono::milliseconds timeout);

  SubmitResult submit(GenerateRequest req) override;
  void cancel(uint64_t id, CancelCause cause) override;
  int cancel_all(CancelCause cause) override;
  EngineStats stats() const override;
  engine::WarmReport save_warm() override;
  const ModelInfo& model_info() const override { return info_; }
  bool builds_constraints() const override { return true; }
  void shutdown() override;
  void kill_now() override;
  std::string stop_description() const override;

  pid_t worker_pid() const;          // 0 while none runs
  void stream_dropped(uint64_t id);  // a consumer let go before its DoneEvent: cancel

 private:
  explicit SubprocessEngineClient(SubprocessOptions opts);
  enum class State { Starting, Up, Down, Stopping, Stopped };
  enum class Admission { Pending, Accepted, Rejected, Lost };
  struct Live {
    std::shared_ptr<engine::EventChannel> ch;
    Admission admission = Admission::Pending;
    SubmitError rejection;
    uint64_t base = 0;  // the Submit's id: choices 1..n-1 of it are base + i
    // The entry stays until submit() has taken its stream (claimed) and it has ended: its
    // Done may arrive right behind its Accepted, before the submitting thread wakes up.
    bool claimed = false;
    bool ended = false;
  };

  void supervise();
  void read_events(process::Child& child);
  void dispatch(const proto::Frame& f, process::Child& child);
  void lose_all(const std::string& why);  // the worker died: end every request, retryable
  // Ends every accepted request still open with `done` and answers pending submits with
  // unavailable (Lost); entries a submit has yet to claim stay for it. Called with mu_ held.
  void end_all(const DoneEvent& done);
  bool send(const std::vector<uint8_t>& frame);

  const SubprocessOptions opts_;
  const int32_t event_queue_capacity_;  // from opts_.settings
  mutable std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::Starting;
  bool stopping_ = false;
  bool ever_loaded_ = false;
  std::optional<std::string> first_error_;
  ModelInfo info_;  // written once, before wait_first_load() returns
  std::shared_ptr<process::Child> child_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Live> live_;
  EngineStats last_stats_;
  uint64_t warm_asked_ = 0;     // SaveWarm frames sent to the current worker
  uint64_t warm_answered_ = 0;  // WarmSaved frames it sent back (in order)
  engine::WarmReport last_warm_;
  uint64_t restarts_ = 0;
  std::string stop_description_ = "not stopped";
  std::thread supervisor_;
};

}  // namespace ember::worker
