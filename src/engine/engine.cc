// The engine thread: mailbox, admission, the poll sites and the batched step. See engine.h for
// the contract; the comments here say why the code is shaped the way it is.
#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "base/log.h"
#include "engine/event_stream.h"
#include "engine/prefix_cache.h"
#include "engine/sampler.h"

namespace ember::engine {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

int64_t to_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// One request, from submit to its DoneEvent.
struct Req {
  uint64_t id = 0;
  GenerateRequest g;
  std::shared_ptr<EventChannel> ch;
  // Set (first writer wins) by Engine::cancel from any thread; read at every poll, so a cancel
  // that arrives while a hook blocks is seen by the re-poll without a trip through the mailbox.
  std::atomic<int> ext_cause{0};
  std::atomic<int64_t> ext_at_ns{0};  // when ext_cause was set (steady_clock)
  Clock::time_point t_submit, t_admit, t_first;

  // Engine thread only.
  std::shared_ptr<const GenHooks> hooks;  // snapshot taken at admission
  std::unique_ptr<model::Sequence> seq;
  std::optional<Sampler> sampler;
  int32_t prompt_len = 0;
  int32_t pos = 0;      // prompt tokens already prefilled
  int32_t max_gen = 0;  // max_tokens clipped to the context
  int32_t n_gen = 0;    // tokens delivered
  int32_t decode_step = 0;
  int32_t last = -1;         // the token the next decode step feeds
  std::vector<int32_t> gen;  // tokens delivered, in order (the history after the prompt)
  int32_t cached = 0;        // prompt tokens reused from the prefix cache
  int32_t published = 0;     // full blocks of this sequence offered to the prefix cache
  uint64_t chain_key = 0;    // prefix-cache key of block published - 1 (root if none)
  bool seeded = false;       // the first token has been produced
  bool finished = false;
  std::shared_ptr<TokenConstraint> constraint;  // this choice's own; null: any token
  // n > 1: choices 1..n-1, registered and counted but not yet active; they fork at the seed.
  std::vector<std::shared_ptr<Req>> forks;
};

enum class Site { PrefillChunk, Seed, DecodeStep };

}  // namespace

struct Engine::Impl {
  std::shared_ptr<model::Backend> backend;
  EngineOptions opts;
  int32_t n_ctx = 0;
  int32_t n_vocab = 0;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Req>> inbox;                       // guarded by mu
  std::unordered_map<uint64_t, std::shared_ptr<Req>> registry;  // guarded by mu
  int32_t in_flight = 0;                                        // guarded by mu
  std::shared_ptr<const GenHooks> hooks;                        // guarded by mu
  std::atomic<bool> shutdown{false};
  std::atomic<int64_t> shutdown_at_ns{0};  // when signal_shutdown first ran (steady_clock)
  uint64_t next_id = 1;                    // guarded by mu

  std::atomic<int32_t> n_active{0}, n_queued{0};
  std::atomic<uint64_t> n_steps{0}, n_tokens{0}, n_prompt{0};
  std::atomic<int64_t> kv_bytes{0};

  // Prefix cache and warm state (engine thread, or the constructor before the thread starts).
  std::unique_ptr<PrefixCache> cache;
  mutable std::mutex stats_mu;              // guards the two snapshots below
  PrefixCacheStats cache_stats;             // copied after each change
  EngineStats warm_stats;                   // warm_* fields only
  std::deque<std::function<void()>> tasks;  // guarded by mu: run on the engine thread
  bool stopped = false;                     // guarded by mu: the thread has left run()

  // Engine thread only.
  std::deque<std::shared_ptr<Req>> waiting;
  std::vector<std::shared_ptr<Req>> active;
  std::vector<Req*> batch;
  std::vector<model::ForwardItem> items;
  std::vector<float> logits;
  std::vector<float> shaped;  // one row of logits after logit_bias and the constraint's mask
  std::thread thread;

  void run();
  void run_tasks();
  void publish(Req& r);
  void sync_cache_stats();
  // KV memory of live sequences: the backend's live blocks minus those only the cache holds.
  int64_t sequence_kv_bytes() const {
    return backend->live_kv_bytes() - (cache ? cache->idle_bytes() : 0);
  }
  WarmReport load_warm();
  WarmReport save_warm();
  WarmReport on_engine_thread(std::function<WarmReport()> fn);
  void sweep_waiting();
  void admit(const std::shared_ptr<const GenHooks>& snapshot);
  void step();
  CancelCause check(Req& r, bool counted);
  Clock::time_point cancel_requested_at(const Req& r, Clock::time_point now) const;
  CancelCause poll_site(Req& r);
  void produce(Req& r, const float* row);
  void fork_choices(Req& parent, const float* row);
  void finish(Req& r, FinishReason reason, CancelCause cause, std::string message);
  std::optional<SubmitError> validate(const GenerateRequest& g) const;
  bool is_eog(int32_t tok) const {
    return std::find(opts.eog_tokens.begin(), opts.eog_tokens.end(), tok) != opts.eog_tokens.end();
  }
};

Engine::Engine(std::shared_ptr<model::Backend> backend, EngineOptions opts)
    : impl_(std::make_unique<Impl>()) {
  EMBER_ASSERT(backend != nullptr);
  EMBER_ASSERT(opts.max_sequences >= 1 && opts.max_queued >= 0);
  EMBER_ASSERT(opts.prefill_chunk >= 1 && opts.event_queue_capacity >= 1);
  impl_->backend = std::move(backend);
  impl_->opts = std::move(opts);
  impl_->n_ctx = impl_->backend->n_ctx();
  impl_->n_vocab = impl_->backend->config().n_vocab;
  if (impl_->opts.prefix_cache_bytes > 0) {
    impl_->cache =
        std::make_unique<PrefixCache>(impl_->backend->kv_layout(), impl_->opts.prefix_cache_bytes);
  }
  // Before the thread starts, so the engine serves nothing until warm state is in (or refused).
  if (!impl_->opts.warm.dir.empty() && impl_->opts.warm.load_at_start) impl_->load_warm();
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

Engine::~Engine() {
  signal_shutdown();
  impl_->thread.join();
}

const model::ModelConfig& Engine::model_config() const {
  return impl_->backend->config();
}
int32_t Engine::n_ctx() const {
  return impl_->n_ctx;
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.active = impl_->n_active.load();
  s.queued = impl_->n_queued.load();
  s.steps = impl_->n_steps.load();
  s.tokens_generated = impl_->n_tokens.load();
  s.prompt_tokens = impl_->n_prompt.load();
  s.kv_bytes = impl_->kv_bytes.load();
  std::lock_guard lk(impl_->stats_mu);
  const PrefixCacheStats& c = impl_->cache_stats;
  s.cache_hits = c.lookups_hit;
  s.cache_misses = c.lookups_miss;
  s.cache_evictions = c.evictions;
  s.cached_tokens = c.cached_tokens;
  s.cache_blocks = c.blocks;
  s.cache_bytes = c.bytes;
  const EngineStats& w = impl_->warm_stats;
  s.warm_blocks_loaded = w.warm_blocks_loaded;
  s.warm_load_seconds = w.warm_load_seconds;
  s.warm_bytes_written = w.warm_bytes_written;
  s.warm_save_seconds = w.warm_save_seconds;
  return s;
}

WarmReport Engine::load_warm_state() {
  return impl_->on_engine_thread([impl = impl_.get()] { return impl->load_warm(); });
}

WarmReport Engine::save_warm_state() {
  return impl_->on_engine_thread([impl = impl_.get()] { return impl->save_warm(); });
}

WarmReport Engine::Impl::on_engine_thread(std::function<WarmReport()> fn) {
  auto done = std::make_shared<std::promise<WarmReport>>();
  auto result = done->get_future();
  {
    std::unique_lock lk(mu);
    if (!stopped) {
      tasks.push_back([fn = std::move(fn), done] { done->set_value(fn()); });
      lk.unlock();
      cv.notify_all();
      return result.get();
    }
  }
  return fn();  // the thread has ended: its state is ours (ordered by mu)
}

void Engine::Impl::run_tasks() {
  std::deque<std::function<void()>> todo;
  {
    std::lock_guard lk(mu);
    todo.swap(tasks);
  }
  for (auto& t : todo) t();
}

// The report of a load or save: its result, or why not (logged as a warning).
static WarmReport outcome(Result<WarmReport> r, std::string_view failed) {
  if (r) return *r;
  WarmReport rep;
  rep.message = r.message();
  log::warn("ember: {}: {}", failed, rep.message);
  return rep;
}

WarmReport Engine::Impl::load_warm() {
  WarmReport rep;
  const std::string path = warm_file_path(opts.warm.dir);
  if (!cache) {
    rep.message = "no prefix cache (prefix_cache_bytes is 0): warm state not loaded";
    log::warn("ember: {}", rep.message);
    return rep;
  }
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    rep.ok = true;
    rep.message = "no warm state at " + path;
    log::info("ember: {}; starting cold", rep.message);
    return rep;
  }
  rep = outcome(load_warm_file(path, *backend, *cache, Clock::now() + opts.warm.io_budget),
                "warm state rejected, starting cold");
  if (!rep.ok) return rep;
  log::info("ember: warm state loaded: {} blocks ({} bytes) from {} in {:.3f} s", rep.blocks,
            rep.bytes, path, rep.seconds);
  {
    std::lock_guard lk(stats_mu);
    warm_stats.warm_blocks_loaded += rep.blocks;
    warm_stats.warm_load_seconds = rep.seconds;
  }
  kv_bytes.store(sequence_kv_bytes());
  sync_cache_stats();
  return rep;
}

WarmReport Engine::Impl::save_warm() {
  WarmReport rep;
  if (!cache || opts.warm.dir.empty()) {
    rep.message = "no prefix cache or no warm-cache directory: nothing saved";
    return rep;
  }
  const std::string path = warm_file_path(opts.warm.dir);
  std::error_code ec;
  std::filesystem::create_directories(opts.warm.dir, ec);
  rep = outcome(save_warm_file(path, *cache, opts.warm, Clock::now() + opts.warm.io_budget),
                "warm state not saved");
  if (!rep.ok) return rep;
  log::info("ember: warm state saved: {} blocks ({} bytes) to {} in {:.3f} s", rep.blocks,
            rep.bytes, path, rep.seconds);
  std::lock_guard lk(stats_mu);
  warm_stats.warm_bytes_written += uint64_t(rep.bytes);
  warm_stats.warm_save_seconds = rep.seconds;
  return rep;
}

void Engine::Impl::sync_cache_stats() {
  if (!cache) return;
  std::lock_guard lk(stats_mu);
  cache_stats = cache->stats();
}

// Offers the sequence's newly full blocks to the cache. Its tokens are the prompt followed by
// the delivered tokens; the sequence never holds more than that. Runs right after every
// forward: a sequence past a sliding window keeps the blocks that forward filled whole only
// until its next forward (model::Sequence::block).
void Engine::Impl::publish(Req& r) {
  if (!cache || !r.seq) return;
  const int32_t B = cache->block_tokens();
  if ((r.published + 1) * B > r.seq->length()) return;  // the common decode step: nothing new
  std::vector<int32_t> toks(static_cast<size_t>(B));
  bool changed = false;
  while ((r.published + 1) * B <= r.seq->length()) {
    const int32_t p0 = r.published * B;
    for (int32_t j = 0; j < B; ++j) {
      const int32_t p = p0 + j;
      toks[size_t(j)] = p < r.prompt_len ? r.g.prompt[size_t(p)] : r.gen[size_t(p - r.prompt_len)];
    }
    r.chain_key = cache->insert(r.chain_key, r.published, toks, r.seq->block(r.published));
    ++r.published;
    changed = true;
  }
  if (changed) sync_cache_stats();
}

void Engine::set_hooks(GenHooks h) {
  std::shared_ptr<const GenHooks> p;
  if (h.on_before_prefill_chunk || h.on_before_seed || h.on_before_decode_step) {
    p = std::make_shared<const GenHooks>(std::move(h));
  }
  std::lock_guard lk(impl_->mu);
  impl_->hooks = std::move(p);
}

void Engine::signal_shutdown() {
  {
    std::lock_guard lk(impl_->mu);
    if (!impl_->shutdown.load()) impl_->shutdown_at_ns.store(to_ns(Clock::now()));
    impl_->shutdown.store(true);
  }
  impl_->cv.notify_all();
}

void Engine::cancel(uint64_t id, CancelCause cause) {
  if (cause == CancelCause::None) cause = CancelCause::Client;
  std::lock_guard lk(impl_->mu);
  auto it = impl_->registry.find(id);
  if (it == impl_->registry.end()) return;  // already finished: nothing to stop
  int expected = 0;
  Req& r = *it->second;
  const int64_t at = to_ns(Clock::now());
  if (r.ext_cause.load() == 0) r.ext_at_ns.store(at);  // before the cause: a poll that sees
  r.ext_cause.compare_exchange_strong(expected, static_cast<int>(cause));  // it sees the time
  impl_->cv.notify_all();
}

int Engine::cancel_all(CancelCause cause) {
  if (cause == CancelCause::None) cause = CancelCause::Client;
  std::lock_guard lk(impl_->mu);
  int n = 0;
  for (auto& [id, r] : impl_->registry) {
    int expected = 0;
    if (r->ext_cause.compare_exchange_strong(expected, static_cast<int>(cause))) n++;
  }
  impl_->cv.notify_all();
  return n;
}

std::optional<SubmitError> Engine::Impl::validate(const GenerateRequest& g) const {
  using K = SubmitError::Kind;
  auto bad = [](K k, std::string m) { return SubmitError{k, std::move(m)}; };
  if (g.prompt.empty()) return bad(K::InvalidRequest, "prompt is empty");
  // The one owner of the context check: the prompt must leave room for one generated token.
  if (g.prompt.size() >= size_t(n_ctx)) {
    return bad(K::PromptTooLong,
               fmt::format("the prompt has {} tokens, but this model's context holds {} tokens "
                           "(prompt and answer together)",
                           g.prompt.size(), n_ctx));
  }
  for (size_t i = 0; i < g.prompt.size(); ++i) {
    if (g.prompt[i] < 0 || g.prompt[i] >= n_vocab) {
      return bad(K::InvalidRequest,
                 fmt::format("prompt token {} at position {} is outside the vocabulary (0..{})",
                             g.prompt[i], i, n_vocab - 1));
    }
  }
  if (g.max_tokens < 1) {
    return bad(K::InvalidRequest,
               fmt::format("max_tokens must be at least 1 (got {})", g.max_tokens));
  }
  const SamplingParams& s = g.sampling;
  // The ranges are checked where the values come in (request.h): a bug if they arrive wrong.
  EMBER_ASSERT(sampling_in_range(s));
  for (const auto& [id, bias] : s.logit_bias) {
    if (id < 0 || id >= n_vocab || !std::isfinite(bias)) {
      return bad(K::InvalidRequest,
                 fmt::format("logit_bias: token {} (bias {}) is outside the vocabulary (0..{}) "
                             "or not finite",
                             id, bias, n_vocab - 1));
    }
  }
  if (g.n < 1) return bad(K::InvalidRequest, fmt::format("n must be at least 1 (got {})", g.n));
  if (g.n > opts.max_sequences) {
    return bad(K::InvalidRequest, fmt::format("n is {}, but at most {} sequences run at once", g.n,
                                              opts.max_sequences));
  }
  return std::nullopt;
}

SubmitResult Engine::submit(GenerateRequest req) {
  SubmitResult res;
  if (auto err = impl_->validate(req)) {
    res.error = std::move(err);
    return res;
  }
  auto r = std::make_shared<Req>();
  r->g = std::move(req);
  r->prompt_len = static_cast<int32_t>(r->g.prompt.size());
  r->t_submit = Clock::now();
  r->constraint = r->g.constraint;
  const int32_t n = r->g.n;
  {
    std::lock_guard lk(impl_->mu);
    if (impl_->shutdown.load()) {
      res.error = SubmitError{SubmitError::Kind::ShuttingDown, "engine is shutting down"};
      return res;
    }
    const int32_t limit = impl_->opts.max_sequences + impl_->opts.max_queued;
    if (impl_->in_flight + n > limit) {
      // Fail fast rather than queue without bound: the caller can shed load (HTTP 503).
      res.error = SubmitError{
          SubmitError::Kind::Overloaded,
          fmt::format("engine overloaded: {} requests in flight (max_sequences {} + max_queued "
                      "{}); retry later",
                      impl_->in_flight, impl_->opts.max_sequences, impl_->opts.max_queued)};
      return res;
    }
    auto enlist = [&](Req& q) {
      q.id = impl_->next_id++;
      q.ch = std::make_shared<EventChannel>(q.id, impl_->opts.event_queue_capacity);
      impl_->in_flight++;
      impl_->n_queued.fetch_add(1);
    };
    enlist(*r);
    res.stream = std::make_shared<StreamHandle>(r->ch);
    for (int32_t i = 1; i < n; ++i) {
      auto f = std::make_shared<Req>();
      f->g.sampling = r->g.sampling;
      f->g.sampling.seed = r->g.sampling.seed + uint64_t(i);
      f->g.max_tokens = r->g.max_tokens;
      f->g.cancel = r->g.cancel;
      f->g.deadline = r->g.deadline;
      f->prompt_len = r->prompt_len;
      f->t_submit = r->t_submit;
      enlist(*f);
      impl_->registry[f->id] = f;
      res.forks.push_back(std::make_shared<StreamHandle>(f->ch));
      r->forks.push_back(std::move(f));
    }
    impl_->registry[r->id] = r;
    impl_->inbox.push_back(std::move(r));
  }
  impl_->cv.notify_all();
  return res;
}

void Engine::Impl::run() {
  for (;;) {
    run_tasks();
    std::shared_ptr<const GenHooks> snapshot;
    {
      std::unique_lock lk(mu);
      if (active.empty() && waiting.empty()) {
        cv.wait(lk, [&] { return !inbox.empty() || !tasks.empty() || shutdown.load(); });
        if (!tasks.empty()) continue;  // warm-state calls run at the top of the loop
        // Decided under the lock that submit() takes: once shutdown is set submit() refuses,
        // so an inbox empty now stays empty and no accepted request misses its DoneEvent.
        if (shutdown.load() && inbox.empty()) break;
      }
      while (!inbox.empty()) {
        waiting.push_back(std::move(inbox.front()));
        inbox.pop_front();
      }
      snapshot = hooks;
    }
    sweep_waiting();
    admit(snapshot);
    if (active.empty()) continue;  // shutdown ends the loop above, with the inbox checked
    step();
  }
  {
    std::lock_guard lk(mu);
    stopped = true;
  }
  run_tasks();  // posted before `stopped` was set
  // Every request has ended: the cache holds all there is to keep.
  if (!opts.warm.dir.empty() && opts.warm.save_at_exit) save_warm();
}

// Cause to stop `r` now, or None. `counted`: the site's one counted poll of the request's
// token (is_cancelled); the re-poll after the hook only peeks, so a budget of n is n steps.
CancelCause Engine::Impl::check(Req& r, bool counted) {
  const bool tok = counted ? r.g.cancel.is_cancelled() : r.g.cancel.peek_cancelled();
  if (int ext = r.ext_cause.load(std::memory_order_acquire)) return static_cast<CancelCause>(ext);
  if (tok) return r.g.cancel.peek_cancelled() ? CancelCause::Client : CancelCause::Budget;
  if (shutdown.load(std::memory_order_acquire)) return CancelCause::Shutdown;
  if (r.g.deadline && Clock::now() >= *r.g.deadline) return CancelCause::Deadline;
  if (r.ch->consumer_gone()) return CancelCause::Client;
  return CancelCause::None;
}

// Queued requests can be cancelled too; they are checked without counting a poll, since no
// step of theirs is about to run.
void Engine::Impl::sweep_waiting() {
  for (auto& r : waiting) {
    CancelCause c = check(*r, /*counted=*/false);
    if (c != CancelCause::None) finish(*r, FinishReason::Cancelled, c, "");
  }
  std::erase_if(waiting, [](const auto& r) { return r->finished; });
}

void Engine::Impl::admit(const std::shared_ptr<const GenHooks>& snapshot) {
  while (!waiting.empty()) {
    // A request with n choices needs n slots (its forks join at the seed).
    const size_t need = 1 + waiting.front()->forks.size();
    if (active.size() + need > size_t(opts.max_sequences)) break;
    std::shared_ptr<Req> r = std::move(waiting.front());
    waiting.pop_front();
    r->t_admit = Clock::now();
    r->hooks = snapshot;
    r->max_gen = std::min(r->g.max_tokens, n_ctx - r->prompt_len);
    n_queued.fetch_sub(int32_t(need));
    n_active.fetch_add(int32_t(need));
    n_prompt.fetch_add(uint64_t(r->prompt_len));
    for (auto& f : r->forks) {
      f->t_admit = r->t_admit;
      f->hooks = snapshot;
      f->max_gen = r->max_gen;
    }
    EMBER_ASSERT(r->max_gen >= 1);  // validate(): the prompt leaves room for one token
    // A fresh sequence per request, destroyed at finish: no state can leak between requests.
    // It starts on the longest cached prefix, leaving at least one prompt token for the seed.
    std::vector<model::KvBlockRef> prefix;
    r->chain_key = cache ? cache->root() : 0;
    if (cache) {
      const int32_t max_blocks = (r->prompt_len - 1) / cache->block_tokens();
      prefix = cache->match(r->g.prompt, max_blocks, r->chain_key);
      r->published = static_cast<int32_t>(prefix.size());
      r->cached = r->published * cache->block_tokens();
      r->pos = r->cached;
      sync_cache_stats();
    }
    r->seq = backend->new_sequence(r->prompt_len + r->max_gen, prefix);
    r->sampler.emplace(r->g.sampling, n_vocab);
    r->sampler->add_prompt(r->g.prompt);
    kv_bytes.store(sequence_kv_bytes());
    active.push_back(std::move(r));
  }
}

// poll -> hook -> re-poll. The site is the work `r` does in this step.
CancelCause Engine::Impl::poll_site(Req& r) {
  CancelCause c = check(r, /*counted=*/true);
  if (c != CancelCause::None) return c;
  const GenHooks* h = r.hooks.get();
  if (h) {
    if (r.seeded) {
      if (h->on_before_decode_step) h->on_before_decode_step(r.id, r.decode_step);
    } else if (r.prompt_len - r.pos > opts.prefill_chunk) {
      if (h->on_before_prefill_chunk) h->on_before_prefill_chunk(r.id, r.pos);
    } else {
      if (h->on_before_seed) h->on_before_seed(r.id);
    }
  }
  return check(r, /*counted=*/false);
}

void Engine::Impl::step() {
  batch.clear();
  for (auto& r : active) {
    CancelCause c = poll_site(*r);
    if (c != CancelCause::None) {
      finish(*r, FinishReason::Cancelled, c, "");
    } else {
      batch.push_back(r.get());
    }
  }
  // A later request's hook may have blocked after an earlier one's re-poll: peek once more so
  // a cancel that arrived meanwhile does not run this step's work.
  std::erase_if(batch, [&](Req* r) {
    CancelCause c = check(*r, /*counted=*/false);
    if (c == CancelCause::None) return false;
    finish(*r, FinishReason::Cancelled, c, "");
    return true;
  });

  items.clear();
  size_t n_rows = 0;
  for (Req* r : batch) {
    model::ForwardItem it;
    it.seq = r->seq.get();
    if (!r->seeded) {
      // Non-final chunks are prefill_chunk long; the final chunk (the rest) is the seed.
      const int32_t n = std::min(opts.prefill_chunk, r->prompt_len - r->pos);
      it.tokens = std::span<const int32_t>(r->g.prompt.data() + r->pos, size_t(n));
      it.want_logits = r->pos + n == r->prompt_len;
    } else {
      it.tokens = std::span<const int32_t>(&r->last, 1);
      it.want_logits = true;
    }
    n_rows += it.want_logits ? 1 : 0;
    items.push_back(it);
  }
  if (!items.empty()) {
    logits.resize(n_rows * size_t(n_vocab));
    Status st = backend->forward(items, logits);
    n_steps.fetch_add(1);
    if (!st.ok()) {
      for (Req* r : batch) {
        finish(*r, FinishReason::Error, CancelCause::None, "model forward failed: " + st.message());
      }
    } else {
      size_t row = 0;
      for (size_t i = 0; i < batch.size(); ++i) {
        Req& r = *batch[i];
        publish(r);
        if (!items[i].want_logits) {
          r.pos += static_cast<int32_t>(items[i].tokens.size());
          continue;
        }
        produce(r, logits.data() + row * size_t(n_vocab));
        ++row;
      }
    }
  }
  std::erase_if(active, [](const auto& r) { return r->finished; });
}

// n > 1: at the seed, each pending choice takes a copy of the prefilled sequence and samples
// its first token from the same logits. A choice cancelled meanwhile ends here, unforked.
void Engine::Impl::fork_choices(Req& parent, const float* row) {
  std::vector<std::shared_ptr<Req>> forks = std::move(parent.forks);
  parent.forks.clear();
  for (auto& f : forks) {
    CancelCause c = check(*f, /*counted=*/false);
    if (c != CancelCause::None) {
      finish(*f, FinishReason::Cancelled, c, "");
      continue;
    }
    f->seq = backend->fork_sequence(*parent.seq, f->prompt_len + f->max_gen);
    f->sampler.emplace(f->g.sampling, n_vocab);
    f->sampler->add_prompt(parent.g.prompt);
    if (parent.constraint) f->constraint = parent.constraint->clone();
    // The fork holds the parent's blocks: it continues the parent's prefix-cache chain (and
    // publishes its own later blocks, which start with the prompt's tail, so it needs the
    // prompt). The prompt and its cached part are reported once, by the parent.
    if (cache) f->g.prompt = parent.g.prompt;
    f->published = parent.published;
    f->chain_key = parent.chain_key;
    Req& q = *f;
    active.push_back(std::move(f));  // before produce: finish() may run and must find it there
    produce(q, row);
  }
  kv_bytes.store(sequence_kv_bytes());
}

// Samples the next token from `row` and delivers it (or finishes the request).
void Engine::Impl::produce(Req& r, const float* row) {
  if (!r.seeded) {
    r.pos = r.prompt_len;
    r.seeded = true;
    r.t_first = Clock::now();
    if (!r.forks.empty()) fork_choices(r, row);
  } else {
    ++r.decode_step;
  }
  std::span<const float> use(row, size_t(n_vocab));
  if (!r.g.sampling.logit_bias.empty() || r.constraint) {
    shaped.assign(row, row + n_vocab);
    for (const auto& [id, bias] : r.g.sampling.logit_bias) shaped[size_t(id)] += bias;
    if (r.constraint && !r.constraint->mask(shaped)) {
      finish(r, FinishReason::Error, CancelCause::None,
             "the output constraint allows no token at this point");
      return;
    }
    use = shaped;
  }
  TokenChoice c = r.sampler->sample(use);
  if (is_eog(c.token)) {  // the end-of-generation token itself is not part of the output
    finish(r, FinishReason::Stop, CancelCause::None, "");
    return;
  }
  r.sampler->accept(c.token);
  if (cache) r.gen.push_back(c.token);
  if (r.constraint) r.constraint->accept(c.token);
  if (!r.ch->push_token(TokenEvent{c.token, c.logprob, std::move(c.top)})) {
    finish(r, FinishReason::Cancelled, CancelCause::SlowConsumer,
           fmt::format("consumer fell {} events behind", opts.event_queue_capacity));
    return;
  }
  ++r.n_gen;
  n_tokens.fetch_add(1);
  if (r.constraint && r.constraint->complete()) {
    finish(r, FinishReason::Stop, CancelCause::None, "");
    return;
  }
  if (r.n_gen >= r.max_gen) {
    finish(r, FinishReason::Length, CancelCause::None, "");
    return;
  }
  r.last = c.token;
}

// The earliest moment anyone asked `r` to stop, as far as the engine knows; `now` when the
// cause carries no time (a dropped stream, a spent budget, a slow consumer).
Clock::time_point Engine::Impl::cancel_requested_at(const Req& r, Clock::time_point now) const {
  Clock::time_point t = now;
  auto earlier = [&](int64_t ns) {
    if (ns != 0) t = std::min(t, Clock::time_point(std::chrono::nanoseconds(ns)));
  };
  earlier(r.ext_at_ns.load());
  earlier(shutdown_at_ns.load());
  if (auto at = r.g.cancel.cancelled_at()) t = std::min(t, *at);
  if (r.g.deadline) t = std::min(t, *r.g.deadline);
  return t;
}

// Releases the request's resources, THEN delivers its DoneEvent: a consumer that has seen the
// DoneEvent can rely on stats() and the backend's live KV memory no longer counting it.
void Engine::Impl::finish(Req& r, FinishReason reason, CancelCause cause, std::string message) {
  EMBER_ASSERT(!r.finished);
  // Choices not yet forked end with their request (they share its prompt and its fate).
  for (auto& f : r.forks) finish(*f, reason, cause, message);
  r.forks.clear();
  r.finished = true;
  const auto now = Clock::now();
  const bool admitted = r.t_admit != Clock::time_point{};
  if (admitted) {
    r.seq.reset();
    r.sampler.reset();
    r.constraint.reset();
    if (cache) {
      cache->evict_to_budget();  // blocks this sequence held may be evictable now
      sync_cache_stats();
    }
    kv_bytes.store(sequence_kv_bytes());
    n_active.fetch_sub(1);
  } else {
    n_queued.fetch_sub(1);
  }
  {
    std::lock_guard lk(mu);
    registry.erase(r.id);
    in_flight--;
  }
  DoneEvent d;
  d.reason = reason;
  d.cause = cause;
  d.usage.prompt_tokens = r.prompt_len;
  d.usage.completion_tokens = r.n_gen;
  d.usage.cached_tokens = r.cached;
  d.timings.queued_ms = ms_between(r.t_submit, admitted ? r.t_admit : now);
  if (admitted) d.timings.prefill_ms = ms_between(r.t_admit, r.seeded ? r.t_first : now);
  if (r.seeded) d.timings.decode_ms = ms_between(r.t_first, now);
  if (reason == FinishReason::Cancelled) {
    d.timings.cancel_phase = !admitted                                   ? CancelPhase::Queued
                             : r.seeded                                  ? CancelPhase::Decode
                             : r.prompt_len - r.pos > opts.prefill_chunk ? CancelPhase::Prefill
                                                                         : CancelPhase::Seed;
    d.timings.cancel_ms = ms_between(cancel_requested_at(r, now), now);
  }
  if (reason == FinishReason::Cancelled && message.empty()) {
    message = fmt::format("cancelled ({}) after {} tokens", cancel_cause_name(cause), r.n_gen);
  }
  d.message = std::move(message);
  r.ch->push_done(std::move(d));
}

}  // namespace ember::engine
