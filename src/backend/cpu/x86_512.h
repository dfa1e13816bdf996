/* Small pieces shared by the AVX-512 kernel files (matmul_avx512.c,
 * matmul_pack_vnni.h); each includes <immintrin.h> or, for the emulation
 * tests, SIMDe's AVX-512 first. */
#ifndef DI_CPU_X86_512_H
#define DI_CPU_X86_512_H

#include "backend/cpu/matmul_tiles.h" /* AI */

/* lo in the low 256 bits, hi in the high (AVX-512F only: no insertf32x8). */
AI __m512 join_ps(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}

#endif
