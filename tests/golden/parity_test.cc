// Parity with llama.cpp, the reference: token ids, greedy tokens and logits recorded by
// tools/gen_goldens.py (run llama.cpp on the same files) must be reproduced by ember.
// Fixture models are rebuilt with the `ember` binary from the recorded arguments; their size
// and CRC-32 must match the recording, or the goldens are stale (regenerate them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "base/file.h"
#include "cli/model_path.h"
#include "gguf/reader.h"
#include "model/backend.h"
#include "text/tokenizer.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

// A real model's file, by ember's name for it (src/cli/model_path.h: the one table).
std::string named_model_path(const std::string& name) {
  const cli::NamedModel* m = cli::find_named_model(name);
  EXPECT_NE(m, nullptr) << name << ": not a named model";
  if (!m) return "";
  auto path = cli::locate_named_model(*m);
  EXPECT_TRUE(path.has_value()) << name << ": not installed; run scripts/setup";
  return path.value_or("");
}

struct Loaded {
  std::shared_ptr<const gguf::File> file;
  std::unique_ptr<text::Tokenizer> tok;
  std::unique_ptr<model::Backend> backend;
};

Loaded load(const std::string& path, model::KvType kv_type) {
  auto f = gguf::File::open(path);
  EXPECT_TRUE(f.ok()) << f.message();
  Loaded l;
  l.file = std::make_shared<const gguf::File>(std::move(f).value());
  auto v = text::load_vocab(*l.file);
  EXPECT_TRUE(v.ok()) << v.message();
  auto t = text::Tokenizer::create(std::move(v).value());
  EXPECT_TRUE(t.ok()) << t.message();
  l.tok = std::move(t).value();
  model::LoadOptions lo;
  lo.n_ctx = 2048;
  lo.kv_type = kv_type;
  auto b = model::load_cpu_model(l.file, lo);
  EXPECT_TRUE(b.ok()) << b.message();
  l.backend = std::move(b).value();
  return l;
}

// Builds the model a golden file describes; returns its path.
std::string materialize(const std::string& name, const json& g) {
  if (g.contains("model")) return named_model_path(g["model"].get<std::string>());
  std::string out = (fs::temp_directory_path() / ("ember_golden_" + name + ".gguf")).string();
  std::string cmd = std::string(EMBER_BINARY_DIR) + "/ember fixture";
  for (const auto& a : g["fixture_args"]) cmd += " " + shell_quote(a.get<std::string>());
  cmd += " --out " + shell_quote(out) + " 2>/dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto m = MappedFile::open(out);
  EXPECT_TRUE(m.ok());
  if (m.ok()) {
    EXPECT_EQ(m->size(), g["fixture_bytes"].get<size_t>())
        << name << ": the fixture generator changed; regenerate with tools/gen_goldens.py";
    EXPECT_EQ(crc32(m->data(), m->size()), g["fixture_crc32"].get<uint32_t>())
        << name << ": the fixture generator changed; regenerate with tools/gen_goldens.py";
  }
  return out;
}

struct Case {
  std::string name;
  json golden;
};

std::vector<std::string> golden_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(std::string(EMBER_SOURCE_DIR) + "/tests/golden")) {
    if (e.path().extension() == ".json" && e.path().stem() != "corpus") {
      names.push_back(e.path().stem().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

class Parity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::ifstream in(std::string(EMBER_SOURCE_DIR) + "/tests/golden/" + GetParam() + ".json");
    golden_ = json::parse(in);
    path_ = materialize(GetParam(), golden_);
    // The goldens come from llama.cpp with an f32 KV cache. Fixtures are compared to float
    // rounding, so they run with f32 KV too; the real models run as served (f16 KV, the
    // default), held to the reference's own reproducibility (kRealModelTolerance).
    model_ = load(path_, is_real_model() ? model::KvType::F16 : model::KvType::F32);
    ASSERT_TRUE(model_.backend && model_.tok);
  }
  bool is_real_model() const { return golden_.contains("model"); }
  json golden_;
  std::string path_;
  Loaded model_;
};

TEST_P(Parity, tokenization_matches_llama_cpp) {
  for (const auto& c : golden_["tokenize"]) {
    auto text = c["text"].get<std::string>();
    auto ids = model_.tok->encode(text, /*add_special=*/false, c["parse_special"].get<bool>());
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << "text: " << text;
  }
}

// Runs `tokens` through the sequence and returns the logits of the last one; one_by_one feeds
// them a token at a time, otherwise as one batch (as the goldens were recorded).
std::vector<float> feed(model::Backend& b, model::Sequence& seq, std::span<const int32_t> tokens,
                        bool one_by_one) {
  std::vector<float> logits(b.config().n_vocab);
  const size_t step = one_by_one ? 1 : tokens.size();
  for (size_t i = 0; i < tokens.size(); i += step) {
    model::ForwardItem item{&seq, tokens.subspan(i, std::min(step, tokens.size() - i)), true};
    EXPECT_TRUE(b.forward({&item, 1}, logits).ok());
  }
  return logits;
}

double log_sum_exp(const std::vector<float>& logits) {
  float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
  return mx + std::log(sum);
}

// How closely ember must follow llama.cpp. Fixtures agree with it to float rounding while
// attention is short (both sides' kernels do the same integer block sums); later a different
// summation order in attention can flip one 8-bit activation rounding, which a random-weight
// model amplifies. The real quantized model amplifies such flips from the first step:
// llama.cpp's own first-step log-probabilities move by up to 0.41 between its batched and
// one-token-at-a-time prompt paths (tools/gen_goldens.py's settings, n_batch 512 vs 1), so no
// implementation that rounds in another order can promise 0.05; ember is held to the
// reference's own reproducibility instead.
struct Tolerance {
  double logit;          // each of the reference's top-5 logits, every step
  double logit_p90;      // the 90th percentile of those differences over all prompts and steps
  double first_logprob;  // top-5 log-probabilities at the first step
  double near_tie;       // a top-1 disagreement is allowed only if the reference's own margin
                         // between its choice and ember's is below this (0: never)
};
// On the real models the single largest logit difference over the 1,280 (Gemma) and 1,600
// (SmolLM2) compared is a tail that moves with the summation order while the bulk does not:
// at avx512-vnni, Gemma's max was 1.22 with the legacy tiles' order and 1.54 with
// legacy_phase.h's (median 0.17 and 90th percentile 0.45-0.46 in both; SmolLM2 max 0.72 /
// 0.88, p90 0.32 both). So the bulk is held tight (p90) and the tail loosely (max).
constexpr Tolerance kFixtureTolerance{0.3, 0.3, 0.05, 0.0};
constexpr Tolerance kRealModelTolerance{1.75, 0.6, 0.5, 0.5};

// Teacher-forced greedy decoding: at each step ember's top-1 must equal llama.cpp's (or be a
// near-tie in the reference), and the top-5 logits must agree within the tolerance; the
// reference token is fed back either way, so one disagreement cannot cascade.
TEST_P(Parity, greedy_tokens_and_logits_match_llama_cpp) {
  const Tolerance tol = is_real_model() ? kRealModelTolerance : kFixtureTolerance;
  std::vector<double> diffs;
  for (const auto& g : golden_["greedy"]) {
    auto prompt = g["prompt"].get<std::string>();
    auto ids = model_.tok->encode(prompt, /*add_special=*/true, /*parse_special=*/true);
    ASSERT_EQ(ids, g["prompt_ids"].get<std::vector<int32_t>>()) << prompt;
    auto seq = model_.backend->new_sequence(2048);
    std::vector<int32_t> next = ids;
    int mismatches = 0;
    int step = 0;
    for (const auto& s : g["steps"]) {
      auto logits = feed(*model_.backend, *seq, next, /*one_by_one=*/false);
      int best = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      const auto& top = s["top"];
      int ref_best = top[0][0].get<int>();
      if (best != ref_best) {
        ++mismatches;
        double ref_margin = 1e9;  // reference's logit gap between its choice and ember's
        for (const auto& t : top) {
          if (t[0].get<int>() == best) ref_margin = top[0][1].get<double>() - t[1].get<double>();
        }
        EXPECT_LT(ref_margin, tol.near_tie)
            << prompt << " step " << step << ": ember chose " << best << ", llama.cpp " << ref_best
            << " by a clear margin";
      }
      for (const auto& t : top) {
        int id = t[0].get<int>();
        EXPECT_NEAR(logits[id], t[1].get<double>(), tol.logit)
            << prompt << " step " << step << " token " << id;
        diffs.push_back(std::fabs(logits[id] - t[1].get<double>()));
      }
      if (step == 0) {
        double lse = log_sum_exp(logits);
        for (const auto& t : top) {
          EXPECT_NEAR(logits[t[0].get<int>()] - lse, t[2].get<double>(), tol.first_logprob)
              << prompt << ": first-step log-probability of token " << t[0];
        }
      }
      next = {ref_best};
      ++step;
    }
    RecordProperty("greedy_mismatches: " + prompt, mismatches);
  }
  ASSERT_FALSE(diffs.empty());
  std::sort(diffs.begin(), diffs.end());
  const double p90 = diffs[diffs.size() * 9 / 10];
  EXPECT_LE(p90, tol.logit_p90) << "90th percentile of " << diffs.size()
                                << " top-5 logit differences (max " << diffs.back() << ")";
}

// ember fed the prompt one token at a time against the same reference: the same function,
// rounded in another order, so a looser bound; the reference's choice stays a close second.
TEST_P(Parity, token_by_token_prompt_first_token_matches_llama_cpp) {
  for (const auto& g : golden_["greedy"]) {
    auto ids = g["prompt_ids"].get<std::vector<int32_t>>();
    auto seq = model_.backend->new_sequence(2048);
    auto logits = feed(*model_.backend, *seq, ids, /*one_by_one=*/true);
    const auto& top = g["steps"][0]["top"];
    double lse = log_sum_exp(logits);
    for (const auto& t : top) {
      EXPECT_NEAR(logits[t[0].get<int>()] - lse, t[2].get<double>(), 0.5) << g["prompt"];
    }
    // the reference's first choice is at least a close second for ember
    float ref_logit = logits[top[0][0].get<int>()];
    float best = *std::max_element(logits.begin(), logits.end());
    EXPECT_LE(best - ref_logit, 0.5) << g["prompt"];
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, Parity, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ember
