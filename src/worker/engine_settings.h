// The engine's process settings: shared by `ember serve` (in-process, or passed
// to the worker in the protocol's Configure frame) and `ember engine` (the worker); `ember run`
// and `ember bench` take the ones they offer from the same table (cli/settings_cli.h,
// add_setting). The struct's initializers are the only defaults. Loading a model with them
// gives a LoadedModel: the backend, the engine options and what the front needs to know about
// the model.
// See docs/architecture.md, "Settings".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/settings.h"
#include "engine/engine.h"
#include "model/backend.h"
#include "text/text_codec.h"
#include "worker/types.h"

namespace ember::worker {

struct EngineSettings {
  std::string model = "default";  // a GGUF path (the front resolves names before passing it on)
  int32_t threads = 0;
  int32_t ctx_size = 0;
  std::string kv_type = "f16";  // model::kv_type_name
  std::string simd_level;       // tensor::set_simd_level's name; empty: the best this CPU has
  int32_t max_sequences = 8;
  int32_t max_queued = 64;
  int32_t prefill_chunk = 512;
  int32_t event_queue_capacity = 1024;
  int64_t kv_cache_bytes = int64_t{512} << 20;  // prefix cache; 0: none
  std::string warm_cache_dir;                   // warm-state file's directory; empty: off
  int64_t warm_cache_bytes = int64_t{256} << 20;
};

// The table; `ember serve` adds these flags to its own (cli/settings_cli.h).
const settings::Table<EngineSettings>& engine_settings_table();

// The engine's options from `s` (eog_tokens left empty). engine::EngineOptions' own
// initializers, for engines built without settings (tests, `ember run`, `ember bench`), equal
// these for EngineSettings{} (tests/worker/engine_settings_test.cc).
engine::EngineOptions engine_options(const EngineSettings& s);

struct LoadedModel {
  std::shared_ptr<model::Backend> backend;
  engine::EngineOptions options;
  ModelInfo info;
};

// `eog_tokens`: the end-of-generation ids, from the front's text codec (the vocabulary's and
// the chat template's end of turn): the engine finishes with `stop` on them.
Result<LoadedModel> load_model(const EngineSettings& s, std::vector<int32_t> eog_tokens);

// The model's text codec (tokenizer and chat template from the GGUF's metadata; the weights
// stay unread). The front encodes and decodes with it; the worker needs it only to rebuild
// output constraints from their specs (worker/constraint.h), so it passes no system prompt.
Result<std::shared_ptr<const text::TextCodec>> load_text_codec(const std::string& model,
                                                               const std::string& system_prompt);

}  // namespace ember::worker
