// Cost of grammar-constrained decoding per token, next to the cost of a decode step, on a real
// model: replays a schema-valid JSON answer token by token through GrammarMatcher::apply (the
// mask over the whole vocabulary) and accept, with a cold mask cache (every state computed) and
// a warm one (the same schema again, as a server sees repeated requests), then times decode
// steps of the model itself (one sequence, greedy, single-token forwards).
// First, before the model is loaded, it compiles a schema at the request limits
// (text/json_limits.h: 5,000 properties, 32 levels, 1,000 enum values, close to 120,000
// characters) and reports the time and the growth of peak RSS; with the model's vocabulary it
// then times that schema's first masks (every key allowed; a key late in the object).
// Run: build/grammar_bench MODEL.gguf [THREADS]
#include <sys/resource.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "model/backend.h"
#include "text/grammar_mask.h"
#include "text/json_limits.h"
#include "text/tokenizer.h"

using namespace ember;
using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

static double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

// A schema at the limits: optional properties at the root, one chain nested to the depth
// limit, one enum with the most values; property names and enum strings total ~119,000 chars.
static nlohmann::ordered_json schema_at_the_limits() {
  using json = nlohmann::ordered_json;
  using L = text::SchemaLimits;
  json chain = {{"type", "string"}};
  for (int i = 0; i < L::kMaxDepth - 1; ++i) {
    chain = {{"type", "object"}, {"properties", {{"n", chain}}}};
  }
  json values = json::array();
  for (size_t i = 0; i < L::kMaxEnumValues; ++i) values.push_back(fmt::format("{:048}", i));
  json props = json::object();
  props["deep"] = chain;
  props["e"] = {{"enum", values}};
  const size_t n_wide = L::kMaxProperties - size_t(L::kMaxDepth - 1) - 2;
  for (size_t i = 0; props.size() < n_wide + 2; ++i) {
    props[fmt::format("property_{:04}", i)] = {{"type", "integer"}};
  }
  return {{"type", "object"}, {"properties", props}};
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: grammar_bench MODEL.gguf [THREADS]\n");
    return 2;
  }
  auto file = gguf::File::open(argv[1]);
  if (!file) {
    std::fprintf(stderr, "%s\n", file.message().c_str());
    return 1;
  }
  const auto limits_schema = schema_at_the_limits();
  text::SchemaBudget used;
  if (auto l = text::check_schema_limits(limits_schema, used); !l.ok()) {
    std::fprintf(stderr, "the schema at the limits is not within them: %s\n", l.message().c_str());
    return 1;
  }
  const double rss_before = peak_rss_mib();
  auto c0 = Clock::now();
  auto at_limits = text::Grammar::from_schema(limits_schema);
  const double compile_ms = ms_since(c0);
  if (!at_limits) {
    std::fprintf(stderr, "%s\n", at_limits.message().c_str());
    return 1;
  }
  std::printf(
      "schema at the limits (%zu properties, %d levels, %zu enum values, %zu chars): compiled "
      "in %.1f ms, %zu nodes, peak RSS +%.1f MiB\n",
      used.properties, text::SchemaLimits::kMaxDepth, used.enum_values, used.chars, compile_ms,
      at_limits->node_count(), peak_rss_mib() - rss_before);
  {
    const std::string text = limits_schema.dump();
    auto p0 = Clock::now();
    auto ours = text::parse_json_bounded(text);
    const double ours_ms = ms_since(p0);
    p0 = Clock::now();
    auto theirs = nlohmann::ordered_json::parse(text);
    std::printf("its %zu bytes parse in %.1f ms (nlohmann's ordered_json parse: %.1f ms)\n",
                text.size(), ours_ms, ms_since(p0));
    if (ours != theirs) return 1;
  }
  auto shared = std::make_shared<const gguf::File>(std::move(file).value());
  auto vocab = text::load_vocab(*shared);
  auto tok = text::Tokenizer::create(std::move(vocab).value());
  if (!tok) return 1;
  const text::Tokenizer& t = **tok;
  std::vector<std::string> pieces(size_t(t.n_vocab()));
  auto t0 = Clock::now();
  for (int32_t id = 0; id < t.n_vocab(); ++id) pieces[size_t(id)] = t.token_to_piece(id);
  auto table = std::make_shared<const text::TokenTable>(std::move(pieces), t.vocab().eog);
  std::printf("vocabulary: %d tokens; token table built in %.1f ms\n", t.n_vocab(), ms_since(t0));

  const auto schema = nlohmann::ordered_json::parse(R"({"type":"object","properties":{
    "name":{"type":"string"},"country":{"type":"string"},"population":{"type":"integer"},
    "landmarks":{"type":"array","items":{"type":"string"}},
    "founded":{"anyOf":[{"type":"integer"},{"type":"null"}]}},
    "required":["name","country","population","landmarks","founded"]})");
  const std::string answer =
      R"({"name":"Paris","country":"France","population":2102650,"landmarks":["Eiffel Tower",)"
      R"("Louvre Museum","Notre-Dame de Paris","Arc de Triomphe"],"founded":null})";
  const std::vector<int32_t> ids = t.encode(answer, false, false);
  auto grammar = text::Grammar::from_schema(schema);
  if (!grammar) return 1;
  std::vector<float> logits(size_t(t.n_vocab()));
  auto replay = [&](std::shared_ptr<const text::CompiledGrammar> cg) {
    text::GrammarMatcher m(cg);
    auto start = Clock::now();
    for (int32_t id : ids) {
      std::fill(logits.begin(), logits.end(), 0.f);
      if (!m.apply(logits) || !std::isfinite(logits[size_t(id)]) || !m.accept(id)) {
        std::fprintf(stderr, "the grammar refused token %d\n", id);
        std::exit(1);
      }
    }
    return ms_since(start) / double(ids.size());
  };
  {
    auto wide = std::make_shared<const text::CompiledGrammar>(*at_limits, table);
    for (const char* prefix : {"{", R"({"property_4900":1,)"}) {
      text::Machine m(wide->grammar());
      if (!m.step(prefix)) return 1;
      auto s0 = Clock::now();
      auto mask = wide->mask(m);
      std::printf("schema at the limits, first mask after '%s': %.1f ms\n", prefix, ms_since(s0));
    }
  }
  auto cg = std::make_shared<const text::CompiledGrammar>(*grammar, table);
  const double cold = replay(cg);
  const size_t states = cg->cached_masks();
  double warm = 0;
  for (int i = 0; i < 5; ++i) warm += replay(cg) / 5;
  std::printf("answer: %zu tokens, %zu distinct grammar states\n", ids.size(), states);
  std::printf("mask+accept per token: cold cache %.3f ms, warm cache %.3f ms\n", cold, warm);

  model::LoadOptions lo;
  lo.n_threads = argc > 2 ? std::atoi(argv[2]) : 0;
  lo.n_ctx = 512;
  auto backend = model::load_cpu_model(shared, lo);
  if (!backend) {
    std::fprintf(stderr, "%s\n", backend.message().c_str());
    return 1;
  }
  auto seq = (*backend)->new_sequence(512);
  std::vector<int32_t> prompt = t.encode("The capital of France is", true, false);
  model::ForwardItem item{seq.get(), prompt, true};
  (void)(*backend)->forward({&item, 1}, logits);
  int32_t next = 0;
  const int steps = 64;
  auto start = Clock::now();
  for (int i = 0; i < steps; ++i) {
    next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    model::ForwardItem d{seq.get(), {&next, 1}, true};
    (void)(*backend)->forward({&d, 1}, logits);
  }
  const double decode = ms_since(start) / steps;
  std::printf("decode step: %.3f ms/token\n", decode);
  std::printf("mask cost / decode: cold %.1f%%, warm %.1f%%\n", 100 * cold / decode,
              100 * warm / decode);
  return 0;
}
