// The in-process EngineClient: the engine thread lives in this process (`--engine in-process`,
// `ember run`, tests). A thin, thread-safe forwarder; shutdown() destroys the engine, which
// ends every request with a terminal event and joins its thread.
#pragma once

#include <memory>
#include <mutex>

#include "worker/engine_client.h"

namespace ember::worker {

class InProcessEngineClient final : public EngineClient {
 public:
  InProcessEngineClient(std::shared_ptr<model::Backend> backend, engine::EngineOptions opts);
  ~InProcessEngineClient() override;

  engine::SubmitResult submit(engine::GenerateRequest req) override;
  void cancel(uint64_t id, engine::CancelCause cause) override;
  engine::EngineStats stats() const override;
  const model::ModelConfig& model_config() const override { return config_; }
  int32_t n_ctx() const override { return n_ctx_; }
  void shutdown() override;

 private:
  model::ModelConfig config_;
  int32_t n_ctx_ = 0;
  mutable std::mutex mu_;  // guards engine_ against shutdown() racing the other calls
  std::unique_ptr<engine::Engine> engine_;
  engine::EngineStats last_stats_;  // what stats() reports after shutdown
};

}  // namespace ember::worker
