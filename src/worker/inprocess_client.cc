#include "worker/inprocess_client.h"

namespace ember::worker {

InProcessEngineClient::InProcessEngineClient(std::shared_ptr<model::Backend> backend,
                                             engine::EngineOptions opts) {
  info_.arch_name = backend->config().arch_name;
  info_.name = backend->config().name;
  info_.n_ctx = backend->n_ctx();
  engine_ = std::make_unique<engine::Engine>(std::move(backend), std::move(opts));
}

InProcessEngineClient::~InProcessEngineClient() {
  shutdown();
}

SubmitResult InProcessEngineClient::submit(GenerateRequest req) {
  std::lock_guard lock(mu_);
  SubmitResult r;
  if (!engine_) {
    r.error = SubmitError{SubmitError::Kind::ShuttingDown, "engine has stopped"};
    return r;
  }
  auto sub = engine_->submit(std::move(req));
  r.stream = std::move(sub.stream);
  r.forks = std::move(sub.forks);
  if (sub.error) r.error = from_engine(*sub.error);
  return r;
}

void InProcessEngineClient::cancel(uint64_t id, CancelCause cause) {
  std::lock_guard lock(mu_);
  if (engine_) engine_->cancel(id, cause);
}

int InProcessEngineClient::cancel_all(CancelCause cause) {
  std::lock_guard lock(mu_);
  return engine_ ? engine_->cancel_all(cause) : 0;
}

EngineStats InProcessEngineClient::stats() const {
  std::lock_guard lock(mu_);
  return engine_ ? from_engine(engine_->stats()) : last_stats_;
}

engine::WarmReport InProcessEngineClient::save_warm() {
  std::lock_guard lock(mu_);  // a shutdown waits for the save (rare, and bounded by io_budget)
  if (!engine_) return {.message = "the engine has stopped"};
  return engine_->save_warm_state();
}

void InProcessEngineClient::shutdown() {
  std::unique_ptr<engine::Engine> dying;
  {
    std::lock_guard lock(mu_);
    if (!engine_) return;
    engine_->signal_shutdown();
    last_stats_ = from_engine(engine_->stats());
    last_stats_.available = false;
    dying = std::move(engine_);
  }
  dying.reset();  // joins the engine thread outside the lock: stats()/cancel() stay responsive
}

}  // namespace ember::worker
