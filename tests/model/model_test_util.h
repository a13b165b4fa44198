// Helpers for model tests: write fixtures into the test's temp dir, open them, and rewrite a
// GGUF file with one thing broken (a tensor dropped or reshaped, a key changed).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fixture/fixture.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "model/backend.h"

namespace ember::model::testing {

inline std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/ember_model_" + name + ".gguf";
}

inline std::shared_ptr<const gguf::File> open_file(const std::string& path) {
  auto f = gguf::File::open(path);
  EXPECT_TRUE(f.ok()) << f.message();
  if (!f.ok()) return nullptr;
  return std::make_shared<const gguf::File>(std::move(f).value());
}

inline std::shared_ptr<const gguf::File> fixture_file(const fixture::FixtureSpec& spec,
                                                      const std::string& name) {
  const std::string path = temp_path(name);
  auto st = fixture::write_fixture(spec, path);
  EXPECT_TRUE(st.ok()) << st.message();
  return open_file(path);
}

inline std::unique_ptr<Backend> load_fixture(const fixture::FixtureSpec& spec,
                                             const std::string& name, LoadOptions opts = {}) {
  if (opts.n_threads == 0) opts.n_threads = 2;
  auto f = fixture_file(spec, name);
  if (!f) return nullptr;
  auto b = load_cpu_model(f, opts);
  EXPECT_TRUE(b.ok()) << b.message();
  if (!b.ok()) return nullptr;
  return std::move(b).value();
}

struct TensorCopy {
  std::string name;
  tensor::DType type;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;
};

// Copies every metadata value (the types fixtures use) and every tensor of `in` into a new
// file at `out`, letting `edit` change the tensor list and the writer first.
inline void rewrite(
    const gguf::File& in, const std::string& out,
    const std::function<void(std::vector<TensorCopy>&)>& edit_tensors,
    const std::function<void(const std::string&, gguf::Writer&, bool&)>& edit_kv = nullptr) {
  gguf::Writer w;
  for (const auto& [key, v] : in.metadata()) {
    bool handled = false;
    if (edit_kv) edit_kv(key, w, handled);
    if (handled) continue;
    using VT = gguf::ValueType;
    switch (v.type) {
      case VT::U32:
        w.set_u32(key, static_cast<uint32_t>(v.u));
        break;
      case VT::I32:
        w.set_i32(key, static_cast<int32_t>(v.i));
        break;
      case VT::U64:
        w.set_u64(key, v.u);
        break;
      case VT::F32:
        w.set_f32(key, static_cast<float>(v.f));
        break;
      case VT::BOOL:
        w.set_bool(key, v.u != 0);
        break;
      case VT::STRING:
        w.set_string(key, std::string(v.s));
        break;
      case VT::ARRAY: {
        if (v.elem_type == VT::STRING) {
          std::vector<std::string> s;
          for (size_t k = 0; k < v.size(); ++k) s.emplace_back(v.at(k).s);
          w.set_string_array(key, s);
        } else if (v.elem_type == VT::F32) {
          std::vector<float> s;
          for (size_t k = 0; k < v.size(); ++k) s.push_back(static_cast<float>(v.at(k).f));
          w.set_f32_array(key, s);
        } else {
          std::vector<int32_t> s;
          for (size_t k = 0; k < v.size(); ++k) s.push_back(static_cast<int32_t>(v.at(k).i));
          w.set_i32_array(key, s);
        }
        break;
      }
      default:
        ADD_FAILURE() << "rewrite: unhandled metadata type for " << key;
    }
  }
  std::vector<TensorCopy> ts;
  for (const auto& t : in.tensors()) {
    ts.push_back({t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
  }
  edit_tensors(ts);
  for (auto& t : ts) w.add_tensor(t.name, t.type, t.dims, std::move(t.bytes));
  auto st = w.write(out);
  ASSERT_TRUE(st.ok()) << st.message();
}

// A KV block's bytes as one buffer (the pieces of KvBlock::bytes(), concatenated).
inline std::vector<uint8_t> flat_bytes(const KvBlock& b) {
  std::vector<uint8_t> out;
  for (std::span<const uint8_t> piece : b.bytes())
    out.insert(out.end(), piece.begin(), piece.end());
  return out;
}

// Runs one item and returns its last-token logits.
inline std::vector<float> run(Backend& b, Sequence& seq, std::span<const int32_t> tokens) {
  std::vector<float> logits(b.config().n_vocab);
  ForwardItem item{&seq, tokens, true};
  auto st = b.forward(std::span(&item, 1), logits);
  EXPECT_TRUE(st.ok()) << st.message();
  return logits;
}

inline int32_t argmax(std::span<const float> v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] > v[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

inline float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// Deterministic pseudo-random token ids in [0, n_vocab).
inline std::vector<int32_t> tokens(int n, int32_t n_vocab, uint32_t seed = 7) {
  std::vector<int32_t> out(n);
  uint32_t s = seed;
  for (auto& t : out) {
    s = s * 1664525u + 1013904223u;
    t = static_cast<int32_t>((s >> 8) % static_cast<uint32_t>(n_vocab));
  }
  return out;
}

}  // namespace ember::model::testing
