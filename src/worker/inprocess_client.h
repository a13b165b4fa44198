// The in-process EngineClient: the engine thread lives in this process (`--engine in-process`,
// `ember run`, tests). A thin, thread-safe forwarder; shutdown() destroys the engine, which
// ends every request with a terminal event and joins its thread.
#pragma once

#include <memory>
#include <mutex>
#include <set>

#include "model/backend.h"
#include "worker/engine_client.h"

namespace ember::worker {

class InProcessEngineClient final : public EngineClient {
 public:
  InProcessEngineClient(std::shared_ptr<model::Backend> backend, engine::EngineOptions opts);
  ~InProcessEngineClient() override;

  SubmitResult submit(GenerateRequest req) override;
  void cancel(uint64_t id, CancelCause cause) override;
  int cancel_all(CancelCause cause) override;
  EngineStats stats() const override;
  engine::WarmReport save_warm() override;
  const ModelInfo& model_info() const override { return info_; }
  void shutdown() override;

 private:
  ModelInfo info_;
  mutable std::mutex mu_;  // guards engine_ against shutdown() racing the other calls
  std::unique_ptr<engine::Engine> engine_;
  EngineStats last_stats_;  // what stats() reports after shutdown
};

}  // namespace ember::worker
