/* AVX2 + FMA versions of elementwise ops (compiled with -mavx2 -mfma -mf16c).
 * Same operations as the scalar ones in ops.c, lane by lane: same bits. */
#include <immintrin.h>

#include "backend/cpu/ops.h"
#include "backend/cpu/softmax_exp.h"

void di_cpu_silu_mul_avx2(float *g, const float *u, int n) {
  const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(g + i);
    __m256 e = di_softmax_exp_avx2(_mm256_xor_ps(x, neg));
    _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
  }
  for (; i < n; i++) g[i] = di_cpu_silu_mul1(g[i], u[i]);
}
