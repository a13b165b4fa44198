#include "worker/inprocess_client.h"

namespace ember::worker {

InProcessEngineClient::InProcessEngineClient(std::shared_ptr<model::Backend> backend,
                                             engine::EngineOptions opts)
    : config_(backend->config()), n_ctx_(backend->n_ctx()) {
  engine_ = std::make_unique<engine::Engine>(std::move(backend), std::move(opts));
}

InProcessEngineClient::~InProcessEngineClient() {
  shutdown();
}

engine::SubmitResult InProcessEngineClient::submit(engine::GenerateRequest req) {
  std::lock_guard lock(mu_);
  if (!engine_) {
    engine::SubmitResult r;
    r.error = engine::SubmitError{engine::SubmitError::Kind::ShuttingDown, "engine has stopped"};
    return r;
  }
  return engine_->submit(std::move(req));
}

void InProcessEngineClient::cancel(uint64_t id, engine::CancelCause cause) {
  std::lock_guard lock(mu_);
  if (engine_) engine_->cancel(id, cause);
}

engine::EngineStats InProcessEngineClient::stats() const {
  std::lock_guard lock(mu_);
  return engine_ ? engine_->stats() : last_stats_;
}

void InProcessEngineClient::shutdown() {
  std::unique_ptr<engine::Engine> dying;
  {
    std::lock_guard lock(mu_);
    if (!engine_) return;
    engine_->signal_shutdown();
    last_stats_ = engine_->stats();
    dying = std::move(engine_);
  }
  dying.reset();  // joins the engine thread outside the lock: stats()/cancel() stay responsive
}

}  // namespace ember::worker
