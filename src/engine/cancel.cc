#include "engine/cancel.h"

namespace ember::engine {

CancelToken CancelToken::make() {
  CancelToken t;
  t.s_ = std::make_shared<State>();
  return t;
}

CancelToken CancelToken::with_budget(uint64_t n) {
  CancelToken t = make();
  t.s_->budget = n;
  return t;
}

CancelOnDrop CancelToken::cancel_on_drop() const {
  return CancelOnDrop(*this);
}

CancelOnDrop& CancelOnDrop::operator=(CancelOnDrop&& o) noexcept {
  if (this != &o) {
    if (armed_) token_.cancel();  // the guard being replaced still honours its promise
    token_ = o.token_;
    armed_ = o.armed_;
    o.armed_ = false;
  }
  return *this;
}

}  // namespace ember::engine
