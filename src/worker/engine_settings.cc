#include "worker/engine_settings.h"

#include "base/log.h"
#include "gguf/reader.h"
#include "tensor/quant.h"
#include "text/tokenizer.h"

namespace ember::worker {

const settings::Table<EngineSettings>& engine_settings_table() {
  static const auto table = [] {
    settings::Table<EngineSettings> t;
    using S = EngineSettings;
    t.add("-m,--model", &S::model, "EMBER_MODEL", "GGUF file, or a model name ('default')");
    t.add("-t,--threads", &S::threads, "EMBER_THREADS", "compute threads (0: all cores)")
        .range(0, 1024);
    t.add("-c,--ctx-size", &S::ctx_size, "EMBER_CTX_SIZE", "context size (0: min(model's, 4096))")
        .range(0, 1 << 24);
    t.add("--kv-type", &S::kv_type, "EMBER_KV_TYPE",
          "how the KV cache holds keys and values: f16 (half the memory) or f32")
        .one_of({"f16", "f32"});
    // Which levels exist depends on the CPU: load_model checks the name against it.
    t.add("--simd-level", &S::simd_level, "EMBER_SIMD_LEVEL",
          "kernel level to run (scalar, avx2, avx512-vnni, avx512-amx; empty: the best this CPU "
          "has), e.g. "
          "to measure the code an AVX2-only host runs");
    t.add("--max-sequences", &S::max_sequences, "EMBER_MAX_SEQUENCES",
          "sequences decoded together at most")
        .range(1, 1024);
    t.add("--max-queued", &S::max_queued, "EMBER_MAX_QUEUED",
          "requests waiting for admission at most; beyond: 429 with Retry-After")
        .range(0, 100000);
    t.add("--prefill-chunk", &S::prefill_chunk, "EMBER_PREFILL_CHUNK",
          "prompt tokens per prefill step (a cancel waits at most one chunk)")
        .range(1, 1 << 16);
    t.add("--event-queue-capacity", &S::event_queue_capacity, "EMBER_EVENT_QUEUE_CAPACITY",
          "tokens a client may fall behind before it is cancelled as too slow")
        .range(1, 1 << 20);
    t.add("--kv-cache-bytes", &S::kv_cache_bytes, "EMBER_KV_CACHE_BYTES",
          "KV bytes the prefix cache keeps for reuse by later requests (0: no cache)")
        .range(0, double(int64_t{1} << 40));
    t.add("--warm-cache-dir", &S::warm_cache_dir, "EMBER_WARM_CACHE_DIR",
          "directory for the warm-state file: the hottest cached KV is saved there on graceful "
          "exit and loaded at start (empty: off)");
    t.add("--warm-cache-bytes", &S::warm_cache_bytes, "EMBER_WARM_CACHE_BYTES",
          "KV bytes written to the warm-state file at most")
        .range(0, double(int64_t{1} << 40));
    return t;
  }();
  return table;
}

engine::EngineOptions engine_options(const EngineSettings& s) {
  engine::EngineOptions o;
  o.max_sequences = s.max_sequences;
  o.max_queued = s.max_queued;
  o.prefill_chunk = s.prefill_chunk;
  o.event_queue_capacity = s.event_queue_capacity;
  o.prefix_cache_bytes = s.kv_cache_bytes;
  o.warm.dir = s.warm_cache_dir;
  o.warm.max_bytes = s.warm_cache_bytes;
  return o;
}

Result<LoadedModel> load_model(const EngineSettings& s, std::vector<int32_t> eog_tokens) {
  // Before the load: the weights are copied into the layout the active level's kernels read.
  EMBER_TRY_STATUS(tensor::select_simd_level(s.simd_level));
  log::info("engine: {} kernels", tensor::simd_level());
  EMBER_TRY(gguf::File file, gguf::File::open(s.model));
  auto shared = std::make_shared<const gguf::File>(std::move(file));
  model::LoadOptions lo;
  lo.n_threads = s.threads;
  lo.n_ctx = s.ctx_size;
  const std::optional<model::KvType> kv = model::kv_type_from_name(s.kv_type);
  if (!kv) return fail("--kv-type: '{}' is not one of f16, f32", s.kv_type);
  lo.kv_type = *kv;
  lo.copy_weights_in_background = true;  // ready before the huge-page copy is done
  EMBER_TRY(auto backend, model::load_cpu_model(shared, lo));
  LoadedModel m;
  m.info.arch_name = backend->config().arch_name;
  m.info.name = backend->config().name;
  m.info.n_ctx = backend->n_ctx();
  m.backend = std::shared_ptr<model::Backend>(std::move(backend));
  m.options = engine_options(s);
  m.options.eog_tokens = std::move(eog_tokens);
  return m;
}

Result<std::shared_ptr<const text::TextCodec>> load_text_codec(const std::string& model,
                                                               const std::string& system_prompt) {
  EMBER_TRY(gguf::File file, gguf::File::open(model));
  EMBER_TRY(model::ModelConfig cfg, model::read_config(file));
  EMBER_TRY(text::Vocab vocab, text::load_vocab(file));
  EMBER_TRY(auto tok, text::Tokenizer::create(std::move(vocab)));
  std::shared_ptr<const text::Tokenizer> tokenizer(std::move(tok));
  EMBER_TRY(auto codec, text::TextCodec::create(tokenizer, {cfg.arch_name, system_prompt}));
  return std::shared_ptr<const text::TextCodec>(std::move(codec));
}

}  // namespace ember::worker
