/* AVX-512 kernels for F32 / F16 / BF16 weights with f32 activations (the
 * int8 ones are in matmul_pack_avx512.c; other types keep the AVX2 kernels).
 *
 * One zmm holds the 8-lane chains of two outputs, columns j and j+1, one per
 * 256-bit half: the weights of both rows are loaded (and for F16 converted by
 * one vcvtph2ps) into the halves, the activation block is broadcast to both,
 * and every FMA does on each half what the AVX2 kernel does on its ymm. Each
 * chain then ends in fl_finish (matmul_fl_x86.h) like the AVX2 one, so Y is
 * bit-identical to AVX2 (checked by tests/unit/test_matmul_avx512.c, natively
 * and built against SIMDe by test_matmul_avx512emu.c). What AVX-512 buys is
 * twice the FMA width per instruction for prefill GEMMs, and 32 registers for
 * a 4 x 8 tile.
 *
 * Built with -mavx512f/bw/vl/vnni; only AVX-512F is used here. */
#ifdef DI_AVX512_EMULATE
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#define FL512_ENTRY di_cpu_mm_avx512_emu
#else
#include <immintrin.h>
#define FL512_ENTRY di_cpu_mm_avx512
#endif

#include "backend/cpu/matmul_fl_x86.h"
#include "backend/cpu/x86_512.h"

di_cpu_mm_fn FL512_ENTRY(di_dtype t);

#define NP_MAX 4 /* column pairs per tile */
/* rows per tile: 6 x 4 pairs = 24 accumulators, so each weight conversion
 * (2 uops per 16 values) feeds 6 FMAs instead of 4 */
#define FL_MT 6

AI __m256 half_of(__m512 v, int h) {
  return h ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)) : _mm512_castps512_ps256(v);
}

/* 8 weights of row p0 to the low half, 8 of row p1 to the high half. */
AI __m512 fl_load2(di_dtype t, const uint8_t *p0, const uint8_t *p1) {
#ifndef DI_AVX512_EMULATE /* SIMDe 0.7.4 has neither conversion; the emulation joins two 256-bit loads */
  if (t != DI_F32) {
    __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p0)),
                                        _mm_loadu_si128((const __m128i *)p1), 1);
    if (t == DI_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); /* bf16: the high half of f32 */
  }
#endif
  return join_ps(fl_load(t, p0), fl_load(t, p1));
}

/* MT rows x NT columns; pair p holds columns 2p and 2p+1 (an odd NT's last
 * pair loads its column twice and keeps the low half). */
AI void fl_tile(di_dtype t, int MT, int NT, const uint8_t *w, size_t wrow, const uint8_t *x, size_t xrow,
                int64_t nb, int64_t K, float *Y, int64_t ldy) {
  const int64_t es = t == DI_F32 ? 4 : 2;
  const int NP = (NT + 1) / 2;
  __m512 acc[FL_MT][NP_MAX];
  UNROLL for (int i = 0; i < MT; i++) UNROLL for (int p = 0; p < NP; p++) acc[i][p] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    __m512 wv[NP_MAX];
    UNROLL for (int p = 0; p < NP; p++) {
      const int j1 = 2 * p + 1 < NT ? 2 * p + 1 : 2 * p;
      wv[p] = fl_load2(t, w + 2 * p * wrow + b * 8 * es, w + j1 * wrow + b * 8 * es);
    }
    if (MT == 1) UNROLL for (int j = 0; j < NT; j++) prefetch_next(w + j * wrow + b * 8 * es, NT * wrow, 8 * es);
    UNROLL for (int i = 0; i < MT; i++) {
      __m256 x8 = _mm256_loadu_ps((const float *)(x + i * xrow) + b * 8);
      __m512 xv = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(x8)));
      UNROLL for (int p = 0; p < NP; p++) acc[i][p] = _mm512_fmadd_ps(wv[p], xv, acc[i][p]);
    }
  }
  UNROLL for (int i = 0; i < MT; i++) UNROLL for (int j = 0; j < NT; j++)
    Y[i * ldy + j] = fl_finish(t, half_of(acc[i][j / 2], j & 1), w + j * wrow, (const float *)(x + i * xrow), nb, K);
}
DEFINE_DRIVER_MT(fl, 4, 8, FL_MT)

DEFINE_WRAP(mm_f32, fl, DI_F32)
DEFINE_WRAP(mm_f16, fl, DI_F16)
DEFINE_WRAP(mm_bf16, fl, DI_BF16)

di_cpu_mm_fn FL512_ENTRY(di_dtype t) {
  switch (t) {
  case DI_F32: return mm_f32;
  case DI_F16: return mm_f16;
  case DI_BF16: return mm_bf16;
  default: return NULL;
  }
}
