// exp(x) in f32 without a libm call, so loops over it vectorise: the CPU backend's softmax,
// GELU and tiled attention share it.
#pragma once
#include <bit>
#include <cstdint>

namespace ragkv {

// exp(x) in f32 for x in [-87, 88], without a libm call so loops over it vectorise: Cody–Waite
// reduction by ln 2 and the Cephes expf polynomial (relative error < 1e-7). No clamping: callers
// keep x in range (a clamp by select would stop GCC vectorising under -ftrapping-math). The
// integer n is read from the bits of the rounded sum, never converted from a float: a NaN (a
// corrupt model's weights) then gives NaN rather than undefined behaviour (found by fuzzing).
inline float exp_f32(float x) {
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer in the low bits
  const float t = x * 1.44269504088896341f + kRound;
  const float n = t - kRound;  // round(x / ln 2)
  const uint32_t n_bits = std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kRound);  // n, two's complement
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  return p * std::bit_cast<float>((n_bits + 127u) << 23);
}

}  // namespace ragkv
