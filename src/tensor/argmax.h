// argmax over a row of floats (greedy decoding's pick over the vocabulary's logits): the index
// of the largest value, the lowest such index on ties (-0 and +0 are equal), a NaN never picked
// unless x[0] is one (then 0). Every level returns the scalar twin's index (tested on ties,
// NaNs, infinities and tails). Dispatched through the SIMD level table (quant.h's
// set_simd_level reaches it).
//
// Greedy decode runs it once per token per sequence on the engine thread, while the other
// threads wait for the next step: 262,144 logits for Gemma 3. The twin takes two passes (the
// maximum, then its first index: on average half the row again); the AVX2 kernel reads the row
// once in blocks of 256, then rescans only the block that holds the maximum (argmax.cc;
// docs/perf-notes.md, "The engine thread's serial work").
#pragma once

#include <cstdint>

namespace ember::tensor {

// n >= 1.
int32_t argmax(const float* x, int32_t n);

namespace ref {
int32_t argmax(const float* x, int32_t n);
}  // namespace ref

}  // namespace ember::tensor
