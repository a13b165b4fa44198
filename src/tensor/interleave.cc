#include "tensor/interleave.h"

#include <algorithm>
#include <cstring>

#include "base/result.h"
#include "tensor/matmul.h"
#include "tensor/quant.h"
#include "tensor/quant_simd.h"
#include "tensor/weight_arena.h"

namespace ember::tensor {
namespace {

// A block as the layout sees it: `heads` fp16 fields (d, or d and m), the 32-bit word of fifth
// bits (Q5_0, Q5_1), then the quant bytes.
struct Shape {
  size_t heads = 0;     // fp16 fields before the quant bytes
  bool qh = false;      // a word of fifth bits after them
  size_t qs_words = 0;  // 32-bit words of quant bytes
};

Shape shape_of(DType t) {
  switch (t) {
    case DType::Q8_0:
      return {1, false, 8};
    case DType::Q4_0:
      return {1, false, 4};
    case DType::Q4_1:
      return {2, false, 4};
    case DType::Q5_0:
      return {1, true, 4};
    case DType::Q5_1:
      return {2, true, 4};
    default:
      return {};
  }
}

// Byte offset, within a tile of `lanes` rows, of lane r's fp16 field h, its fifth-bit word and
// its quant word k.
size_t head_at(size_t lanes, size_t h, size_t r) {
  return (h * lanes + r) * 2;
}
size_t qh_at(const Shape& s, size_t lanes, size_t r) {
  return s.heads * lanes * 2 + r * 4;
}
size_t word_at(const Shape& s, size_t lanes, size_t k, size_t r) {
  return s.heads * lanes * 2 + (s.qh ? lanes * 4 : 0) + (k * lanes + r) * 4;
}

// The fifth bits reordered so that bit 8i + k holds element 4k + i's (i < 4, k < 8): a kernel
// then finds the bits of elements 4k..4k+3 (one 32-bit lane of its vector k) in byte i's bit
// k, one shift and one mask away from bit 4.
uint32_t spread_qh(uint32_t qh) {
  uint32_t out = 0;
  for (uint32_t k = 0; k < 8; ++k) {
    for (uint32_t i = 0; i < 4; ++i) out |= ((qh >> (4 * k + i)) & 1u) << (8 * i + k);
  }
  return out;
}
uint32_t gather_qh(uint32_t spread) {
  uint32_t out = 0;
  for (uint32_t k = 0; k < 8; ++k) {
    for (uint32_t i = 0; i < 4; ++i) out |= ((spread >> (8 * i + k)) & 1u) << (4 * k + i);
  }
  return out;
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
        const size_t qs = 2 * s.heads + (s.qh ? 4 : 0);
        if (s.qh) {
          uint32_t qh;
          std::memcpy(&qh, blk + 2 * s.heads, 4);
          qh = spread_qh(qh);
          std::memcpy(tl + qh_at(s, L, r), &qh, 4);
        }
        for (size_t k = 0; k < s.qs_words; ++k) {
          std::memcpy(tl + word_at(s, L, k, r), blk + qs + 4 * k, 4);
        }
      }
    }
  }
}

void interleave_matrix(DType t, int64_t rows, int64_t cols, int32_t lanes, const void* src,
                       void* dst, bool release_source) {
  EMBER_ASSERT(lanes > 0 && rows % lanes == 0);
  const size_t group_bytes = row_bytes(t, cols) * static_cast<size_t>(lanes);
  const int64_t groups = rows / lanes;
  const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>((size_t{4} << 20) / group_bytes));
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t g = 0; g < groups; g += chunk) {
    const int64_t g1 = std::min(groups, g + chunk);
    interleave_groups(t, cols, lanes, src, dst, g, g1);
    if (release_source) {
      release_pages(s + static_cast<size_t>(g) * group_bytes,
                    static_cast<size_t>(g1 - g) * group_bytes);
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
      const size_t qs = 2 * s.heads + (s.qh ? 4 : 0);
      if (s.qh) {
        uint32_t qh;
        std::memcpy(&qh, tl + qh_at(s, L, r), 4);
        qh = gather_qh(qh);
        std::memcpy(blk + 2 * s.heads, &qh, 4);
      }
      for (size_t k = 0; k < s.qs_words; ++k) {
        std::memcpy(blk + qs + 4 * k, tl + word_at(s, L, k, r), 4);
      }
    }
  }
}

}  // namespace ember::tensor
