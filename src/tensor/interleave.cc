#include "tensor/interleave.h"

#include <cstring>

#include "base/result.h"
#include "tensor/matmul.h"
#include "tensor/quant.h"
#include "tensor/quant_simd.h"

namespace ember::tensor {
namespace {

// A block as the layout sees it: `heads` fp16 fields (d, or d and m) then the quant bytes.
struct Shape {
  size_t heads = 0;     // fp16 fields before the quant bytes
  size_t qs_words = 0;  // 32-bit words of quant bytes
};

Shape shape_of(DType t) {
  switch (t) {
    case DType::Q8_0:
      return {1, 8};
    case DType::Q4_0:
      return {1, 4};
    case DType::Q4_1:
      return {2, 4};
    default:
      return {};
  }
}

// Byte offset, within a tile of `lanes` rows, of lane r's fp16 field h and of its word k.
size_t head_at(size_t lanes, size_t h, size_t r) {
  return (h * lanes + r) * 2;
}
size_t word_at(const Shape& s, size_t lanes, size_t k, size_t r) {
  return s.heads * lanes * 2 + (k * lanes + r) * 4;
}

}  // namespace

bool interleavable(DType t) {
  return shape_of(t).heads != 0;
}

int32_t preferred_interleave(DType t, int64_t rows, int64_t cols) {
  if (!interleavable(t) || rows <= 0 || cols <= 0) return 0;
  const simd::GemmKernel g = active_gemm_kernel(t);
  if (g.interleaved_run == nullptr || g.interleave_rows <= 0) return 0;
  return rows % g.interleave_rows == 0 ? g.interleave_rows : 0;
}

void interleave_groups(DType t, int64_t cols, int32_t lanes, const void* src, void* dst, int64_t g0,
                       int64_t g1) {
  const Shape s = shape_of(t);
  EMBER_ASSERT(s.heads != 0 && lanes > 0);
  const size_t bb = block_bytes(t), nb = static_cast<size_t>(cols / block_elems(t));
  const size_t rb = nb * bb, L = static_cast<size_t>(lanes), tile = L * bb;
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  for (auto g = static_cast<size_t>(g0); g < static_cast<size_t>(g1); ++g) {
    for (size_t r = 0; r < L; ++r) {
      const uint8_t* row = in + (g * L + r) * rb;
      for (size_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + b * bb;
        uint8_t* tl = out + (g * nb + b) * tile;
        for (size_t h = 0; h < s.heads; ++h) std::memcpy(tl + head_at(L, h, r), blk + 2 * h, 2);
        for (size_t k = 0; k < s.qs_words; ++k) {
          std::memcpy(tl + word_at(s, L, k, r), blk + 2 * s.heads + 4 * k, 4);
        }
      }
    }
  }
}

void deinterleave_rows(const Matrix& w, int64_t r0, int64_t n, void* dst) {
  const Shape s = shape_of(w.type);
  EMBER_ASSERT(s.heads != 0 && w.interleave > 0 && r0 >= 0 && n >= 0 && r0 + n <= w.rows);
  const size_t bb = block_bytes(w.type), nb = static_cast<size_t>(w.cols / block_elems(w.type));
  const size_t rb = nb * bb, L = static_cast<size_t>(w.interleave), tile = L * bb;
  const auto* in = static_cast<const uint8_t*>(w.data);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const auto row = static_cast<size_t>(r0 + i);
    const size_t g = row / L, r = row % L;
    uint8_t* o = out + static_cast<size_t>(i) * rb;
    for (size_t b = 0; b < nb; ++b) {
      const uint8_t* tl = in + (g * nb + b) * tile;
      uint8_t* blk = o + b * bb;
      for (size_t h = 0; h < s.heads; ++h) std::memcpy(blk + 2 * h, tl + head_at(L, h, r), 2);
      for (size_t k = 0; k < s.qs_words; ++k) {
        std::memcpy(blk + 2 * s.heads + 4 * k, tl + word_at(s, L, k, r), 4);
      }
    }
  }
}

}  // namespace ember::tensor
