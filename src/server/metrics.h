// Server metrics in the Prometheus text exposition format (version 0.0.4), written by hand.
// Thread-safe: HTTP threads record, /metrics renders. Names are stable API for dashboards:
//   ember_http_requests_total{route,status}      counter
//   ember_prompt_tokens_total, ember_generated_tokens_total   counters
//   ember_time_to_first_token_seconds, ember_inter_token_latency_seconds   histograms
//   ember_request_duration_seconds               histogram
//   ember_cancellations_total{cause}             counter (client, deadline, shutdown, ...)
//   ember_cancel_latency_seconds{phase}          histogram: the front's evidence that the
//                                                client was gone (else the cancel) -> the
//                                                request's end (phase: queued, prefill, seed,
//                                                decode)
//   ember_kv_bytes                               gauge: KV memory of live sequences
//   ember_queue_depth, ember_active_sequences, ember_in_flight_requests   gauges
//   ember_engine_steps_total                     counter
//   ember_draining, ember_ready, ember_engine_up gauges (0/1)
//   ember_worker_restarts_total                  counter (subprocess engine)
//   ember_accept_errors_total{reason}            counter: failed accepts (emfile, enfile, nomem,
//                                                other); each pauses the accept loop
//   ember_prefix_cache_{hits,misses,evictions}_total, ember_prefix_cache_cached_tokens_total
//                                                counters; ember_prefix_cache_{blocks,bytes} gauges
//   ember_warm_cache_blocks_loaded, ember_warm_cache_load_seconds, ember_warm_cache_save_seconds
//                                                gauges; ember_warm_cache_bytes_written_total
//                                                counter
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ember::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // upper bounds, increasing; +Inf implied
  void observe(double v);
  // Appends `name_bucket{le=...}`, `name_sum`, `name_count` lines; `labels` (e.g.
  // `phase="decode"`) go before `le` and on the sum and count.
  void render(std::string& out, std::string_view name, std::string_view labels = {}) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // [bounds_.size() + 1], not cumulative
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Values read from elsewhere at render time.
struct MetricsSnapshot {
  int64_t queue_depth = 0;
  int64_t active_sequences = 0;
  int64_t in_flight_requests = 0;
  int64_t kv_bytes = 0;
  uint64_t engine_steps = 0;
  bool draining = false;
  bool ready = false;
  bool engine_up = false;
  uint64_t worker_restarts = 0;
  // Prefix cache and warm state (worker::EngineStats).
  uint64_t cache_hits = 0, cache_misses = 0, cache_evictions = 0, cached_tokens = 0;
  int64_t cache_blocks = 0, cache_bytes = 0;
  int64_t warm_blocks_loaded = 0;
  uint64_t warm_bytes_written = 0;
  double warm_load_seconds = 0, warm_save_seconds = 0;
};

class Metrics {
 public:
  Metrics();
  void count_request(std::string_view route, int status);
  void add_prompt_tokens(uint64_t n);
  void add_generated_tokens(uint64_t n);
  void observe_ttft(double seconds);
  void observe_inter_token(double seconds);
  void observe_request_duration(double seconds);
  void count_cancellation(std::string_view cause);
  // phase: "queued", "prefill", "seed" or "decode"
  void observe_cancel_latency(std::string_view phase, double seconds);
  // reason: "emfile", "enfile", "nomem" or "other"
  void count_accept_error(std::string_view reason);

  uint64_t cancellations(std::string_view cause) const;
  uint64_t generated_tokens() const;

  std::string render(const MetricsSnapshot& snap) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, uint64_t, std::less<>> cancellations_;
  std::map<std::string, uint64_t, std::less<>> accept_errors_;  // all four reasons, from 0
  uint64_t prompt_tokens_ = 0;
  uint64_t generated_tokens_ = 0;
  Histogram ttft_;
  Histogram itl_;
  Histogram duration_;
  std::map<std::string, Histogram, std::less<>> cancel_latency_;  // by phase, all four always
};

// Escapes a label value per the exposition format (backslash, quote, newline).
std::string escape_label(std::string_view v);

}  // namespace ember::server
