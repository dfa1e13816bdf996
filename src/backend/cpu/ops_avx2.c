/* AVX2 + FMA versions of elementwise ops (compiled with -mavx2 -mfma -mf16c).
 * Same operations as the scalar ones in ops.c, lane by lane: same bits. */
#include <immintrin.h>

#include "backend/cpu/ops.h"
#include "backend/cpu/softmax_exp.h"
#include "util/fp16.h"

void di_cpu_glu_avx2(float *g, const float *u, int n, bool gelu) {
  const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
  const __m256 k = _mm256_set1_ps(DI_GELU_K), a = _mm256_set1_ps(DI_GELU_A);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(g + i), z = x;
    if (gelu) z = _mm256_mul_ps(k, _mm256_fmadd_ps(_mm256_mul_ps(a, _mm256_mul_ps(x, x)), x, x));
    __m256 e = di_softmax_exp_avx2(_mm256_xor_ps(z, neg));
    _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
  }
  for (; i < n; i++) g[i] = gelu ? di_cpu_gelu_mul1(g[i], u[i]) : di_cpu_silu_mul1(g[i], u[i]);
}

/* F16C's round-to-nearest-even conversion is di_f32_to_f16 for every non-NaN
 * input (subnormals and overflow included); a block holding a NaN goes through
 * the scalar conversion, which writes sign | 0x7E00 where F16C keeps payload
 * bits. So the cache gets the same bits either way. */
void di_cpu_kv_store_f16_avx2(uint16_t *dst, const float *src, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(src + i);
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    if (!_mm256_testz_ps(nan, nan)) {
      for (int k = 0; k < 8; k++) dst[i + k] = di_f32_to_f16(src[i + k]);
      continue;
    }
    _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; i++) dst[i] = di_f32_to_f16(src[i]);
}

/* F16C widening is exact, as di_f16_to_f32 (NaNs keep their payload either way). */
void di_cpu_kv_load_f16_avx2(float *dst, const uint16_t *src, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
  for (; i < n; i++) dst[i] = di_f16_to_f32(src[i]);
}
