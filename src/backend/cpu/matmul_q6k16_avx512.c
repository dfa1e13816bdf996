/* Packed Q6_K at 16 activation rows (AVX-512 VNNI): batched decode's
 * classifier (DeepSeek-V2-Lite: 102400 x 2048 Q6_K, every step, all rows).
 *
 * The row-tile kernels (matmul_pack_vnni.h) put 8 columns x 2 half-words in a
 * zmm and one activation row per register, so a 16-element group costs each
 * row two vpdpbusd and two vpdpwssd: a 4-product sum must meet its scale while
 * it still fits int16. Here the 16 lanes are the 16 rows instead: the weights
 * come as 4-byte broadcasts and the activations transposed (lane r = row r's 4
 * bytes), so the scale (c, g) is one value for the whole register, a group's
 * 16 products sum in int32 (4 vpdpbusd) and meet it in one vpmulld. That is 5
 * multiply-pipe instructions per 16 elements x 16 rows of one column instead of
 * 8, and the weights are unpacked once for all 16 rows.
 *
 * Bits: per row, column and block the integer is sum_g sc_g * (P_g - 32 bs_g),
 * exactly the row kernels' isum - 32 * corr (exact integers), and the float
 * chain is the same fma(float(is), d_w * d_a, acc) in K order, stored as acc +
 * 0 (their s + m with m = +0), so every output has the bits of the one-row
 * kernel: row invariance. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/matmul_pack_avx512.h"
#include "backend/cpu/matmul_tiles.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/scratch.h"

#define R16 16

/* One 256-element block of the 16 rows, transposed: xt[k][r] = row r's int8
 * quants 4k..4k+3, nbs[g][r] = -32 * (row r's sum of group g), d[r] its scale. */
typedef struct {
  _Alignas(64) int32_t xt[DI_QKK / 4][R16];
  _Alignas(64) int32_t nbs[DI_QKK / 16][R16];
  _Alignas(64) float d[R16];
} rows16_blk;

/* Rows [0, n) of x; the lanes past n repeat row n - 1 (their outputs are dropped). */
static void rows16_prep(const uint8_t *x, size_t xrow, int64_t nb, int n, rows16_blk *p) {
  for (int64_t b = 0; b < nb; b++)
    for (int r = 0; r < R16; r++) {
      const di_act_q8k *a = (const di_act_q8k *)(x + (size_t)(r < n ? r : n - 1) * xrow) + b;
      p[b].d[r] = a->d;
      for (int g = 0; g < DI_QKK / 16; g++) p[b].nbs[g][r] = -32 * a->bsums[g];
      for (int k = 0; k < DI_QKK / 4; k++) memcpy(&p[b].xt[k][r], a->qs + 4 * k, 4);
    }
}

AI __m512i bcast32(const uint8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

/* One group-block (8 columns) into the columns' chains acc[c] (lane r: row r). */
AI void q6k16_block(const uint8_t *gp, const rows16_blk *p, __m512 *acc) {
  const uint8_t *q = gp + DI_PK_Q6K_WORDS;
  /* wb[k]: elements 8k..8k+7 of the 8 columns, column c's first four at byte
   * 4c, the next four at 32 + 4c (two packed words as stored) */
  _Alignas(64) uint8_t wb[DI_QKK / 8][64];
  _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)
      _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++)
        _mm512_store_si512((void *)wb[16 * h + 4 * r + j],
                           q6k_quants(_mm512_loadu_si512((const void *)(q + 32 * di_pk_q6k_ql(h, r & 1, 2 * j))),
                                      _mm512_loadu_si512((const void *)(q + 32 * di_pk_q6k_qh(h, 2 * j))), r));
  /* sct[k][4c + i]: column c's scale of group 4k + i, as int32 (for broadcasts) */
  int32_t sct[4][32];
  _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
    const __m256i w = _mm256_loadu_si256((const __m256i *)(q + 32 * di_pk_q6k_sc(k)));
    _mm512_storeu_si512((void *)sct[k], _mm512_cvtepi8_epi32(_mm256_castsi256_si128(w)));
    _mm512_storeu_si512((void *)(sct[k] + 16), _mm512_cvtepi8_epi32(_mm256_extracti128_si256(w, 1)));
  }
  __m512i isum[DI_PK_G];
  for (int c = 0; c < DI_PK_G; c++) isum[c] = _mm512_setzero_si512();
  for (int g = 0; g < DI_QKK / 16; g++) {
    const __m512i x0 = _mm512_load_si512((const void *)p->xt[4 * g]), x1 = _mm512_load_si512((const void *)p->xt[4 * g + 1]),
                  x2 = _mm512_load_si512((const void *)p->xt[4 * g + 2]), x3 = _mm512_load_si512((const void *)p->xt[4 * g + 3]),
                  nbs = _mm512_load_si512((const void *)p->nbs[g]);
    const uint8_t *w0 = wb[2 * g], *w1 = wb[2 * g + 1];
    const int32_t *sc = sct[g / 4] + g % 4;
    _Pragma("GCC unroll 8") for (int c = 0; c < DI_PK_G; c++) {
      __m512i s = _mm512_dpbusd_epi32(nbs, bcast32(w0 + 4 * c), x0);
      s = _mm512_dpbusd_epi32(s, bcast32(w0 + 32 + 4 * c), x1);
      s = _mm512_dpbusd_epi32(s, bcast32(w1 + 4 * c), x2);
      s = _mm512_dpbusd_epi32(s, bcast32(w1 + 32 + 4 * c), x3);
      s = _mm512_mullo_epi32(s, _mm512_set1_epi32(sc[4 * c]));
      isum[c] = _mm512_add_epi32(isum[c], s);
    }
  }
  float dw[DI_PK_G];
  _mm256_storeu_ps(dw, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gp + DI_PK_D))));
  const __m512 ad = _mm512_load_ps(p->d);
  for (int c = 0; c < DI_PK_G; c++)
    acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(_mm512_set1_ps(dw[c]), ad), acc[c]);
}

/* Groups [g0, g1) at w (stride j->gstride) for the rows prepared in p; rows [0, n) stored. */
static void q6k16_groups(const di_pk_job *j, const uint8_t *w, int64_t g0, int64_t g1, const rows16_blk *p, int n,
                         float *Y, bool pf) {
  const size_t gbb = DI_PK_G * sizeof(di_block_q6_K);
  for (int64_t g = g0; g < g1; g++, w += j->gstride) {
    __m512 acc[DI_PK_G];
    for (int c = 0; c < DI_PK_G; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < j->nb; b++) {
      const uint8_t *gp = w + (size_t)b * gbb;
      if (pf) gemv_prefetch(gp, gbb, pk_ahead(gbb));
      q6k16_block(gp, p + b, acc);
    }
    _Alignas(64) float out[DI_PK_G][R16];
    for (int c = 0; c < DI_PK_G; c++) _mm512_store_ps(out[c], _mm512_add_ps(acc[c], _mm512_setzero_ps()));
    const int64_t c0 = g * DI_PK_G, lo = j->n0 > c0 ? j->n0 : c0, hi = j->n1 < c0 + DI_PK_G ? j->n1 : c0 + DI_PK_G;
    for (int r = 0; r < n; r++)
      for (int64_t c = lo; c < hi; c++) Y[r * j->ldy + c] = out[c - c0][r];
  }
}

int64_t di_cpu_q6k_rows16(const di_pk_job *j, const uint8_t *w, int64_t g0, int64_t gf, const uint8_t *tail,
                          int64_t full, const uint8_t *x, int64_t M, float *Y) {
  /* A last tile of 10-15 rows runs here too, padded: one pass at 16 rows
   * costs less than an 8-row tile and another (one thread, 2048 x 2816: 16
   * rows 360-380 us, 10 rows as 8 + 2 380-400, 15 as 8 + 7 520; at 9 rows a tie). */
  const int64_t done = M % R16 >= 10 ? M : M - M % R16;
  if (done == 0) return 0;
  rows16_blk *p = di_cpu_scratch(DI_SCRATCH_ROWS16, (size_t)j->nb * sizeof(rows16_blk));
  if (!p) return 0; /* out of memory: the row tiles give the same bits */
  for (int64_t m = 0; m < done; m += R16) {
    const int n = done - m < R16 ? (int)(done - m) : R16;
    rows16_prep(x + (size_t)m * j->xrow, j->xrow, j->nb, n, p);
    if (g0 < gf) q6k16_groups(j, w + (size_t)g0 * j->gstride, g0, gf, p, n, Y + m * j->ldy, true);
    if (tail) q6k16_groups(j, tail, full, full + 1, p, n, Y + m * j->ldy, false);
  }
  return done;
}
