// Scalar reference kernels for the K-quant super-block types (256 elements per block).
// The quantizers are simple searches (a few candidate scales refined by least squares per
// sub-block, then 4/6/8-bit scales relative to a block-wide fp16 factor); they produce valid
// ggml blocks of good but not llama.cpp-identical quality. Dequantization and dot products
// follow ggml's definitions exactly.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "tensor/quant_blocks.h"

namespace ember::tensor::refk {
namespace {

int nearest(float v) {
  return static_cast<int>(std::lrintf(v));
}

// Fits x[i] ~= scale * L[i] - min_out with L in [0, nmax] and min_out >= 0. Returns scale.
float fit_scale_min(const float* x, int n, int nmax, uint8_t* L, float* min_out) {
  float lo = *std::min_element(x, x + n), hi = *std::max_element(x, x + n);
  lo = std::min(lo, 0.0f);
  if (hi <= lo) {
    std::fill(L, L + n, 0);
    *min_out = -lo;
    return 0;
  }
  float best_err = FLT_MAX, best_scale = 0, best_min = lo;
  uint8_t aux[32];
  for (int step = -4; step <= 8; ++step) {
    const float iscale = (static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / (hi - lo);
    float sl = 0, sl2 = 0, sx = 0, slx = 0;
    for (int i = 0; i < n; ++i) {
      aux[i] = static_cast<uint8_t>(std::clamp(nearest(iscale * (x[i] - lo)), 0, nmax));
      sl += aux[i], sl2 += static_cast<float>(aux[i] * aux[i]), sx += x[i], slx += aux[i] * x[i];
    }
    const float det = static_cast<float>(n) * sl2 - sl * sl;
    float scale, mn;
    if (det > 0) {
      scale = (static_cast<float>(n) * slx - sx * sl) / det;
      mn = (sl2 * sx - sl * slx) / det;
    } else {
      scale = 1 / iscale, mn = lo;
    }
    if (mn > 0) mn = 0, scale = sl2 > 0 ? slx / sl2 : 0;
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float e = scale * aux[i] + mn - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = err, best_scale = scale, best_min = mn;
      std::memcpy(L, aux, static_cast<size_t>(n));
    }
  }
  *min_out = -best_min;
  return best_scale;
}

// Fits x[i] ~= scale * L[i] with L in [-nmax, nmax - 1]. Returns scale (may be negative).
float fit_symmetric(const float* x, int n, int nmax) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  }
  if (amax == 0) return 0;
  float best_err = FLT_MAX, best_scale = 0;
  for (int step = -3; step <= 3; ++step) {
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max;
    float slx = 0, sl2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest(iscale * x[i]), -nmax, nmax - 1);
      slx += static_cast<float>(l) * x[i], sl2 += static_cast<float>(l * l);
    }
    const float scale = sl2 > 0 ? slx / sl2 : 0;
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float l =
          scale ? static_cast<float>(std::clamp(nearest(x[i] / scale), -nmax, nmax - 1)) : 0.0f;
      err += (scale * l - x[i]) * (scale * l - x[i]);
    }
    if (err < best_err) best_err = err, best_scale = scale;
  }
  return best_scale;
}

// Quantizes sub-block scales/mins (all >= 0) to `levels` steps of a common factor.
float quantize_factors(const float* v, int n, int levels, uint8_t* out) {
  const float max = *std::max_element(v, v + n);
  const float inv = max > 0 ? static_cast<float>(levels) / max : 0.0f;
  for (int j = 0; j < n; ++j) out[j] = static_cast<uint8_t>(std::min(levels, nearest(inv * v[j])));
  return max / static_cast<float>(levels);
}

void pack_k_scales(const uint8_t* ls, const uint8_t* lm, uint8_t* scales) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = ls[j];
      scales[j + 4] = lm[j];
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

// Shared by Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scales/mins; L gets levels 0..nmax.
void quantize_scale_min_block(const float* x, int nmax, uint8_t* L, uint16_t* d, uint16_t* dmin,
                              uint8_t* scales) {
  float sc[8], mn[8];
  for (int j = 0; j < 8; ++j) sc[j] = fit_scale_min(x + 32 * j, 32, nmax, L + 32 * j, &mn[j]);
  uint8_t ls[8], lm[8];
  *d = float_to_half(quantize_factors(sc, 8, 63, ls));
  *dmin = float_to_half(quantize_factors(mn, 8, 63, lm));
  std::memset(scales, 0, kKScaleBytes);
  pack_k_scales(ls, lm, scales);
  const float df = half_to_float(*d), dmf = half_to_float(*dmin);
  for (int j = 0; j < 8; ++j) {  // re-quantize against the scales as stored
    const float dl = df * ls[j], ml = dmf * lm[j];
    for (int i = 0; i < 32; ++i) {
      const int l = dl ? nearest((x[32 * j + i] + ml) / dl) : 0;
      L[32 * j + i] = static_cast<uint8_t>(std::clamp(l, 0, nmax));
    }
  }
}

int dot32(const int8_t* a, const int8_t* b, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

// ---- Q8_K: the activation type for K-quant dot products ----

void quant_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    float amax = 0, max = 0;
    for (int j = 0; j < kQKK; ++j) {
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
    }
    if (amax == 0) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQKK; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest(iscale * x[j])));
    }
    for (int j = 0; j < kQKK / 16; ++j) {
      int s = 0;
      for (int k = 0; k < 16; ++k) s += y[i].qs[16 * j + k];
      y[i].bsums[j] = static_cast<int16_t>(s);
    }
    y[i].d = 1 / iscale;
  }
}
void dequant_q8_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i, y += kQKK) {
    for (int j = 0; j < kQKK; ++j) y[j] = x[i].d * static_cast<float>(x[i].qs[j]);
  }
}

// ---- Q4_K: x = d * sc * q - dmin * m, q in [0,15], 8 sub-blocks of 32 ----

void quant_q4_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_K*>(dst);
  uint8_t L[kQKK];
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    quantize_scale_min_block(x, 15, L, &y[i].d, &y[i].dmin, y[i].scales);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQKK; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}
void dequant_q4_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = half_to_float(x[i].d), dmin = half_to_float(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int j = 0; j < 4; ++j, q += 32) {
      uint8_t sc, m;
      k_scale_min(2 * j, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      k_scale_min(2 * j + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}
float dot_q4_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sumi = 0, summ = 0;
    const uint8_t* q = x[i].qs;
    const int8_t* q8 = y[i].qs;
    for (int j = 0; j < 4; ++j, q += 32, q8 += 64) {
      uint8_t sc1, m1, sc2, m2;
      k_scale_min(2 * j, x[i].scales, &sc1, &m1);
      k_scale_min(2 * j + 1, x[i].scales, &sc2, &m2);
      int s1 = 0, s2 = 0;
      for (int l = 0; l < 32; ++l) s1 += (q[l] & 0xF) * q8[l], s2 += (q[l] >> 4) * q8[l + 32];
      sumi += sc1 * s1 + sc2 * s2;
      summ += m1 * (y[i].bsums[4 * j] + y[i].bsums[4 * j + 1]) +
              m2 * (y[i].bsums[4 * j + 2] + y[i].bsums[4 * j + 3]);
    }
    sum += y[i].d * (half_to_float(x[i].d) * static_cast<float>(sumi) -
                     half_to_float(x[i].dmin) * static_cast<float>(summ));
  }
  return sum;
}

// ---- Q5_K: as Q4_K with a 5th bit per element in qh, q in [0,31] ----

void quant_q5_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_K*>(dst);
  uint8_t L[kQKK];
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    quantize_scale_min_block(x, 31, L, &y[i].d, &y[i].dmin, y[i].scales);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    uint8_t* ql = y[i].qs;
    uint8_t m1 = 1, m2 = 2;
    for (int n0 = 0; n0 < kQKK; n0 += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n0 + j], l2 = L[n0 + j + 32];
        if (l1 > 15) l1 -= 16, y[i].qh[j] |= m1;
        if (l2 > 15) l2 -= 16, y[i].qh[j] |= m2;
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
    }
  }
}
void dequant_q5_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = half_to_float(x[i].d), dmin = half_to_float(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 4; ++j, ql += 32, u1 <<= 2, u2 <<= 2) {
      uint8_t sc, m;
      k_scale_min(2 * j, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      k_scale_min(2 * j + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) {
        *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      }
    }
  }
}
float dot_q5_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sumi = 0, summ = 0;
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const int8_t* q8 = y[i].qs;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 4; ++j, ql += 32, q8 += 64, u1 <<= 2, u2 <<= 2) {
      uint8_t sc1, m1, sc2, m2;
      k_scale_min(2 * j, x[i].scales, &sc1, &m1);
      k_scale_min(2 * j + 1, x[i].scales, &sc2, &m2);
      int s1 = 0, s2 = 0;
      for (int l = 0; l < 32; ++l) {
        s1 += ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) * q8[l];
        s2 += ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) * q8[l + 32];
      }
      sumi += sc1 * s1 + sc2 * s2;
      summ += m1 * (y[i].bsums[4 * j] + y[i].bsums[4 * j + 1]) +
              m2 * (y[i].bsums[4 * j + 2] + y[i].bsums[4 * j + 3]);
    }
    sum += y[i].d * (half_to_float(x[i].d) * static_cast<float>(sumi) -
                     half_to_float(x[i].dmin) * static_cast<float>(summ));
  }
  return sum;
}

// ---- Q6_K: x = d * sc * (q - 32), q in [0,63], 16 sub-blocks of 16 with int8 scales ----

namespace {
// Unpacks the 256 6-bit levels of a Q6_K block, centred (q - 32).
void q6k_levels(const BlockQ6_K& b, int8_t* out) {
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  for (int n0 = 0; n0 < kQKK; n0 += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      out[n0 + l] = static_cast<int8_t>(((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
      out[n0 + l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      out[n0 + l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      out[n0 + l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
}
}  // namespace

void quant_q6_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    float sc[16], max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      sc[j] = fit_symmetric(x + 16 * j, 16, 32);
      if (std::fabs(sc[j]) > amax) amax = std::fabs(sc[j]), max_scale = sc[j];
    }
    std::memset(&y[i], 0, sizeof(BlockQ6_K));
    if (amax == 0) continue;
    const float iscale = -128.0f / max_scale;
    y[i].d = float_to_half(1 / iscale);
    const float d = half_to_float(y[i].d);
    uint8_t L[kQKK];
    for (int j = 0; j < 16; ++j) {
      y[i].scales[j] = static_cast<int8_t>(std::min(127, nearest(iscale * sc[j])));
      const float dl = d * y[i].scales[j];
      for (int k = 0; k < 16; ++k) {
        const int l = dl ? nearest(x[16 * j + k] / dl) : 0;
        L[16 * j + k] = static_cast<uint8_t>(std::clamp(l, -32, 31) + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQKK; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
        ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) |
                                     ((q4 >> 4) << 6));
      }
    }
  }
}
void dequant_q6_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(src);
  int8_t q[kQKK];
  for (int64_t i = 0; i < n / kQKK; ++i, y += kQKK) {
    const float d = half_to_float(x[i].d);
    q6k_levels(x[i], q);
    for (int j = 0; j < kQKK; ++j) y[j] = d * x[i].scales[j / 16] * q[j];
  }
}
float dot_q6_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  int8_t q[kQKK];
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    q6k_levels(x[i], q);
    int sumi = 0;
    for (int j = 0; j < 16; ++j) sumi += x[i].scales[j] * dot32(q + 16 * j, y[i].qs + 16 * j, 16);
    sum += half_to_float(x[i].d) * y[i].d * static_cast<float>(sumi);
  }
  return sum;
}

// ---- Q2_K: x = d * (sc & 15) * q - dmin * (sc >> 4), q in [0,3], 16 sub-blocks of 16 ----

void quant_q2_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ2_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    uint8_t L[kQKK];
    float sc[16], mn[16];
    for (int j = 0; j < 16; ++j) sc[j] = fit_scale_min(x + 16 * j, 16, 3, L + 16 * j, &mn[j]);
    uint8_t ls[16], lm[16];
    y[i].d = float_to_half(quantize_factors(sc, 16, 15, ls));
    y[i].dmin = float_to_half(quantize_factors(mn, 16, 15, lm));
    const float d = half_to_float(y[i].d), dmin = half_to_float(y[i].dmin);
    for (int j = 0; j < 16; ++j) {
      y[i].scales[j] = static_cast<uint8_t>(ls[j] | (lm[j] << 4));
      const float dl = d * ls[j], ml = dmin * lm[j];
      for (int k = 0; k < 16; ++k) {
        const int l = dl ? nearest((x[16 * j + k] + ml) / dl) : 0;
        L[16 * j + k] = static_cast<uint8_t>(std::clamp(l, 0, 3));
      }
    }
    for (int j = 0; j < kQKK; j += 128) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                                  (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
      }
    }
  }
}
void dequant_q2_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = half_to_float(x[i].d), dmin = half_to_float(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int n0 = 0; n0 < kQKK; n0 += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = x[i].scales[is++];
          const float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
          for (int l = 0; l < 16; ++l) {
            *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
          }
        }
      }
    }
  }
}

// ---- Q3_K: x = d * (sc - 32) * (q - 4), q in [0,7] (2 low bits + hmask), 16 sub-blocks ----

void quant_q3_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ3_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    std::memset(&y[i], 0, sizeof(BlockQ3_K));
    float sc[16], max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      sc[j] = fit_symmetric(x + 16 * j, 16, 4);
      if (std::fabs(sc[j]) > amax) amax = std::fabs(sc[j]), max_scale = sc[j];
    }
    if (amax == 0) continue;
    const float iscale = -32.0f / max_scale;
    y[i].d = float_to_half(1 / iscale);
    const float d = half_to_float(y[i].d);
    uint8_t L[kQKK];
    for (int j = 0; j < 16; ++j) {
      const int ls = std::clamp(nearest(iscale * sc[j]), -32, 31);
      const int l = ls + 32;
      if (j < 8) {
        y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
      } else {
        y[i].scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
      }
      y[i].scales[j % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
      const float dl = d * static_cast<float>(ls);
      for (int k = 0; k < 16; ++k) {
        const int q = dl ? nearest(x[16 * j + k] / dl) : 0;
        L[16 * j + k] = static_cast<uint8_t>(std::clamp(q, -4, 3) + 4);
      }
    }
    for (int j = 0; j < kQKK; ++j) {
      if (L[j] > 3) y[i].hmask[j % 32] |= static_cast<uint8_t>(1 << (j / 32)), L[j] -= 4;
    }
    for (int j = 0; j < kQKK; j += 128) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                                  (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
      }
    }
  }
}
void dequant_q3_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint32_t aux[4];
    std::memcpy(aux, x[i].scales, 12);
    const uint32_t k1 = 0x03030303, k2 = 0x0f0f0f0f, tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & k2) | (((tmp >> 4) & k1) << 4);
    aux[3] = ((aux[1] >> 4) & k2) | (((tmp >> 6) & k1) << 4);
    aux[0] = (aux[0] & k2) | (((tmp >> 0) & k1) << 4);
    aux[1] = (aux[1] & k2) | (((tmp >> 2) & k1) << 4);
    int8_t scales[16];
    std::memcpy(scales, aux, 16);
    const float d = half_to_float(x[i].d);
    const uint8_t* q = x[i].qs;
    int is = 0;
    uint8_t m = 1;
    for (int n0 = 0; n0 < kQKK; n0 += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
        for (int half = 0; half < 2; ++half) {
          const float dl = d * static_cast<float>(scales[is++] - 32);
          for (int l = 0; l < 16; ++l) {
            const int k = l + 16 * half;
            const int v = ((q[k] >> shift) & 3) - ((x[i].hmask[k] & m) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

// Q2_K and Q3_K have no integer kernel yet: dot through dequantized floats (reference only).
namespace {
float dot_via_float(void (*deq)(const void*, float*, int64_t), size_t bb, int64_t n, const void* w,
                    const void* a) {
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const auto* wb = static_cast<const uint8_t*>(w);
  float xf[kQKK];
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    deq(wb + i * bb, xf, kQKK);
    float s = 0;
    for (int j = 0; j < kQKK; ++j) s += xf[j] * static_cast<float>(y[i].qs[j]);
    sum += s * y[i].d;
  }
  return sum;
}
}  // namespace
float dot_q2_k(int64_t n, const void* w, const void* a) {
  return dot_via_float(dequant_q2_k, sizeof(BlockQ2_K), n, w, a);
}
float dot_q3_k(int64_t n, const void* w, const void* a) {
  return dot_via_float(dequant_q3_k, sizeof(BlockQ3_K), n, w, a);
}

}  // namespace ember::tensor::refk
