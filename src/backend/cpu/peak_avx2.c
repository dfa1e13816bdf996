/* Peak-rate loops for AVX2 + FMA (peak.h). Without VNNI an int8 dot product
 * of 32 byte pairs is vpmaddubsw + vpmaddwd + vpaddd, the sequence the AVX2
 * kernels use, so that is the int8 limit measured here. 16 ymm registers: 8
 * chains, each stepped twice per round (16 operations a round, as peak.h says). */
#include <immintrin.h>

#include "backend/cpu/peak.h"

long long di_cpu_peak_int8_avx2(long long iters) {
  __m256i acc[8], b = _mm256_set1_epi8(-5), one = _mm256_set1_epi16(1);
  for (int i = 0; i < 8; i++) acc[i] = _mm256_set1_epi32(i);
  /* the chain's own bytes are the unsigned operand, so nothing is loop-invariant */
  for (long long n = 0; n < iters; n++)
    _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++)
      acc[i % 8] = _mm256_add_epi32(acc[i % 8], _mm256_madd_epi16(_mm256_maddubs_epi16(acc[i % 8], b), one));
  __m256i s = acc[0];
  for (int i = 1; i < 8; i++) s = _mm256_add_epi32(s, acc[i]);
  return _mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7);
}

long long di_cpu_peak_f32_avx2(long long iters) {
  __m256 acc[8], a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  for (int i = 0; i < 8; i++) acc[i] = _mm256_set1_ps((float)i);
  for (long long n = 0; n < iters; n++)
    _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) acc[i % 8] = _mm256_fmadd_ps(acc[i % 8], a, b);
  __m256 s = acc[0];
  for (int i = 1; i < 8; i++) s = _mm256_add_ps(s, acc[i]);
  float f[8];
  _mm256_storeu_ps(f, s);
  return (long long)f[0];
}
