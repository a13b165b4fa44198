// Cost of grammar-constrained decoding per token, next to the cost of a decode step, on a real
// model: replays a schema-valid JSON answer token by token through GrammarMatcher::apply (the
// mask over the whole vocabulary) and accept, with a cold mask cache (every state computed) and
// a warm one (the same schema again, as a server sees repeated requests), then times decode
// steps of the model itself (one sequence, greedy, single-token forwards).
// Run: build/grammar_bench MODEL.gguf [THREADS]
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
#include "text/tokenizer.h"

using namespace ember;
using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
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
