// `ember bench`: measures one model on this host through the engine, the path requests take.
//  - read bandwidth of the host (one thread and `threads` threads; tensor/membw.h), measured
//    last (its buffers are not the model's peak RSS) so every rate can be read as a fraction
//    of it;
//  - load time (open + bind weights) and peak RSS;
//  - prefill: one request with an N-token prompt and max_tokens 1 (tok/s = N / time to first
//    token; that time is also the TTFT);
//  - decode at batch 1: one request with a 1-token prompt generating D tokens (llama-bench's
//    tg: every token after the first over the time after the first), and the weight bytes
//    streamed per token divided by the time per token (achieved GB/s);
//  - the batch-1 decode again as 16-token requests with the bandwidth sampled around each, read
//    against the samples' time-weighted mean (decode.sampled; tensor/membw.h, BandwidthSampler);
//  - aggregate decode at each concurrency c: c requests submitted together, tokens produced
//    after the last stream started decoding over the time until the last one finished, and
//    the inter-token gaps of every stream (p50 / p99).
//  - with --kv-lengths, only the KV bytes one sequence holds at given lengths (cli/bench_kv.h).
// Rounds repeat every measurement; figures are medians with min and max. Prompts are fixed
// pseudo-random token ids (as llama-bench's), no end-of-generation token stops a request, and
// greedy sampling skips log-probabilities, so the engine's work per token is the forward pass
// plus one argmax. Wall-clock figures on a shared machine are noisy: the CPU time of the
// process per token is reported beside them.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <sys/resource.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/bench_kv.h"
#include "cli/commands.h"
#include "cli/model_path.h"
#include "cli/settings_cli.h"
#include "engine/engine.h"
#include "model/backend.h"
#include "tensor/membw.h"
#include "tensor/quant.h"
#include "worker/engine_settings.h"

namespace ember::cli {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

// --model, --threads, --simd-level and --kv-type are the engine's settings: their defaults are
// the table's (add_setting), not declared here.
struct BenchOptions {
  std::string model;
  int32_t threads{};
  int32_t prompt_tokens = 512;
  int32_t decode_tokens = 128;
  int32_t depth = 0;  // the batch-1 decode follows a prompt of this many tokens (llama-bench -d)
  std::string concurrency = "1,2,4,8,16";
  int32_t stream_tokens = 64;
  int32_t rounds = 3;
  bool json = false;
  bool no_bandwidth = false;
  bool pool_timing = false;
  bool bandwidth_only = false;
  bool mmap_weights = false;
  std::string simd_level;  // empty: the best this CPU has
  std::string kv_lengths;  // non-empty: only report KV bytes per sequence (cli/bench_kv.h)
  int32_t kv_measure_up_to = 4096;
  std::string kv_type;  // model::kv_type_name
};

double ms_since(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

int64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

struct Stats {
  double median = 0, min = 0, max = 0;
};

Stats stats_of(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return {med, v.front(), v.back()};
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

json to_json(const Stats& s) {
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}};
}

// One request's event times: submit, each token, done.
struct Trace {
  Clock::time_point submit;
  std::vector<Clock::time_point> tokens;
  engine::DoneEvent done;
};

std::vector<int32_t> prompt_ids(int32_t n, int32_t n_vocab, int32_t salt) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint32_t x = 0x9E3779B9u + static_cast<uint32_t>(salt);
  for (auto& id : ids) {
    x = x * 1664525u + 1013904223u;
    id = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(n_vocab));
  }
  return ids;
}

// Submits `count` requests at once and collects their traces (one reader thread each).
Result<std::vector<Trace>> run_requests(engine::Engine& eng, int count, int32_t prompt_len,
                                        int32_t max_tokens, int32_t salt) {
  const int32_t n_vocab = eng.model_config().n_vocab;
  std::vector<Trace> traces(static_cast<size_t>(count));
  std::vector<std::shared_ptr<engine::EventStream>> streams;
  for (int i = 0; i < count; ++i) {
    engine::GenerateRequest req;
    req.prompt = prompt_ids(prompt_len, n_vocab, salt * 1000 + i);
    req.max_tokens = max_tokens;
    req.sampling.temperature = 0.f;
    req.sampling.logprobs = false;
    traces[static_cast<size_t>(i)].submit = Clock::now();
    auto sub = eng.submit(std::move(req));
    if (!sub.ok()) return fail("bench request rejected: {}", sub.error->message);
    streams.push_back(sub.stream);
  }
  std::vector<std::thread> readers;
  for (int i = 0; i < count; ++i) {
    readers.emplace_back([&, i] {
      Trace& t = traces[static_cast<size_t>(i)];
      t.tokens.reserve(static_cast<size_t>(max_tokens));
      while (auto ev = streams[static_cast<size_t>(i)]->next()) {
        if (std::holds_alternative<engine::TokenEvent>(*ev)) {
          t.tokens.push_back(Clock::now());
        } else {
          t.done = std::get<engine::DoneEvent>(*ev);
        }
      }
    });
  }
  for (auto& r : readers) r.join();
  for (const auto& t : traces) {
    if (t.done.reason == engine::FinishReason::Error) return fail("{}", t.done.message);
    if (t.tokens.empty()) return fail("a bench request produced no token");
  }
  return traces;
}

struct Loaded {
  std::shared_ptr<const gguf::File> file;
  std::shared_ptr<model::Backend> backend;  // for --pool-timing (the engine runs it)
  std::unique_ptr<engine::Engine> engine;
  int64_t decode_bytes = 0;  // weight bytes one decode step streams
  double load_ms = 0;
};

Result<Loaded> load(const BenchOptions& o, int32_t max_sequences, int32_t n_ctx) {
  const auto t0 = Clock::now();
  EMBER_TRY(std::string path, resolve_model_path(o.model));
  EMBER_TRY(gguf::File file, gguf::File::open(path));
  auto shared = std::make_shared<const gguf::File>(std::move(file));
  model::LoadOptions lo;
  lo.n_threads = o.threads;
  lo.n_ctx = n_ctx;
  lo.huge_page_weights = !o.mmap_weights;
  lo.kv_type = model::kv_type_from_name(o.kv_type).value();  // checked by the option
  EMBER_TRY(auto backend, model::load_cpu_model(shared, lo));
  engine::EngineOptions eo;
  eo.max_sequences = max_sequences;
  eo.max_queued = std::max(64, max_sequences);
  Loaded l;
  l.backend = std::shared_ptr<model::Backend>(std::move(backend));
  l.engine = std::make_unique<engine::Engine>(l.backend, eo);
  l.load_ms = ms_since(t0, Clock::now());
  // Every matrix streams once per step; the token embedding only when it is also the output.
  const bool tied = shared->find_tensor("output.weight") == nullptr;
  for (const auto& t : shared->tensors()) {
    if (t.name == "token_embd.weight" && !tied) continue;
    l.decode_bytes += static_cast<int64_t>(t.nbytes);
  }
  l.file = shared;
  return l;
}

// K and V bytes one decode step reads at context length `len`: each layer's rows for the
// positions it attends to (a sliding layer only its window).
int64_t kv_read_bytes(const model::ModelConfig& c, model::KvType type, int64_t len) {
  const int64_t row = int64_t{c.n_head_kv} * c.head_dim * (type == model::KvType::F16 ? 2 : 4);
  int64_t bytes = 0;
  for (int32_t il = 0; il < c.n_layer; ++il) {
    bytes += 2 * row * (c.is_sliding(il) ? std::min<int64_t>(len, c.sliding_window) : len);
  }
  return bytes;
}

// The batch-1 decode in chunks of kSampledChunk tokens (one request each, timed from its first
// token to its last) with one bandwidth sample before the first chunk and after every chunk;
// per round the decode's GB/s, the samples' time-weighted mean and their ratio. Null when the
// sampler has no memory. Each sample is the second of two passes: the first right after a
// chunk read 3.6% lower than the next (paired median, 72 pairs on the Zen 5 host; cause not
// established), which would flatter the fraction.
constexpr int32_t kSampledChunk = 16;

Result<json> sampled_decode(engine::Engine& eng, int threads, int64_t weight_bytes,
                            model::KvType kv_type, int32_t decode_tokens, int rounds) {
  tensor::BandwidthSampler sampler(threads);
  if (!sampler.ok()) return json();
  const int32_t chunks = std::max(1, decode_tokens / kSampledChunk);
  const int64_t kv = kv_read_bytes(eng.model_config(), kv_type, 1 + kSampledChunk / 2);
  std::vector<double> gbps, probe, fraction;
  for (int round = 0; round < rounds; ++round) {
    std::vector<tensor::SampledStretch> stretches;
    sampler.sample();
    double before = sampler.sample();
    for (int32_t c = 0; c < chunks; ++c) {
      auto tr = run_requests(eng, 1, 1, kSampledChunk + 1, 200 + round * chunks + c);
      if (!tr) return fail("{}", tr.message());
      const auto& tk = (*tr)[0].tokens;
      sampler.sample();
      const double after = sampler.sample();
      stretches.push_back(
          {.seconds = ms_since(tk.front(), tk.back()) / 1000.0,
           .bytes = static_cast<double>(weight_bytes + kv) * static_cast<double>(tk.size() - 1),
           .gbps_before = before,
           .gbps_after = after});
      before = after;
    }
    const tensor::SampledRate r = tensor::combine_samples(stretches);
    gbps.push_back(r.gbps);
    probe.push_back(r.probe_gbps);
    fraction.push_back(r.fraction);
  }
  return json{{"chunks", chunks},
              {"chunk_tokens", kSampledChunk},
              {"gbps", to_json(stats_of(gbps))},
              {"probe_gbps", to_json(stats_of(probe))},
              {"fraction", to_json(stats_of(fraction))}};
}

// "median [min-max]" of a to_json(Stats), each times `scale` (100: a fraction as a percentage).
std::string med_range(const json& s, int digits = 1, double scale = 1) {
  return fmt::format("{:.{}f} [{:.{}f}-{:.{}f}]", scale * s["median"].get<double>(), digits,
                     scale * s["min"].get<double>(), digits, scale * s["max"].get<double>(),
                     digits);
}

// --pool-timing's split of the engine thread's time, per token, over the rounds.
struct PoolRounds {
  std::vector<double> jobs, run_ms, wait_ms, serial_ms;
  // One round's timing over `tokens` tokens.
  void add(const tensor::ThreadPool::Timing& t, double tokens) {
    jobs.push_back(static_cast<double>(t.jobs) / tokens);
    run_ms.push_back(static_cast<double>(t.run_ns) / 1e6 / tokens);
    wait_ms.push_back(static_cast<double>(t.wait_ns) / 1e6 / tokens);
    serial_ms.push_back(static_cast<double>(t.serial_ns) / 1e6 / tokens);
  }
  // Nothing when not timed, or when nothing was handed off (one thread).
  bool any() const { return !jobs.empty() && stats_of(jobs).max > 0; }
  json as_json() const {
    return {{"jobs_per_token", to_json(stats_of(jobs))},
            {"run_ms_per_token", to_json(stats_of(run_ms))},
            {"wait_ms_per_token", to_json(stats_of(wait_ms))},
            {"serial_ms_per_token", to_json(stats_of(serial_ms))}};
  }
};

void print_pool(const json& p) {
  std::printf(
      "  engine thread per token: %s ms running its share of %s parallel jobs, %s ms waiting "
      "for the other threads, %s ms working alone between jobs\n",
      med_range(p["run_ms_per_token"], 3).c_str(), med_range(p["jobs_per_token"], 0).c_str(),
      med_range(p["wait_ms_per_token"], 3).c_str(), med_range(p["serial_ms_per_token"], 3).c_str());
}

void print_text(const json& o) {
  const int threads = o["threads"].get<int>();
  std::printf("simd level %s, %d thread%s\n", o["simd_level"].get<std::string>().c_str(), threads,
              threads == 1 ? "" : "s");
  if (o.contains("bandwidth")) {
    const json& b = o["bandwidth"];
    std::printf("read bandwidth: 1 thread %.1f GB/s", b["single_gbps"].get<double>());
    // A 1-thread probe measured one figure: printed once.
    if (b["threads"].get<int>() > 1) {
      std::printf(", %d threads %.1f GB/s", b["threads"].get<int>(), b["all_gbps"].get<double>());
    }
    std::printf("\n");
  }
  if (!o.contains("model")) return;
  std::printf(
      "model %s: loaded in %.0f ms, %s KV, %.1f MB of weights per decode step, peak RSS %.0f "
      "MiB\n",
      o["model"].get<std::string>().c_str(), o["load_ms"].get<double>(),
      o["kv_type"].get<std::string>().c_str(), o["decode_bytes_per_token"].get<double>() / 1e6,
      o["peak_rss_bytes"].get<double>() / (1 << 20));
  std::printf("median [min-max] over %d rounds\n", o["rounds"].get<int>());
  if (o.contains("prefill")) {
    std::printf("prefill %d tokens: %s tok/s, TTFT %s ms\n",
                o["prefill"]["prompt_tokens"].get<int>(), med_range(o["prefill"]["tok_s"]).c_str(),
                med_range(o["prefill"]["ttft_ms"]).c_str());
  }
  if (o.contains("decode")) {
    const json& d = o["decode"];
    std::printf(
        "decode batch 1, %d tokens%s: %s tok/s, %s GB/s of weights and KV", d["tokens"].get<int>(),
        d["depth"].get<int>() > 0 ? fmt::format(" at depth {}", d["depth"].get<int>()).c_str() : "",
        med_range(d["tok_s"]).c_str(), med_range(d["gbps"], 2).c_str());
    if (d.contains("fraction_of_bandwidth")) {
      std::printf(" (%.0f%% of the read bandwidth)",
                  100 * d["fraction_of_bandwidth"].get<double>());
    }
    if (d.contains("cpu_ms_per_token")) {
      std::printf(", CPU %s ms/token", med_range(d["cpu_ms_per_token"], 2).c_str());
    }
    std::printf("\n");
    if (d.contains("pool")) print_pool(d["pool"]);
    if (d.contains("sampled")) {
      const json& sd = d["sampled"];
      std::printf(
          "  in %d chunks of %d tokens with the bandwidth sampled around each: %s GB/s, %s%% of "
          "the %s GB/s sampled\n",
          sd["chunks"].get<int>(), sd["chunk_tokens"].get<int>(), med_range(sd["gbps"], 2).c_str(),
          med_range(sd["fraction"], 0, 100).c_str(), med_range(sd["probe_gbps"]).c_str());
    }
  }
  for (const auto& a : o["aggregate"]) {
    std::printf(
        "aggregate decode, %2d streams x %d tokens: %s tok/s, inter-token p50 %.1f ms, p99 %.1f "
        "ms\n",
        a["concurrency"].get<int>(), a["tokens_per_stream"].get<int>(),
        med_range(a["tok_s"]).c_str(), a["inter_token_ms_p50"].get<double>(),
        a["inter_token_ms_p99"].get<double>());
    if (a.contains("pool")) print_pool(a["pool"]);
  }
}

Result<std::vector<int>> parse_list(const std::string& s, const char* flag, int lo, int hi) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      const int v = std::stoi(item);
      if (v < lo || v > hi) return fail("{}: {} is not in {}..{}", flag, v, lo, hi);
      out.push_back(v);
    } catch (...) {
      return fail("{}: '{}' is not a number", flag, item);
    }
  }
  return out;
}

int run(const BenchOptions& o) {
  json out;
  if (auto st = tensor::select_simd_level(o.simd_level); !st) {
    std::fprintf(stderr, "ember bench: %s\n", st.message().c_str());
    return 2;
  }
  out["simd_level"] = std::string(tensor::simd_level());
  if (o.pool_timing && o.depth > 0) {
    std::fprintf(stderr,
                 "ember bench: --pool-timing times every forward of a decode request whose "
                 "prompt is one token; with -d the prompt's prefill would count: drop one\n");
    return 2;
  }
  const int threads = o.threads > 0
                          ? o.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  out["threads"] = threads;
  // Measured last, so its buffers do not count in the model's peak RSS.
  tensor::ReadBandwidth bw;
  auto measure_bandwidth = [&] {
    if (o.no_bandwidth) return;
    bw = tensor::measure_read_bandwidth(threads);
    out["bandwidth"] = {{"single_gbps", bw.single_gbps},
                        {"all_gbps", bw.all_gbps},
                        {"threads", bw.threads},
                        {"bytes_per_thread", bw.bytes_per_thread}};
  };
  auto print = [&] {
    if (o.json) {
      std::printf("%s\n", out.dump().c_str());
    } else {
      print_text(out);
    }
    return 0;
  };
  if (o.bandwidth_only) {
    measure_bandwidth();
    return print();
  }

  if (!o.kv_lengths.empty()) {
    auto lengths = parse_list(o.kv_lengths, "--kv-lengths", 2, 1 << 24);
    if (!lengths) {
      std::fprintf(stderr, "ember bench: %s\n", lengths.message().c_str());
      return 2;
    }
    return run_kv_bytes({.model = o.model,
                         .threads = o.threads,
                         .lengths = *lengths,
                         .measure_up_to = o.kv_measure_up_to,
                         .kv_type = model::kv_type_from_name(o.kv_type).value(),
                         .json = o.json});
  }
  auto conc = parse_list(o.concurrency, "--concurrency", 1, 256);
  if (!conc) {
    std::fprintf(stderr, "ember bench: %s\n", conc.message().c_str());
    return 2;
  }
  const int max_c = conc->empty() ? 1 : *std::max_element(conc->begin(), conc->end());
  const int32_t n_ctx =
      std::max(o.prompt_tokens + 8, o.depth + o.decode_tokens + o.stream_tokens + 64);
  auto loaded = load(o, max_c, n_ctx);
  if (!loaded) {
    std::fprintf(stderr, "ember bench: %s\n", loaded.message().c_str());
    return 1;
  }
  engine::Engine& eng = *loaded->engine;
  out["model"] = loaded->file->path();
  out["kv_type"] = o.kv_type;
  out["load_ms"] = loaded->load_ms;
  out["decode_bytes_per_token"] = loaded->decode_bytes;

  // The decode steps' mean KV reads: the timed steps see depth + 2 ... depth + n positions.
  const int64_t kv_bytes =
      kv_read_bytes(eng.model_config(), model::kv_type_from_name(o.kv_type).value(),
                    o.depth + 1 + std::max(1, o.decode_tokens) / 2);
  std::vector<double> pre_tps, ttft, dec_tps, dec_gbps, dec_cpu_ms;
  PoolRounds pool;  // batch-1 decode
  std::vector<std::vector<double>> agg(conc->size());
  std::vector<PoolRounds> agg_pool(conc->size());  // per concurrency, per generated token
  std::vector<std::vector<double>> gaps(conc->size());
  for (int round = 0; round < o.rounds; ++round) {
    if (o.prompt_tokens > 0) {
      auto tr = run_requests(eng, 1, o.prompt_tokens, 1, round);
      if (!tr) return std::fprintf(stderr, "ember bench: %s\n", tr.message().c_str()), 1;
      const double ms = ms_since((*tr)[0].submit, (*tr)[0].tokens[0]);
      ttft.push_back(ms);
      pre_tps.push_back(o.prompt_tokens * 1000.0 / ms);
    }
    if (o.decode_tokens > 1) {
      const double c0 = cpu_seconds();
      // The engine is idle: the backend's pool is not in use until the request is submitted.
      if (o.pool_timing) loaded->backend->set_pool_timing(true);
      // Timed from the first token (the prompt's prefill is done) to the last.
      auto tr = run_requests(eng, 1, o.depth + 1, o.decode_tokens, round);
      const double cpu = cpu_seconds() - c0;
      if (o.pool_timing && tr) {
        // Every forward of the request: its one-token prompt's and each decode step's.
        const tensor::ThreadPool::Timing pt = loaded->backend->pool_timing();
        loaded->backend->set_pool_timing(false);
        pool.add(pt, static_cast<double>((*tr)[0].tokens.size()));
      }
      if (!tr) return std::fprintf(stderr, "ember bench: %s\n", tr.message().c_str()), 1;
      const auto& tk = (*tr)[0].tokens;
      const double ms = ms_since(tk.front(), tk.back());
      const double per_tok = ms / static_cast<double>(tk.size() - 1);
      dec_tps.push_back(1000.0 / per_tok);
      dec_gbps.push_back(static_cast<double>(loaded->decode_bytes + kv_bytes) / (per_tok * 1e6));
      dec_cpu_ms.push_back(cpu * 1000.0 / static_cast<double>(tk.size()));
    }
    for (size_t ci = 0; ci < conc->size(); ++ci) {
      const int c = (*conc)[ci];
      if (o.pool_timing) loaded->backend->set_pool_timing(true);
      auto tr = run_requests(eng, c, 16, o.stream_tokens, 100 + round);
      if (o.pool_timing && tr) {
        // Every forward of the run (the streams' prompts' too), per token generated.
        const tensor::ThreadPool::Timing pt = loaded->backend->pool_timing();
        loaded->backend->set_pool_timing(false);
        double n = 0;
        for (const auto& t : *tr) n += static_cast<double>(t.tokens.size());
        agg_pool[ci].add(pt, n);
      }
      if (!tr) return std::fprintf(stderr, "ember bench: %s\n", tr.message().c_str()), 1;
      Clock::time_point start = Clock::time_point::min(), end = start;
      for (const auto& t : *tr) {
        start = std::max(start, t.tokens.front());
        end = std::max(end, t.tokens.back());
        for (size_t i = 1; i < t.tokens.size(); ++i) {
          gaps[ci].push_back(ms_since(t.tokens[i - 1], t.tokens[i]));
        }
      }
      int64_t after = 0;
      for (const auto& t : *tr) {
        after += std::count_if(t.tokens.begin(), t.tokens.end(),
                               [&](Clock::time_point p) { return p > start; });
      }
      const double ms = ms_since(start, end);
      if (ms > 0) agg[ci].push_back(static_cast<double>(after) * 1000.0 / ms);
    }
  }
  out["rounds"] = o.rounds;
  if (!pre_tps.empty()) {
    out["prefill"] = {{"prompt_tokens", o.prompt_tokens},
                      {"tok_s", to_json(stats_of(pre_tps))},
                      {"ttft_ms", to_json(stats_of(ttft))}};
  }
  if (!dec_tps.empty()) {
    json d = {
        {"tokens", o.decode_tokens},           {"depth", o.depth},
        {"kv_bytes_per_token", kv_bytes},      {"tok_s", to_json(stats_of(dec_tps))},
        {"gbps", to_json(stats_of(dec_gbps))}, {"cpu_ms_per_token", to_json(stats_of(dec_cpu_ms))}};
    // The request's CPU time includes its prompt's prefill: per token only without one.
    if (o.depth > 0) d.erase("cpu_ms_per_token");
    // One thread hands nothing off: every forward runs on the engine thread alone.
    if (pool.any()) d["pool"] = pool.as_json();
    out["decode"] = d;
  }
  json a = json::array();
  for (size_t ci = 0; ci < conc->size(); ++ci) {
    json ac = {{"concurrency", (*conc)[ci]},
               {"tokens_per_stream", o.stream_tokens},
               {"tok_s", to_json(stats_of(agg[ci]))},
               {"inter_token_ms_p50", percentile(gaps[ci], 0.5)},
               {"inter_token_ms_p99", percentile(gaps[ci], 0.99)}};
    if (agg_pool[ci].any()) ac["pool"] = agg_pool[ci].as_json();
    a.push_back(ac);
  }
  out["aggregate"] = a;
  out["peak_rss_bytes"] = peak_rss_bytes();
  // After the peak RSS (the sampler's buffers are not the model's) and before the probe, the
  // batch-1 decode again in chunks with the bandwidth sampled around each (tensor/membw.h,
  // BandwidthSampler): its rate against what the host gave while it ran.
  if (!o.no_bandwidth && o.decode_tokens > 1 && o.depth == 0 && out.contains("decode")) {
    auto sampled =
        sampled_decode(eng, threads, loaded->decode_bytes,
                       model::kv_type_from_name(o.kv_type).value(), o.decode_tokens, o.rounds);
    if (!sampled) return std::fprintf(stderr, "ember bench: %s\n", sampled.message().c_str()), 1;
    if (!sampled->is_null()) out["decode"]["sampled"] = *sampled;
  }
  measure_bandwidth();
  if (bw.all_gbps > 0 && out.contains("decode")) {
    out["decode"]["fraction_of_bandwidth"] =
        out["decode"]["gbps"]["median"].get<double>() / bw.all_gbps;
  }
  return print();
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  CLI::App app{"Measure prefill, decode and batched decode of a model on this host", "ember bench"};
  BenchOptions o;
  // The engine's own settings: their flags, environment variables, defaults and help.
  const auto& engine_table = worker::engine_settings_table();
  add_setting(app, engine_table, "model", o.model);
  add_setting(app, engine_table, "threads", o.threads);
  app.add_option("-p,--prompt-tokens", o.prompt_tokens, "prefill prompt length (0: skip)")
      ->check(CLI::Range(0, 32768))
      ->capture_default_str();
  app.add_option("-n,--decode-tokens", o.decode_tokens, "batch-1 decode length (<2: skip)")
      ->check(CLI::Range(0, 32768))
      ->capture_default_str();
  app.add_option("-d,--depth", o.depth,
                 "tokens already in the context when the batch-1 decode starts (llama-bench -d)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("-c,--concurrency", o.concurrency,
                 "comma-separated stream counts for aggregate decode ('' : skip)")
      ->capture_default_str();
  app.add_option("--stream-tokens", o.stream_tokens, "tokens per stream in aggregate decode")
      ->check(CLI::Range(2, 32768))
      ->capture_default_str();
  app.add_option("-r,--rounds", o.rounds, "rounds of every measurement (median, min, max)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_flag("--json", o.json, "one line of JSON");
  app.add_flag("--mmap-weights", o.mmap_weights,
               "stream weights from the file mapping instead of huge-page copies (A/B)");
  add_setting(app, engine_table, "simd-level", o.simd_level);
  app.add_flag("--no-bandwidth", o.no_bandwidth, "skip the read-bandwidth probe");
  app.add_flag("--pool-timing", o.pool_timing,
               "also time the compute pool's hand-offs at batch-1 decode and at each -c "
               "concurrency: per token, the engine thread running its share of the parallel "
               "jobs, waiting for the other threads, and working alone between jobs (reads the "
               "clock at every job; not with -d)");
  app.add_flag("--bandwidth-only", o.bandwidth_only, "measure the read bandwidth and stop");
  add_setting(app, engine_table, "kv-type", o.kv_type);
  app.add_option("--kv-lengths", o.kv_lengths,
                 "comma-separated context lengths: report KV bytes per sequence at each (vs "
                 "full history and llama.cpp's SWA cache) and stop");
  app.add_option("--kv-measure-up-to", o.kv_measure_up_to,
                 "with --kv-lengths: prefill up to this length; longer ones are derived")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return run(o);
}

}  // namespace ember::cli
