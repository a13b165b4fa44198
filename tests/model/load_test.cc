// Loading: every fixture architecture and type binds; broken files fail naming the culprit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/file.h"
#include "model/model_test_util.h"
#include "model/weights.h"
#include "tensor/interleave.h"

namespace ember::model {
namespace {

using ::testing::HasSubstr;
using namespace ember::model::testing;
using tensor::DType;

struct Case {
  std::string arch;
  bool tied;
  DType type;
};

class LoadsEveryFixture : public ::testing::TestWithParam<Case> {};

TEST_P(LoadsEveryFixture, loads_and_reports_its_config) {
  const Case& c = GetParam();
  fixture::FixtureSpec spec;
  spec.arch = c.arch;
  spec.tied = c.tied;
  spec.type = c.type;
  const std::string name = c.arch + (c.tied ? "_tied_" : "_") + std::string(dtype_name(c.type));
  auto b = load_fixture(spec, name);
  ASSERT_TRUE(b);
  const ModelConfig& cfg = b->config();
  EXPECT_EQ(cfg.arch_name, c.arch);
  EXPECT_EQ(cfg.n_layer, spec.n_layer);
  EXPECT_EQ(cfg.n_embd, spec.n_embd);
  EXPECT_EQ(cfg.n_head, spec.n_head);
  EXPECT_EQ(cfg.n_head_kv, spec.n_head_kv);
  EXPECT_EQ(cfg.head_dim, spec.n_embd / spec.n_head);
  EXPECT_EQ(cfg.n_ff, spec.n_ff);
  EXPECT_EQ(cfg.n_ctx_train, spec.n_ctx);
  EXPECT_EQ(cfg.tied_output, c.tied || c.arch == "gemma2");  // gemma2: token_embd always
  EXPECT_EQ(cfg.rope_neox, c.arch != "llama");
  EXPECT_GT(cfg.n_vocab, 0);
  EXPECT_EQ(b->n_ctx(), spec.n_ctx);
  // And it computes finite, non-constant logits.
  auto seq = b->new_sequence(16);
  auto toks = tokens(5, cfg.n_vocab);
  auto logits = run(*b, *seq, toks);
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); }));
  EXPECT_NE(*std::max_element(logits.begin(), logits.end()),
            *std::min_element(logits.begin(), logits.end()));
  EXPECT_EQ(seq->length(), 5);
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (std::string arch : {"llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"}) {
    for (bool tied : {false, true}) {
      for (DType t : {DType::F32, DType::F16, DType::Q8_0}) out.push_back({arch, tied, t});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Model, LoadsEveryFixture, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) {
                           return info.param.arch + (info.param.tied ? "_tied_" : "_untied_") +
                                  std::string(tensor::dtype_name(info.param.type));
                         });

// The copies hold the same rows: in the plain layout, or in the interleaved one where the active
// level's kernels read it (tensor/interleave.h), which every matrix here can take.
TEST(ModelLoad, weights_copied_to_the_arena_are_the_same_bytes_and_a_tied_output_is_shared) {
  fixture::FixtureSpec spec;
  spec.arch = "gemma3";
  spec.tied = true;
  spec.type = DType::Q8_0;
  auto f = fixture_file(spec, "arena_gemma3");
  ASSERT_TRUE(f);
  auto cfg = read_config(*f);
  ASSERT_TRUE(cfg.ok());
  auto bound = bind_weights(*f, *cfg);
  ASSERT_TRUE(bound.ok());
  Weights w = std::move(bound).value();
  const Weights mapped = w;
  ASSERT_TRUE(copy_weights_to_arena(&w, *cfg));
  ASSERT_NE(w.arena, nullptr);
  auto same = [&](const tensor::Matrix& a, const tensor::Matrix& b) {
    const size_t n = tensor::row_bytes(a.type, a.cols) * static_cast<size_t>(a.rows);
    EXPECT_TRUE(w.arena->contains(a.data));
    EXPECT_FALSE(w.arena->contains(b.data));
    EXPECT_EQ(b.interleave, 0);
    EXPECT_EQ(a.interleave, tensor::preferred_interleave(a.type, a.rows, a.cols));
    std::vector<uint8_t> rows(n);
    if (a.interleave > 0) {
      tensor::deinterleave_rows(a, 0, a.rows, rows.data());
    } else {
      std::memcpy(rows.data(), a.data, n);
    }
    EXPECT_EQ(std::memcmp(rows.data(), b.data, n), 0);
  };
  same(w.token_embd, mapped.token_embd);
  EXPECT_EQ(w.output.data, w.token_embd.data) << "the tied output is copied once";
  EXPECT_EQ(w.output.interleave, w.token_embd.interleave);
  for (size_t il = 0; il < w.layers.size(); ++il) {
    same(w.layers[il].wq, mapped.layers[il].wq);
    same(w.layers[il].w_down, mapped.layers[il].w_down);
  }
  // The norm vectors are copied too (a norm read from the mapping keeps a 2 MiB folio of the
  // file in RSS where the kernel maps the page cache so: weights.h), with the same values.
  auto same_vec = [&](const float* a, const float* b, int64_t n) {
    ASSERT_NE(a, nullptr);
    EXPECT_TRUE(w.arena->contains(a));
    EXPECT_FALSE(w.arena->contains(b));
    EXPECT_EQ(std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)), 0);
  };
  same_vec(w.output_norm, mapped.output_norm, cfg->n_embd);
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const LayerWeights &l = w.layers[il], &m = mapped.layers[il];
    for (auto [a, b] : {std::pair{l.attn_norm, m.attn_norm},
                        {l.ffn_norm, m.ffn_norm},
                        {l.post_attn_norm, m.post_attn_norm},
                        {l.post_ffn_norm, m.post_ffn_norm}}) {
      same_vec(a, b, cfg->n_embd);
    }
    same_vec(l.q_norm, m.q_norm, cfg->head_dim);
    same_vec(l.k_norm, m.k_norm, cfg->head_dim);
  }
}

// The fixture with its vocabulary padded to a multiple of 64 tokens, so the embedding matrix
// (n_vocab rows) divides into any interleave's groups as a real model's does.
std::unique_ptr<Backend> load_fixture_whole_groups(const fixture::FixtureSpec& spec,
                                                   const std::string& name, LoadOptions opts) {
  auto vocab = fixture::fixture_vocab(spec);
  EXPECT_TRUE(vocab.ok()) << vocab.message();
  if (!vocab.ok()) return nullptr;
  text::Vocab v = std::move(vocab).value();
  while (v.tokens.size() % 64 != 0) {
    v.tokens.push_back("<pad" + std::to_string(v.tokens.size()) + ">");
    v.types.push_back(text::TokenType::Unused);
    if (!v.scores.empty()) v.scores.push_back(0.f);
  }
  auto bytes = fixture::fixture_bytes(spec, v);
  EXPECT_TRUE(bytes.ok()) << bytes.message();
  if (!bytes.ok()) return nullptr;
  const std::string path = temp_path(name);
  EXPECT_TRUE(write_file_atomic(path, *bytes).ok());
  auto f = open_file(path);
  if (!f) return nullptr;
  opts.n_threads = 2;
  auto b = load_cpu_model(f, opts);
  EXPECT_TRUE(b.ok()) << b.message();
  if (!b.ok()) return nullptr;
  return std::move(b).value();
}

// Q4_K stays in the plain layout; Q8_0 and Q4_1 are interleaved where the level reads that,
// the token embeddings included, so the embedding lookup (get_row) reads the layout too
// (gemma3's output is tied to them). Prompt and decode steps.
TEST(ModelLoad, huge_page_weights_give_bit_identical_logits) {
  for (const auto& [arch, type] : {std::pair<std::string, DType>{"llama", DType::Q4_K},
                                   {"llama", DType::Q4_1},
                                   {"gemma3", DType::Q8_0}}) {
    fixture::FixtureSpec spec;
    spec.arch = arch;
    spec.type = type;
    spec.tied = arch == "gemma3";
    LoadOptions on, off;
    off.huge_page_weights = false;
    const std::string name = "arena_" + arch + std::string(tensor::dtype_name(type));
    auto a = load_fixture_whole_groups(spec, name + "_on", on);
    auto b = load_fixture_whole_groups(spec, name + "_off", off);
    ASSERT_TRUE(a && b);
    auto sa = a->new_sequence(16), sb = b->new_sequence(16);
    for (const std::vector<int32_t>& toks : {std::vector<int32_t>{1, 5, 9, 3}, {7}, {2}}) {
      const auto la = run(*a, *sa, toks), lb = run(*b, *sb, toks);
      ASSERT_EQ(la.size(), lb.size());
      EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0)
          << arch << " " << tensor::dtype_name(type) << " " << toks.size() << " tokens";
    }
  }
}

// The server's way: the backend is usable before the huge-page copy is done (forwards read the
// mapping), adopts the copies at a forward after it finishes, and every logit is the same
// before and after, and as without the copy.
TEST(ModelLoad, a_background_weight_copy_is_adopted_by_a_later_forward_with_identical_logits) {
  fixture::FixtureSpec spec;
  spec.arch = "llama";
  spec.type = DType::Q4_K;
  LoadOptions bg, off;
  bg.copy_weights_in_background = true;
  off.huge_page_weights = false;
  auto a = load_fixture(spec, "copy_bg", bg);
  auto b = load_fixture(spec, "copy_off", off);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->weight_copy_bytes(), 0) << "nothing is adopted before a forward";
  const std::vector<int32_t> toks{1, 5, 9, 3};
  auto s1 = a->new_sequence(16);
  const auto first = run(*a, *s1, toks);  // the mapping or the copies, whichever is ready
  a->settle_weights();
  EXPECT_GT(a->weight_copy_bytes(), 0) << "the finished copy is in use";
  auto s2 = a->new_sequence(16), sb = b->new_sequence(16);
  const auto copied = run(*a, *s2, toks), mapped = run(*b, *sb, toks);
  ASSERT_EQ(first.size(), mapped.size());
  ASSERT_EQ(copied.size(), mapped.size());
  EXPECT_EQ(std::memcmp(first.data(), mapped.data(), mapped.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(copied.data(), mapped.data(), mapped.size() * sizeof(float)), 0);
  EXPECT_EQ(b->weight_copy_bytes(), 0);
}

// Destroying a backend whose copy is still running cancels and joins it (no hang, no leak: the
// sanitizer builds run this too).
TEST(ModelLoad, a_backend_destroyed_during_its_background_copy_stops_it) {
  fixture::FixtureSpec spec;
  spec.arch = "gemma3";
  spec.type = DType::Q8_0;
  LoadOptions bg;
  bg.copy_weights_in_background = true;
  for (int i = 0; i < 3; ++i) {
    auto a = load_fixture(spec, "copy_cancel", bg);
    ASSERT_TRUE(a);
  }
}

TEST(ModelLoad, gemma3_config_follows_llama_cpp_rules) {
  fixture::FixtureSpec spec;
  spec.arch = "gemma3";
  spec.n_layer = 7;
  spec.head_dim = 32;  // differs from n_embd / n_head, as in real Gemma models
  auto f = fixture_file(spec, "gemma3_cfg");
  auto cfg = read_config(*f);
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  EXPECT_EQ(cfg->head_dim, 32);
  EXPECT_EQ(cfg->sliding_window, spec.sliding_window);
  EXPECT_FLOAT_EQ(cfg->rope_base_local, 10000.f);
  EXPECT_FLOAT_EQ(cfg->attn_scale, 1.f / std::sqrt(32.f));
  for (int il = 0; il < 7; ++il) EXPECT_EQ(cfg->is_sliding(il), il != 5) << il;
  auto b = load_cpu_model(f, {.n_threads = 1});
  ASSERT_TRUE(b.ok()) << b.message();
}

// llama.cpp's gemma2 rules: every other layer (from the first) slides, the sliding layers keep
// the global rope base, a 4096 window and caps of 50 (attention) and 30 (logits) when the file
// does not say, and the query scale 1/sqrt(head_dim).
TEST(ModelLoad, gemma2_config_follows_llama_cpp_rules) {
  fixture::FixtureSpec spec;
  spec.arch = "gemma2";
  spec.n_layer = 5;
  spec.head_dim = 32;
  auto f = fixture_file(spec, "gemma2_cfg");
  auto cfg = read_config(*f);
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  EXPECT_EQ(cfg->sliding_window, spec.sliding_window);
  EXPECT_FLOAT_EQ(cfg->rope_base_local, cfg->rope_base);
  EXPECT_FLOAT_EQ(cfg->attn_scale, 1.f / std::sqrt(32.f));
  EXPECT_FLOAT_EQ(cfg->attn_logit_softcap, 5.f);  // the fixture's caps
  EXPECT_FLOAT_EQ(cfg->final_logit_softcap, 15.f);
  EXPECT_TRUE(cfg->tied_output);
  for (int il = 0; il < 5; ++il) EXPECT_EQ(cfg->is_sliding(il), il % 2 == 0) << il;

  const std::string out = temp_path("gemma2_defaults");
  rewrite(
      *f, out, [](std::vector<TensorCopy>&) {},
      [](const std::string& key, gguf::Writer&, bool& handled) {
        handled = key == "gemma2.attention.sliding_window" ||
                  key == "gemma2.attn_logit_softcapping" || key == "gemma2.final_logit_softcapping";
      });
  auto f2 = open_file(out);
  ASSERT_TRUE(f2);
  auto dflt = read_config(*f2);
  ASSERT_TRUE(dflt.ok()) << dflt.message();
  EXPECT_EQ(dflt->sliding_window, 4096);
  EXPECT_FLOAT_EQ(dflt->attn_logit_softcap, 50.f);
  EXPECT_FLOAT_EQ(dflt->final_logit_softcap, 30.f);
}

TEST(ModelLoad, n_ctx_defaults_to_training_context_capped_at_4096) {
  fixture::FixtureSpec spec;
  spec.n_ctx = 8192;
  auto f = fixture_file(spec, "ctx8192");
  auto b = load_cpu_model(f, {.n_threads = 1});
  ASSERT_TRUE(b.ok()) << b.message();
  EXPECT_EQ((*b)->n_ctx(), 4096);
  auto b2 = load_cpu_model(f, {.n_threads = 1, .n_ctx = 100});
  ASSERT_TRUE(b2.ok());
  EXPECT_EQ((*b2)->n_ctx(), 100);
}

class BrokenFile : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_.arch = "qwen3";
    good_ = fixture_file(spec_, "broken_base");
    ASSERT_TRUE(good_);
  }
  std::string load_error(const std::string& path) {
    auto f = open_file(path);
    if (!f) return "<open failed>";
    auto b = load_cpu_model(f, {.n_threads = 1});
    EXPECT_FALSE(b.ok());
    return b.ok() ? "" : b.message();
  }
  fixture::FixtureSpec spec_;
  std::shared_ptr<const gguf::File> good_;
};

TEST_F(BrokenFile, missing_tensor_is_named) {
  const std::string out = temp_path("missing_tensor");
  rewrite(*good_, out, [](std::vector<TensorCopy>& ts) {
    std::erase_if(ts, [](const TensorCopy& t) { return t.name == "blk.1.attn_k_norm.weight"; });
  });
  EXPECT_THAT(load_error(out),
              AllOf(HasSubstr("missing tensor"), HasSubstr("blk.1.attn_k_norm.weight")));
}

TEST_F(BrokenFile, wrong_shape_names_tensor_and_both_shapes) {
  const std::string out = temp_path("wrong_shape");
  rewrite(*good_, out, [](std::vector<TensorCopy>& ts) {
    for (auto& t : ts) {
      if (t.name == "blk.0.ffn_up.weight") {
        t.dims = {64, 64};  // was {64, 128}
        t.bytes.resize(64 * 64 * sizeof(float));
      }
    }
  });
  EXPECT_THAT(load_error(out), AllOf(HasSubstr("blk.0.ffn_up.weight"), HasSubstr("[64, 64]"),
                                     HasSubstr("expected [64, 128]")));
}

TEST_F(BrokenFile, unsupported_norm_type_is_named) {
  const std::string out = temp_path("norm_type");
  rewrite(*good_, out, [](std::vector<TensorCopy>& ts) {
    for (auto& t : ts) {
      if (t.name == "output_norm.weight") {
        t.type = DType::F16;
        t.bytes.resize(t.bytes.size() / 2);
      }
    }
  });
  EXPECT_THAT(load_error(out),
              AllOf(HasSubstr("output_norm.weight"), HasSubstr("F16"), HasSubstr("expected F32")));
}

// A type the reader knows but no matmul kernel reads (Q8_1, an activation format) is refused at
// load, naming the tensor, its type and the weight types ember runs.
TEST_F(BrokenFile, unsupported_weight_type_is_named_with_the_supported_list) {
  const std::string out = temp_path("weight_type");
  rewrite(*good_, out, [](std::vector<TensorCopy>& ts) {
    for (auto& t : ts) {
      if (t.name == "blk.0.ffn_up.weight") {
        t.type = DType::Q8_1;
        t.bytes.resize(tensor::row_bytes(DType::Q8_1, 64) * 128);
      }
    }
  });
  EXPECT_THAT(load_error(out),
              AllOf(HasSubstr("blk.0.ffn_up.weight"), HasSubstr("has type Q8_1"),
                    HasSubstr("(supported: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, "
                              "Q4_K, Q5_K, Q6_K, BF16)")));
}

TEST_F(BrokenFile, unknown_architecture_is_named_with_the_supported_list) {
  const std::string out = temp_path("unknown_arch");
  rewrite(
      *good_, out, [](std::vector<TensorCopy>&) {},
      [](const std::string& key, gguf::Writer& w, bool& handled) {
        if (key == "general.architecture") {
          w.set_string(key, "mamba9");
          handled = true;
        }
      });
  EXPECT_THAT(load_error(out),
              AllOf(HasSubstr("mamba9"), HasSubstr("llama, qwen2, qwen3, gemma2, gemma3, phi3"),
                    HasSubstr("not supported")));
}

TEST_F(BrokenFile, missing_hyperparameter_is_named) {
  const std::string out = temp_path("missing_key");
  rewrite(
      *good_, out, [](std::vector<TensorCopy>&) {},
      [](const std::string& key, gguf::Writer&, bool& handled) {
        handled = key == "qwen3.block_count";
      });
  EXPECT_THAT(load_error(out), HasSubstr("qwen3.block_count"));
}

}  // namespace
}  // namespace ember::model
