// Row-wise half-precision conversions (F16C when available, scalar otherwise).
#include "core/format/fp16.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace ragkv {

void fp16_to_fp32_row(const f16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

void fp32_to_fp16_row(const float* src, f16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
#endif
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

}  // namespace ragkv
