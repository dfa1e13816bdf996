/* AVX2 kernels for packed Q4_0 / Q4_1 / Q8_0 weights (layout: matmul_pack.c).
 *
 * A tile is MT activation rows x one group of 8 weight rows; lane c of every
 * vector belongs to output column 8g + c. Per 32-element block and row:
 *   Q4_0/Q4_1: 4 words of nibbles give 8 registers of 4 quants x 8 columns
 *     (low nibbles: elements 4w..4w+3, high: 16+4w..); each is multiplied by the
 *     4 activation bytes broadcast to all lanes (maddubs: unsigned q x signed a,
 *     pairs <= 2*15*127), the 8 int16 results summed (<= 30480, no overflow),
 *     then one madd to int32. Q4_0's offset: isum -= 8 * sum(a), exact.
 *   Q8_0: 8 words; |q| x sign(a, q) per word, madd to int32 each time (two
 *     int16 pairs could overflow).
 * Then in float, lane by lane and in K order, exactly as the scalar reference
 * (di_cpu_q32_block_step; this file is built with -ffp-contract=off):
 *   acc += cvt(isum) * (d_w * d_a); acc += m_w * s_a (Q4_1); Y = acc.
 * (One chain, not a second one for the mins: 4 more registers for 4-row tiles.)
 * So Y[m][n] is the same bits for any M, n0..n1, tile shape, thread count or
 * ISA level. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "backend/cpu/matmul_kernels.h"

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")
#define NO_UNROLL _Pragma("GCC unroll 1")
#define MT_MAX 4
/* GEMM: weights are walked in panels of about this many bytes, which stay in L2
 * while every MT_MAX-row tile of activations passes over them. */
#define PANEL_BYTES (192 * 1024)
/* Tail rows are packed on the fly this many blocks at a time. */
#define TAIL_BLOCKS 16

AI __m256i bcast4(const int8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

/* One 32-byte word of quants (4 consecutive elements x 8 columns) against MT
 * activation rows. Tiles of several rows run the word loop rolled: unrolled,
 * the compiler hoists all words' unpacked registers and spills (Q4 GEMM M=16
 * 142 -> 162 GOP/s rolled); GEMV keeps it unrolled. */
AI void q8_word(int MT, const uint8_t *q, int w, const di_act_q8 *const *a, __m256i ones, __m256i *isum) {
  __m256i wq = _mm256_loadu_si256((const __m256i *)(q + 32 * w)), aq = _mm256_abs_epi8(wq);
  UNROLL for (int i = 0; i < MT; i++) {
    __m256i p = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(bcast4(a[i]->qs + 4 * w), wq));
    isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(p, ones));
  }
}

AI void q4_word(int MT, const uint8_t *q, int w, const di_act_q8 *const *a, __m256i m4, __m256i *p) {
  __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * w));
  __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  UNROLL for (int i = 0; i < MT; i++) {
    __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(a[i]->qs + 4 * w)),
                                 _mm256_maddubs_epi16(hi, bcast4(a[i]->qs + 16 + 4 * w)));
    p[i] = _mm256_add_epi16(p[i], s);
  }
}

AI size_t pk_bb(di_dtype t) {
  return t == DI_Q4_0 ? sizeof(di_block_q4_0) : t == DI_Q4_1 ? sizeof(di_block_q4_1) : sizeof(di_block_q8_0);
}

/* Outputs [8g, 8g+8) x MT rows over all nb blocks, stored where they fall inside
 * [n0, n1). TAIL: g is the zero-padded group of the N % 8 last rows, packed on
 * the fly TAIL_BLOCKS blocks at a time (same arithmetic, lanes past N dropped). */
AI void pk_group(di_dtype t, int MT, bool TAIL, const uint8_t *W, size_t wrow, int64_t N, int64_t g,
                 const uint8_t *x, size_t xrow, int64_t nb, float *Y, int64_t ldy, int64_t n0, int64_t n1) {
  const size_t gbb = DI_PK_G * pk_bb(t), head = DI_PK_G * di_pk_head_bytes(t);
  const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  _Alignas(32) uint8_t tmp[TAIL_BLOCKS * DI_PK_G * sizeof(di_block_q8_0)];
  const uint8_t *gw = W + (size_t)g * DI_PK_G * wrow;
  __m256 acc[MT_MAX];
  UNROLL for (int i = 0; i < MT; i++) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *gp = gw + (size_t)b * gbb;
    if (TAIL) {
      if (b % TAIL_BLOCKS == 0) di_cpu_pack_tail(t, W, wrow, N, b, nb - b < TAIL_BLOCKS ? nb : b + TAIL_BLOCKS, tmp);
      gp = tmp + (size_t)(b % TAIL_BLOCKS) * gbb;
    }
    const uint8_t *q = gp + head;
    const di_act_q8 *a[MT_MAX];
    UNROLL for (int i = 0; i < MT; i++) a[i] = (const di_act_q8 *)(x + i * xrow) + b;
    __m256i isum[MT_MAX];
    if (t == DI_Q8_0) {
      UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm256_setzero_si256();
      if (MT == 1) {
        UNROLL for (int w = 0; w < 8; w++) q8_word(MT, q, w, a, ones, isum);
      } else {
        NO_UNROLL for (int w = 0; w < 8; w++) q8_word(MT, q, w, a, ones, isum);
      }
    } else {
      __m256i p[MT_MAX];
      UNROLL for (int i = 0; i < MT; i++) p[i] = _mm256_setzero_si256();
      if (MT == 1) {
        UNROLL for (int w = 0; w < 4; w++) q4_word(MT, q, w, a, m4, p);
      } else {
        NO_UNROLL for (int w = 0; w < 4; w++) q4_word(MT, q, w, a, m4, p);
      }
      UNROLL for (int i = 0; i < MT; i++) {
        isum[i] = _mm256_madd_epi16(p[i], ones);
        if (t == DI_Q4_0) isum[i] = _mm256_sub_epi32(isum[i], _mm256_set1_epi32(8 * a[i]->sum));
      }
    }
    __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)gp));
    UNROLL for (int i = 0; i < MT; i++) {
      __m256 dd = _mm256_mul_ps(dw, _mm256_broadcast_ss(&a[i]->d));
      acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(_mm256_cvtepi32_ps(isum[i]), dd));
    }
    if (t == DI_Q4_1) {
      __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gp + 16)));
      UNROLL for (int i = 0; i < MT; i++) acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(mw, _mm256_broadcast_ss(&a[i]->s)));
    }
  }
  int64_t c0 = g * DI_PK_G, lo = n0 > c0 ? n0 : c0, hi = n1 < c0 + DI_PK_G ? n1 : c0 + DI_PK_G;
  UNROLL for (int i = 0; i < MT; i++) {
    __m256 y = acc[i];
    if (lo == c0 && hi == c0 + DI_PK_G) {
      _mm256_storeu_ps(Y + i * ldy + c0, y);
    } else {
      float out[DI_PK_G];
      _mm256_storeu_ps(out, y);
      for (int64_t n = lo; n < hi; n++) Y[i * ldy + n] = out[n - c0];
    }
  }
}

/* Groups [g0, g1) for MT rows; the last group of a matrix with N % 8 rows is the tail. */
AI void pk_groups(di_dtype t, int MT, const uint8_t *W, size_t wrow, int64_t N, int64_t g0, int64_t g1,
                  const uint8_t *x, size_t xrow, int64_t nb, float *Y, int64_t ldy, int64_t n0, int64_t n1) {
  int64_t full = N / DI_PK_G, g = g0;
  for (; g < g1 && g < full; g++) pk_group(t, MT, false, W, wrow, N, g, x, xrow, nb, Y, ldy, n0, n1);
  if (g < g1) pk_group(t, MT, true, W, wrow, N, g, x, xrow, nb, Y, ldy, n0, n1);
}

AI void pk_mm(di_dtype t, const void *W, size_t wrow, int64_t N, const void *X, size_t xrow, int64_t M,
              int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1) {
  const uint8_t *w = W, *x = X;
  int64_t nb = K / DI_QK32, g0 = n0 / DI_PK_G, g1 = (n1 + DI_PK_G - 1) / DI_PK_G;
  if (M == 1) {
    pk_groups(t, 1, w, wrow, N, g0, g1, x, xrow, nb, Y, ldy, n0, n1);
    return;
  }
  int64_t panel = (int64_t)(PANEL_BYTES / (DI_PK_G * wrow));
  if (panel < 1) panel = 1;
  for (int64_t p0 = g0; p0 < g1; p0 += panel) {
    int64_t p1 = g1 - p0 < panel ? g1 : p0 + panel;
    for (int64_t m = 0; m < M; m += MT_MAX) {
      const uint8_t *xm = x + m * xrow;
      float *ym = Y + m * ldy;
      switch (M - m < MT_MAX ? M - m : MT_MAX) {
      case 4: pk_groups(t, 4, w, wrow, N, p0, p1, xm, xrow, nb, ym, ldy, n0, n1); break;
      case 3: pk_groups(t, 3, w, wrow, N, p0, p1, xm, xrow, nb, ym, ldy, n0, n1); break;
      case 2: pk_groups(t, 2, w, wrow, N, p0, p1, xm, xrow, nb, ym, ldy, n0, n1); break;
      default: pk_groups(t, 1, w, wrow, N, p0, p1, xm, xrow, nb, ym, ldy, n0, n1); break;
      }
    }
  }
}

#define WRAP(NAME, T)                                                                                          \
  static void NAME(const void *W, size_t wrow, int64_t N, const void *x, size_t xrow, int64_t M, int64_t K,    \
                   float *Y, int64_t ldy, int64_t n0, int64_t n1) {                                            \
    pk_mm(T, W, wrow, N, x, xrow, M, K, Y, ldy, n0, n1);                                                       \
  }
WRAP(mmp_q4_0, DI_Q4_0)
WRAP(mmp_q4_1, DI_Q4_1)
WRAP(mmp_q8_0, DI_Q8_0)

di_cpu_mmp_fn di_cpu_mmp_avx2(di_dtype t) {
  switch (t) {
  case DI_Q4_0: return mmp_q4_0;
  case DI_Q4_1: return mmp_q4_1;
  case DI_Q8_0: return mmp_q8_0;
  default: return NULL;
  }
}
