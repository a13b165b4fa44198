// load_vocab: keys, llama.cpp's defaults, text-detected end-of-turn tokens, and clear errors.
#include "text/vocab.h"

#include <gtest/gtest.h>

#include <chrono>

#include "text/vocab_test_util.h"

namespace ember::text {
namespace {

using testing::gguf_round_trip;

gguf::Writer writer_for(const Vocab& v) {
  gguf::Writer w;
  fixture::write_vocab(w, v);
  return w;
}

TEST(Vocab, bpe_fixture_survives_a_gguf_round_trip) {
  const Vocab v = fixture::build_bpe_vocab({});
  auto r = gguf_round_trip(writer_for(v), "bpe");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->model, "gpt2");
  EXPECT_EQ(r->pre, "llama3");
  EXPECT_EQ(r->tokens, v.tokens);
  EXPECT_EQ(r->types, v.types);
  EXPECT_EQ(r->merges, v.merges);
  EXPECT_EQ(r->bos, v.bos);
  EXPECT_EQ(r->eos, v.eos);
  EXPECT_EQ(r->eot, v.eot);
  EXPECT_TRUE(r->add_bos);
  EXPECT_FALSE(r->add_eos);
  EXPECT_EQ(r->eog, v.eog);
}

TEST(Vocab, spm_fixture_survives_a_gguf_round_trip) {
  const Vocab v = fixture::build_spm_vocab({});
  auto r = gguf_round_trip(writer_for(v), "spm");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->model, "llama");
  EXPECT_EQ(r->tokens, v.tokens);
  EXPECT_EQ(r->scores, v.scores);
  EXPECT_EQ(r->unk, v.unk);
  EXPECT_EQ(r->pad, v.pad);
  EXPECT_FALSE(r->add_space_prefix);
  EXPECT_EQ(r->eog, v.eog);
}

TEST(Vocab, spm_without_keys_gets_llama_cpp_defaults) {
  gguf::Writer w;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a"});
  auto r = gguf_round_trip(w, "spm_defaults");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->unk, 0);
  EXPECT_EQ(r->bos, 1);
  EXPECT_EQ(r->eos, 2);
  EXPECT_TRUE(r->add_bos);
  EXPECT_TRUE(r->add_space_prefix);
  EXPECT_EQ(r->eog, (std::vector<int32_t>{2}));
  EXPECT_EQ(r->types, std::vector<TokenType>(4, TokenType::Normal));
}

TEST(Vocab, end_of_turn_tokens_are_found_by_text_and_become_control) {
  Vocab v = testing::tiny_bpe({"<|im_end|>", "<|endoftext|>"}, {}, "qwen2");
  v.eos = 257;
  gguf::Writer w = writer_for(v);
  auto r = gguf_round_trip(w, "eot");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->eot, 256);
  EXPECT_EQ(r->eog, (std::vector<int32_t>{256, 257}));
  EXPECT_EQ(r->types[256], TokenType::Control);
  EXPECT_EQ(r->types[257], TokenType::Control);
  EXPECT_FALSE(r->add_bos);  // qwen2 does not add BOS by default
}

TEST(Vocab, empty_tokens_get_a_unique_placeholder) {
  gguf::Writer w;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", ""});
  auto r = gguf_round_trip(w, "empty_token");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->tokens[3], "[EMPTY_3]");
}

TEST(Vocab, scores_of_the_wrong_length_are_an_error_naming_the_key) {
  Vocab v = fixture::build_spm_vocab({});
  v.scores.pop_back();
  auto r = gguf_round_trip(writer_for(v), "bad_scores");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("tokenizer.ggml.scores"), std::string::npos) << r.message();
}

TEST(Vocab, token_types_of_the_wrong_length_are_an_error) {
  gguf::Writer w;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
  w.set_i32_array("tokenizer.ggml.token_type", {2, 3});
  auto r = gguf_round_trip(w, "bad_types");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("tokenizer.ggml.token_type"), std::string::npos) << r.message();
}

TEST(Vocab, missing_pieces_are_errors_naming_the_key) {
  {
    gguf::Writer w;
    w.set_string("general.architecture", "llama");
    auto r = gguf_round_trip(w, "no_model");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("tokenizer.ggml.model"), std::string::npos) << r.message();
  }
  {
    gguf::Writer w;
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string_array("tokenizer.ggml.tokens", {"a", "b"});
    auto r = gguf_round_trip(w, "no_merges");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("tokenizer.ggml.merges"), std::string::npos) << r.message();
  }
  {
    gguf::Writer w;
    w.set_string("tokenizer.ggml.model", "llama");
    auto r = gguf_round_trip(w, "no_tokens");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("tokenizer.ggml.tokens"), std::string::npos) << r.message();
  }
}

TEST(Vocab, unsupported_model_and_out_of_range_ids_are_errors) {
  {
    gguf::Writer w;
    w.set_string("tokenizer.ggml.model", "bert");
    w.set_string_array("tokenizer.ggml.tokens", {"a"});
    auto r = gguf_round_trip(w, "bert");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("bert"), std::string::npos) << r.message();
  }
  {
    Vocab v = fixture::build_spm_vocab({});
    gguf::Writer w = writer_for(v);
    w.set_u32("tokenizer.ggml.eos_token_id", 1000000);
    auto r = gguf_round_trip(w, "bad_eos");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.message().find("tokenizer.ggml.eos_token_id"), std::string::npos) << r.message();
  }
}

TEST(Vocab, gemma_vocab_loads_with_its_chat_markers) {
  auto f = gguf::File::open(testing::gemma_path());
  ASSERT_TRUE(f.ok()) << f.message();
  const auto t0 = std::chrono::steady_clock::now();
  auto v = load_vocab(*f);
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(v.ok()) << v.message();
  auto tok = Tokenizer::create(std::move(v).value());
  const auto t2 = std::chrono::steady_clock::now();
  ASSERT_TRUE(tok.ok()) << tok.message();
  using ms = std::chrono::milliseconds;
  std::printf("gemma vocab: load_vocab %lld ms, Tokenizer::create %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<ms>(t1 - t0).count()),
              static_cast<long long>(std::chrono::duration_cast<ms>(t2 - t1).count()));
  const Vocab& g = (*tok)->vocab();
  EXPECT_EQ(g.tokens[105], "<start_of_turn>");
  EXPECT_EQ(g.types[105], TokenType::Control);
  EXPECT_EQ(g.types[138], TokenType::UserDefined);  // "  "
  EXPECT_EQ(g.types[238], TokenType::Byte);         // <0x00>
}

}  // namespace
}  // namespace ember::text
