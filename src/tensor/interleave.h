// Weight matrices in an interleaved layout: groups of L rows whose blocks are stored side by side,
// so a SIMD level that keeps one row per vector lane reads its operands with plain vector loads
// instead of transposing rows at run time (the prefill packs) or reducing one row's block sums
// across lanes (the decode rows). The bits are the plain layout's, permuted: a matrix takes the
// same memory and streams as one sequential read.
//
// Layout, for the types interleavable() accepts (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) and rows a
// multiple of L: group g (rows gL .. gL+L-1) is nb tiles, one per block column b, tile (g, b) at
// byte offset (g * nb + b) * L * block_bytes. A tile holds, for lanes r = 0 .. L-1 (row gL + r):
//   d[L]     the rows' fp16 block scales,
//   m[L]     the rows' fp16 block mins (Q4_1, Q5_1),
//   qh[L]    the rows' 32-bit words of fifth bits (Q5_0, Q5_1), reordered: bit 8i + k holds
//            element 4k + i's (i < 4, k < 8),
//   then the rows' quant bytes as 32-bit words: word k of all L rows together (64 bytes at L =
//   16), i.e. byte 4r + j of word group k is qs[4k + j] of row gL + r, unchanged.
// Matrix::interleave = L marks a matrix in this layout (tensor/matmul.h). Every level computes
// with it: the levels with a kernel for it (GemmKernel::interleaved_run) read it directly,
// every other one de-interleaves a group of rows into scratch first, with the same results.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace ember::tensor {

struct Matrix;

// True for the types the layout is defined for.
bool interleavable(DType t);

// The interleave the active SIMD level computes fastest with for a rows x cols matrix of type t:
// its kernel's lanes where it has one and rows divide, else 0 (keep the plain layout).
int32_t preferred_interleave(DType t, int64_t rows, int64_t cols);

// Writes rows x cols of plain rows (src) into dst in the layout with `lanes` rows per group,
// group range [g0, g1) only (for copying in chunks). rows % lanes == 0; dst and src don't alias.
void interleave_groups(DType t, int64_t cols, int32_t lanes, const void* src, void* dst, int64_t g0,
                       int64_t g1);

// A whole rows x cols matrix of plain rows into dst in the layout, in chunks of about 4 MiB;
// with release_source, src's pages are released (release_pages) as each chunk is done, so the
// copy never holds both whole (as WeightArena::add does for a plain copy).
void interleave_matrix(DType t, int64_t rows, int64_t cols, int32_t lanes, const void* src,
                       void* dst, bool release_source);

// Plain row bytes of rows [r0, r0 + n) of an interleaved matrix w, into dst (n * row_bytes).
void deinterleave_rows(const Matrix& w, int64_t r0, int64_t n, void* dst);

}  // namespace ember::tensor
