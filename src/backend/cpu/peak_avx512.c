/* Peak-rate loops for AVX-512 (peak.h): 16 independent vpdpbusd / vfmadd chains,
 * enough to cover the latency on two ports. */
#include <immintrin.h>

#include "backend/cpu/peak.h"

long long di_cpu_peak_int8_avx512(long long iters) {
  __m512i acc[16], a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-5);
  for (int i = 0; i < 16; i++) acc[i] = _mm512_set1_epi32(i);
  for (long long n = 0; n < iters; n++)
    _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  __m512i s = acc[0];
  for (int i = 1; i < 16; i++) s = _mm512_add_epi32(s, acc[i]);
  return _mm512_reduce_add_epi32(s);
}

long long di_cpu_peak_f32_avx512(long long iters) {
  __m512 acc[16], a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  for (int i = 0; i < 16; i++) acc[i] = _mm512_set1_ps((float)i);
  for (long long n = 0; n < iters; n++)
    _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < 16; i++) s = _mm512_add_ps(s, acc[i]);
  return (long long)_mm512_reduce_add_ps(s);
}
