// Half-precision conversions (IEEE fp16 and bfloat16), scalar and row-wise.
#pragma once
#include <cstdint>
#include <cstring>

namespace ragkv {

using f16_t = uint16_t;   // IEEE 754 binary16 bits
using bf16_t = uint16_t;  // bfloat16 bits

inline float fp16_to_fp32(f16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        exp--;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, with overflow to inf and gradual underflow.
inline f16_t fp32_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t absx = x & 0x7fffffff;
  if (absx >= 0x7f800000u) return (f16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
  if (absx >= 0x477ff000u) return (f16_t)(sign | 0x7c00);  // rounds to >= 65520: inf
  if (absx < 0x38800000u) {                                 // below the smallest normal
    if (absx < 0x33000000u) return (f16_t)sign;             // below half the smallest subnormal
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t half = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return (f16_t)(sign | half);
  }
  uint32_t half = ((absx - 0x38000000u) >> 13);
  const uint32_t rem = absx & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
  return (f16_t)(sign | half);
}

inline float bf16_to_fp32(bf16_t h) {
  const uint32_t bits = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline bf16_t fp32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000u) return (bf16_t)((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fff + ((x >> 16) & 1);                                           // round to nearest even
  return (bf16_t)(x >> 16);
}

// Row conversions; vectorised with F16C where the compiler targets it.
void fp16_to_fp32_row(const f16_t* src, float* dst, int64_t n);
void fp32_to_fp16_row(const float* src, f16_t* dst, int64_t n);

}  // namespace ragkv
