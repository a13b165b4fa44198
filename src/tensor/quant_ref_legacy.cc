// Scalar reference kernels for the plain float types and the legacy 32-element block types.
// Quantizers follow ggml's round-to-nearest `quantize_row_*_ref`; dot products take integer sums
// per block and scale them by the block scales, as ggml does, so results track llama.cpp's.
#include <cfloat>
#include <cmath>
#include <cstring>

#include "tensor/quant_blocks.h"

namespace ember::tensor::refk {
namespace {

template <typename B>
const B* blocks(const void* p) {
  return static_cast<const B*>(p);
}
template <typename B>
B* blocks(void* p) {
  return static_cast<B*>(p);
}

// The value with the largest magnitude, keeping its sign (ggml's symmetric quantizers map it to
// the most negative level so the full range is used).
float signed_absmax(const float* x, int n, float* amax_out) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax_out) *amax_out = amax;
  return max;
}

int q8_dot(const int8_t* a, const int8_t* b, int n) {
  int s = 0;
  for (int j = 0; j < n; ++j) s += a[j] * b[j];
  return s;
}

}  // namespace

// ---- float types ----

void dequant_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * 4);
}
void dequant_f16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(h[i]);
}
void dequant_bf16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bfloat_to_float(h[i]);
}
void quant_f32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * 4);
}
void quant_f16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = float_to_half(src[i]);
}
void quant_bf16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = float_to_bfloat(src[i]);
}
float dot_f32(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  double s = 0;  // the reference accumulates exactly enough not to be the weak link
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * y[i];
  return static_cast<float>(s);
}
float dot_f16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double s = 0;
  for (int64_t i = 0; i < n; ++i)
    s += static_cast<double>(half_to_float(x[i])) * half_to_float(y[i]);
  return static_cast<float>(s);
}
float dot_bf16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    s += static_cast<double>(bfloat_to_float(x[i])) * bfloat_to_float(y[i]);
  }
  return static_cast<float>(s);
}

// ---- Q4_0: q in [0,15], x = (q - 8) * d ----

void quant_q4_0(const float* x, void* dst, int64_t n) {
  auto* y = blocks<BlockQ4_0>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float max = signed_absmax(x, kQK, nullptr);
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = float_to_half(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}
void dequant_q4_0(const void* src, float* y, int64_t n) {
  const auto* x = blocks<BlockQ4_0>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = half_to_float(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0xF) - 8) * d;
      y[j + 16] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}
float dot_q4_0(int64_t n, const void* w, const void* a) {
  const auto* x = blocks<BlockQ4_0>(w);
  const auto* y = blocks<BlockQ8_0>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int s = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      s += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
    }
    sum += static_cast<float>(s) * (half_to_float(x[i].d) * half_to_float(y[i].d));
  }
  return sum;
}

// ---- Q4_1: q in [0,15], x = q * d + m ----

void quant_q4_1(const float* x, void* dst, int64_t n) {
  auto* y = blocks<BlockQ4_1>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kQK; ++j) min = std::min(min, x[j]), max = std::max(max, x[j]);
    const float d = (max - min) / 15;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = float_to_half(d);
    y[i].m = float_to_half(min);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
      const int q1 =
          std::min(15, static_cast<int>(static_cast<int8_t>((x[j + 16] - min) * id + 0.5f)));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}
void dequant_q4_1(const void* src, float* y, int64_t n) {
  const auto* x = blocks<BlockQ4_1>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = half_to_float(x[i].d), m = half_to_float(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0xF) * d + m;
      y[j + 16] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}
float dot_q4_1(int64_t n, const void* w, const void* a) {
  const auto* x = blocks<BlockQ4_1>(w);
  const auto* y = blocks<BlockQ8_1>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int s = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      s += (x[i].qs[j] & 0xF) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + 16];
    }
    sum += half_to_float(x[i].d) * half_to_float(y[i].d) * static_cast<float>(s) +
           half_to_float(x[i].m) * half_to_float(y[i].s);
  }
  return sum;
}

// ---- Q5_0: q in [0,31], x = (q - 16) * d ----

void quant_q5_0(const float* x, void* dst, int64_t n) {
  auto* y = blocks<BlockQ5_0>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float max = signed_absmax(x, kQK, nullptr);
    const float d = max / -16;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = float_to_half(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
      const int q1 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 16.5f)));
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}
void dequant_q5_0(const void* src, float* y, int64_t n) {
  const auto* x = blocks<BlockQ5_0>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = half_to_float(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = (x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int q1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      y[j] = static_cast<float>(q0 - 16) * d;
      y[j + 16] = static_cast<float>(q1 - 16) * d;
    }
  }
}
float dot_q5_0(int64_t n, const void* w, const void* a) {
  const auto* x = blocks<BlockQ5_0>(w);
  const auto* y = blocks<BlockQ8_0>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    int s = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = (x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int q1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      s += (q0 - 16) * y[i].qs[j] + (q1 - 16) * y[i].qs[j + 16];
    }
    sum += static_cast<float>(s) * (half_to_float(x[i].d) * half_to_float(y[i].d));
  }
  return sum;
}

// ---- Q5_1: q in [0,31], x = q * d + m ----

void quant_q5_1(const float* x, void* dst, int64_t n) {
  auto* y = blocks<BlockQ5_1>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kQK; ++j) min = std::min(min, x[j]), max = std::max(max, x[j]);
    const float d = (max - min) / 31;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = float_to_half(d);
    y[i].m = float_to_half(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(31, static_cast<int>((x[j] - min) * id + 0.5f));
      const int q1 = std::min(31, static_cast<int>((x[j + 16] - min) * id + 0.5f));
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
    }
    std::memcpy(y[i].qh, &qh, 4);
  }
}
void dequant_q5_1(const void* src, float* y, int64_t n) {
  const auto* x = blocks<BlockQ5_1>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = half_to_float(x[i].d), m = half_to_float(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = (x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int q1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      y[j] = static_cast<float>(q0) * d + m;
      y[j + 16] = static_cast<float>(q1) * d + m;
    }
  }
}
float dot_q5_1(int64_t n, const void* w, const void* a) {
  const auto* x = blocks<BlockQ5_1>(w);
  const auto* y = blocks<BlockQ8_1>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    int s = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = (x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int q1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      s += q0 * y[i].qs[j] + q1 * y[i].qs[j + 16];
    }
    sum += half_to_float(x[i].d) * half_to_float(y[i].d) * static_cast<float>(s) +
           half_to_float(x[i].m) * half_to_float(y[i].s);
  }
  return sum;
}

// ---- Q8_0 / Q8_1: q in [-127,127], x = q * d ----

void quant_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = blocks<BlockQ8_0>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax;
    signed_absmax(x, kQK, &amax);
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = float_to_half(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}
void dequant_q8_0(const void* src, float* y, int64_t n) {
  const auto* x = blocks<BlockQ8_0>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = half_to_float(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}
float dot_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = blocks<BlockQ8_0>(w);
  const auto* y = blocks<BlockQ8_0>(a);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const int s = q8_dot(x[i].qs, y[i].qs, kQK);
    sum += static_cast<float>(s) * (half_to_float(x[i].d) * half_to_float(y[i].d));
  }
  return sum;
}

void quant_q8_1(const float* x, void* dst, int64_t n) {
  auto* y = blocks<BlockQ8_1>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax;
    signed_absmax(x, kQK, &amax);
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = float_to_half(d);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].s = float_to_half(static_cast<float>(sum) * d);
  }
}
void dequant_q8_1(const void* src, float* y, int64_t n) {
  const auto* x = blocks<BlockQ8_1>(src);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = half_to_float(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

}  // namespace ember::tensor::refk
