// Block structs for the quantized types, byte-for-byte as ggml lays them out (ggml-common.h), so
// GGUF tensor data is read in place. Halves are stored as raw uint16_t (IEEE binary16 bits).
// Internal to the tensor layer: other layers go through quant.h.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace ember::tensor {

constexpr int kQK = 32;    // elements per legacy block
constexpr int kQKK = 256;  // elements per K-quant super-block
constexpr int kKScaleBytes = 12;

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];  // element j in low nibble of qs[j], element j+16 in the high nibble
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // bit j: 5th bit of element j (little-endian uint32)
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;  // d * sum(qs)
  int8_t qs[kQK];
};
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];  // low nibble scale, high nibble min, per 16 elements
  uint8_t qs[kQKK / 4];
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[kKScaleBytes];  // 16 6-bit scales, biased by 32
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[kKScaleBytes];  // 8 6-bit scales and 8 6-bit mins, one per 32 elements
  uint8_t qs[kQKK / 2];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];  // sum of each 16 qs, for the min terms of Q4_K/Q5_K
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K scales[12] array.
inline void k_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace ember::tensor

namespace ember::tensor {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
  return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t float_to_half(float f) {
  uint32_t x = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) {  // NaN: keep it a (quiet) NaN, with as much payload as fits
    return sign | 0x7e00 | static_cast<uint16_t>((x >> 13) & 0x3ff);
  }
  const uint32_t e = x >> 23;
  if (e >= 143) return sign | 0x7c00;  // >= 2^16 (or inf): overflows to inf
  if (e < 113) {                       // result is a half subnormal (or zero)
    const uint32_t m = (x & 0x7fffff) | (e ? 0x800000u : 0);
    const uint32_t shift = 126 - (e ? e : 1);
    if (shift > 24) return sign;
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;  // may carry into the smallest normal
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t r = ((e - 112) << 10) | ((x & 0x7fffff) >> 13);
  const uint32_t rem = x & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;  // a carry rounds up to inf correctly
  return sign | static_cast<uint16_t>(r);
}

inline float bfloat_to_float(uint16_t h) {
  return bits_f32(static_cast<uint32_t>(h) << 16);
}

inline uint16_t float_to_bfloat(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

// Scalar kernels per type family (quant_ref_legacy.cc, quant_ref_k.cc). n is a multiple of the
// type's block size; the dispatcher checks that.
namespace refk {
void dequant_f32(const void* src, float* dst, int64_t n);
void dequant_f16(const void* src, float* dst, int64_t n);
void dequant_bf16(const void* src, float* dst, int64_t n);
void dequant_q4_0(const void* src, float* dst, int64_t n);
void dequant_q4_1(const void* src, float* dst, int64_t n);
void dequant_q5_0(const void* src, float* dst, int64_t n);
void dequant_q5_1(const void* src, float* dst, int64_t n);
void dequant_q8_0(const void* src, float* dst, int64_t n);
void dequant_q8_1(const void* src, float* dst, int64_t n);
void dequant_q2_k(const void* src, float* dst, int64_t n);
void dequant_q3_k(const void* src, float* dst, int64_t n);
void dequant_q4_k(const void* src, float* dst, int64_t n);
void dequant_q5_k(const void* src, float* dst, int64_t n);
void dequant_q6_k(const void* src, float* dst, int64_t n);
void dequant_q8_k(const void* src, float* dst, int64_t n);

void quant_f32(const float* src, void* dst, int64_t n);
void quant_f16(const float* src, void* dst, int64_t n);
void quant_bf16(const float* src, void* dst, int64_t n);
void quant_q4_0(const float* src, void* dst, int64_t n);
void quant_q4_1(const float* src, void* dst, int64_t n);
void quant_q5_0(const float* src, void* dst, int64_t n);
void quant_q5_1(const float* src, void* dst, int64_t n);
void quant_q8_0(const float* src, void* dst, int64_t n);
void quant_q8_1(const float* src, void* dst, int64_t n);
void quant_q2_k(const float* src, void* dst, int64_t n);
void quant_q3_k(const float* src, void* dst, int64_t n);
void quant_q4_k(const float* src, void* dst, int64_t n);
void quant_q5_k(const float* src, void* dst, int64_t n);
void quant_q6_k(const float* src, void* dst, int64_t n);
void quant_q8_k(const float* src, void* dst, int64_t n);

float dot_f32(int64_t n, const void* w, const void* a);
float dot_f16(int64_t n, const void* w, const void* a);
float dot_bf16(int64_t n, const void* w, const void* a);
float dot_q4_0(int64_t n, const void* w, const void* a);  // a: Q8_0
float dot_q4_1(int64_t n, const void* w, const void* a);  // a: Q8_1
float dot_q5_0(int64_t n, const void* w, const void* a);  // a: Q8_0
float dot_q5_1(int64_t n, const void* w, const void* a);  // a: Q8_1
float dot_q8_0(int64_t n, const void* w, const void* a);  // a: Q8_0
float dot_q2_k(int64_t n, const void* w, const void* a);  // a: Q8_K
float dot_q3_k(int64_t n, const void* w, const void* a);  // a: Q8_K
float dot_q4_k(int64_t n, const void* w, const void* a);  // a: Q8_K
float dot_q5_k(int64_t n, const void* w, const void* a);  // a: Q8_K
float dot_q6_k(int64_t n, const void* w, const void* a);  // a: Q8_K
}  // namespace refk

}  // namespace ember::tensor
