/* The AVX-512 attention tile for 2 to 16 queries on the same K/V rows (the
 * query heads of one KV head, of one or several tokens; compiled with
 * -mavx512f, called where the ISA level is AVX-512). Every query's result has
 * the bits of its own AVX2 tile (attn_avx2.c):
 *  - scores (8 to 16 queries): the queries' elements transposed across the
 *    lanes, so lane L's 8 partials of a K row are 8 registers, each summing
 *    the products the AVX2 tile's ymm lane i sums, in the same order, and
 *    hsum8's tree is 7 vertical adds (3 rows per pass: 24 accumulators, one
 *    query load per 3 FMAs, the K element an embedded broadcast). Decode
 *    groups of 5-8 queries put each query in two lanes and the K rows in
 *    pairs (tile_pairs), so the lanes stay full; the pair layout (two
 *    queries per zmm, a 15-shuffle tree per row) is kept for 2-4 (tile_few);
 *  - the scores are laid out with the queries across the lanes (one zmm per
 *    K row), so the softmax (max, exp, and the weight sum l in position
 *    order) runs 16 queries per instruction, with no serial scalar chain;
 *  - V: 16 dimensions per zmm, every dimension summed over the positions in
 *    order, as the AVX2 tile does 8 at a time, for 4 queries at once.
 * A query may stop before the tile's last row (qn[i] < n: the tokens of a
 * prefill on the tile holding their own position); rows past its end get
 * weight 0 in l and are skipped in V, as its own tile never sees them. */
#include <stdbool.h>

#include "backend/cpu/attn_x86.h"

#define QMAX 16 /* queries per pass, one per lane */

/* The 8 floats at p broadcast to both halves (one load, no shuffle). */
AI __m512 bcast8f(const float *p) { return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd((const double *)p))); }
/* Elements 8c..8c+7 of a K row of type t as f32, in both halves. */
AI __m512 bcast8_kv(const uint8_t *row, int c, di_kv_dtype t) {
  if (t == DI_KV_DTYPE_F32) return bcast8f((const float *)row + 8 * c);
  return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(load_kv(row + 16 * c, t))));
}
/* Elements d..d+15 of a V row of type t as f32. */
AI __m512 load16_kv(const uint8_t *row, int d, di_kv_dtype t) {
  if (t == DI_KV_DTYPE_F32) return _mm512_loadu_ps((const float *)row + d);
  const __m256i h = _mm256_loadu_si256((const __m256i *)(row + 2 * d));
  if (t == DI_KV_DTYPE_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
AI __m512 join8f(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}

/* The scores of one row for 8 query pairs from their lane partials (acc[p]:
 * pair p's 8 partials of query p in lanes 0-7, of query p + 8's in 8-15), as
 * [p0..p7 | p0+8..p7+8]. Each score is hsum8's tree, ((x0 + x1) + (x2 + x3)) +
 * ((x4 + x5) + (x6 + x7)), so the same bits, but for all 16 at once with
 * in-lane shuffles (15, where two hsum8s and their extracts took 36). */
AI __m512 tree8x2(const __m512 acc[8]) {
  __m512 l1[4], l2[2];
  /* per 128-bit lane (4 partials of one query): [p x01, p x23, p+1 x01, p+1 x23] */
  UNROLL for (int p = 0; p < 4; p++)
    l1[p] = _mm512_add_ps(_mm512_shuffle_ps(acc[2 * p], acc[2 * p + 1], 0x88),
                          _mm512_shuffle_ps(acc[2 * p], acc[2 * p + 1], 0xdd));
  /* per lane: 4 pairs' sums of that lane's 4 partials */
  UNROLL for (int p = 0; p < 2; p++)
    l2[p] = _mm512_add_ps(_mm512_shuffle_ps(l1[2 * p], l1[2 * p + 1], 0x88),
                          _mm512_shuffle_ps(l1[2 * p], l1[2 * p + 1], 0xdd));
  /* lanes of l2[p]: a x0-3, a x4-7, b x0-3, b x4-7 (pairs 4p..4p+3) */
  const __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(l2[0], l2[1], 0x88), _mm512_shuffle_f32x4(l2[0], l2[1], 0xdd));
  /* s: [a 0-3 | b 0-3 | a 4-7 | b 4-7] */
  return _mm512_shuffle_f32x4(s, s, 0xd8);
}

/* V for nv queries (1..4) over rows [j0, j1), dimensions [d0, d0 + 16 nb) of
 * rows of type t: query i's weight of row j at wp[i][j * ws]; with l, also
 * each query's sum of the weights in row order (serial chains that hide
 * behind the FMAs). */
AI void v_rows(int nv, int nb, di_kv_dtype t, const float *const *wp, int ws, const uint8_t *const *v, int d0, int j0,
               int j1, __m512 (*acc)[4], float *l) {
  for (int j = j0; j < j1; j++) {
    __m512 x[4] = {0};
    UNROLL for (int r = 0; r < nb; r++) x[r] = load16_kv(v[j], d0 + 16 * r, t);
    UNROLL for (int i = 0; i < nv; i++) {
      const float wj = wp[i][(size_t)j * ws];
      if (l) l[i] += wj;
      const __m512 p = _mm512_set1_ps(wj);
      UNROLL for (int r = 0; r < nb; r++) acc[i][r] = _mm512_fmadd_ps(p, x[r], acc[i][r]);
    }
  }
}

/* The V pass of nv queries (1..4) with weights wp[i][j * ws] over rows [0,
 * qn[i]) of type t: rows past a query's length are skipped (not added as 0 *
 * v, which could turn an acc of -0 into +0). With sum_l, out[i]->l = the
 * weights' sum in row order, as the AVX2 tile adds it. */
AI void v_pass_t(di_kv_dtype t, int nv, const float *const *wp, int ws, const int *qn, const uint8_t *const *v, int hd,
                 bool sum_l, di_attn_partial *const *out) {
  int jmin = qn[0];
  for (int i = 1; i < nv; i++) jmin = qn[i] < jmin ? qn[i] : jmin;
  float l[4] = {0, 0, 0, 0};
  for (int d0 = 0; d0 < hd; d0 += 64) {
    const int nb = hd - d0 >= 64 ? 4 : (hd - d0) / 16;
    float *ls = sum_l && d0 == 0 ? l : NULL;
    __m512 acc[4][4];
    UNROLL for (int i = 0; i < 4; i++)
      UNROLL for (int r = 0; r < 4; r++) acc[i][r] = _mm512_setzero_ps();
    switch (nb == 4 ? nv : 0) { /* constant counts keep acc in registers */
    case 4: v_rows(4, 4, t, wp, ws, v, d0, 0, jmin, acc, ls); break;
    case 3: v_rows(3, 4, t, wp, ws, v, d0, 0, jmin, acc, ls); break;
    case 2: v_rows(2, 4, t, wp, ws, v, d0, 0, jmin, acc, ls); break;
    case 1: v_rows(1, 4, t, wp, ws, v, d0, 0, jmin, acc, ls); break;
    default: v_rows(nv, nb, t, wp, ws, v, d0, 0, jmin, acc, ls); break;
    }
    for (int i = 0; i < nv; i++) {
      v_rows(1, nb, t, wp + i, ws, v, d0, jmin, qn[i], acc + i, ls ? ls + i : NULL);
      for (int r = 0; r < nb; r++) _mm512_storeu_ps(out[i]->acc + d0 + 16 * r, acc[i][r]);
    }
  }
  if (sum_l)
    for (int i = 0; i < nv; i++) out[i]->l = l[i];
}

static void v_pass(di_kv_dtype t, int nv, const float *const *wp, int ws, const int *qn, const uint8_t *const *v, int hd,
                   bool sum_l, di_attn_partial *const *out) {
  switch (t) { /* the element type a constant in each copy */
  case DI_KV_DTYPE_F32: v_pass_t(DI_KV_DTYPE_F32, nv, wp, ws, qn, v, hd, sum_l, out); break;
  case DI_KV_DTYPE_F16: v_pass_t(DI_KV_DTYPE_F16, nv, wp, ws, qn, v, hd, sum_l, out); break;
  default: v_pass_t(DI_KV_DTYPE_BF16, nv, wp, ws, qn, v, hd, sum_l, out); break;
  }
}

/* 16 rows of 16 floats (r[i] + d) transposed: t[16 c + i] = r[i][d + c]. */
AI void transpose16(const float *const *r, int d, float *t) {
  __m512 a[16], u[16], v[16];
  UNROLL for (int i = 0; i < 16; i++) a[i] = _mm512_loadu_ps(r[i] + d);
  /* per 128-bit lane L (columns 4L..4L+3): u interleaves row pairs, then
   * v[4k + j] holds column 4L + j of rows 4k..4k+3 */
  UNROLL for (int k = 0; k < 8; k++) {
    u[2 * k] = _mm512_unpacklo_ps(a[2 * k], a[2 * k + 1]);
    u[2 * k + 1] = _mm512_unpackhi_ps(a[2 * k], a[2 * k + 1]);
  }
  UNROLL for (int k = 0; k < 4; k++) {
    const __m512d x0 = _mm512_castps_pd(u[4 * k]), x1 = _mm512_castps_pd(u[4 * k + 1]);
    const __m512d x2 = _mm512_castps_pd(u[4 * k + 2]), x3 = _mm512_castps_pd(u[4 * k + 3]);
    v[4 * k] = _mm512_castpd_ps(_mm512_unpacklo_pd(x0, x2));
    v[4 * k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(x0, x2));
    v[4 * k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(x1, x3));
    v[4 * k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(x1, x3));
  }
  UNROLL for (int j = 0; j < 4; j++) {
    const __m512 w = _mm512_shuffle_f32x4(v[j], v[4 + j], 0x88), x = _mm512_shuffle_f32x4(v[j], v[4 + j], 0xdd);
    const __m512 y = _mm512_shuffle_f32x4(v[8 + j], v[12 + j], 0x88), z = _mm512_shuffle_f32x4(v[8 + j], v[12 + j], 0xdd);
    _mm512_store_ps(t + 16 * j, _mm512_shuffle_f32x4(w, y, 0x88));
    _mm512_store_ps(t + 16 * (8 + j), _mm512_shuffle_f32x4(w, y, 0xdd));
    _mm512_store_ps(t + 16 * (4 + j), _mm512_shuffle_f32x4(x, z, 0x88));
    _mm512_store_ps(t + 16 * (12 + j), _mm512_shuffle_f32x4(x, z, 0xdd));
  }
}

/* The scores of R rows from j (R <= 3) for the 16 query lanes, the queries'
 * elements across the lanes (qt[16 d + L]): lane L's partial i of a row sums
 * q[8 c + i] k[8 c + i] over c in order, as the AVX2 tile's ymm lane i does,
 * and the 8 partials meet in hsum8's tree as vertical adds, so the loop has
 * no shuffle. The scaled scores go to w (row j at w + 16 j) and, without a
 * cap, into the running max mx of the lanes still in their query (vlen). */
AI void scores_rows(int R, const float *qt, const float *const *k, int j, int C, __m512 vscale, __m512i vlen,
                    bool max, float *w, __m512 *mx) {
  __m512 a[3][8];
  UNROLL for (int r = 0; r < 3; r++)
    UNROLL for (int i = 0; i < 8; i++) a[r][i] = _mm512_setzero_ps();
  for (int c = 0; c < C; c++)
    UNROLL for (int i = 0; i < 8; i++) {
      __m512 qv = _mm512_load_ps(qt + 16 * (8 * c + i));
      __asm__("" : "+v"(qv)); /* one load for the R FMAs (else each FMA reloads it: two loads per FMA) */
      UNROLL for (int r = 0; r < R; r++) a[r][i] = _mm512_fmadd_ps(qv, _mm512_set1_ps(k[j + r][8 * c + i]), a[r][i]);
    }
  UNROLL for (int r = 0; r < R; r++) {
    const __m512 lo = _mm512_add_ps(_mm512_add_ps(a[r][0], a[r][1]), _mm512_add_ps(a[r][2], a[r][3]));
    const __m512 hi = _mm512_add_ps(_mm512_add_ps(a[r][4], a[r][5]), _mm512_add_ps(a[r][6], a[r][7]));
    const __m512 s = _mm512_mul_ps(_mm512_add_ps(lo, hi), vscale);
    _mm512_store_ps(w + (size_t)(j + r) * QMAX, s);
    if (max) *mx = _mm512_mask_max_ps(*mx, _mm512_cmpgt_epi32_mask(vlen, _mm512_set1_epi32(j + r)), *mx, s);
  }
}

/* Queries q[0..nq) (2 <= nq <= 16), query i over rows [0, qn[i]) of the f32
 * K/V rows k[j], v[j] (n = the largest qn; hd a multiple of 16). */
static void tile16(const float *const *q, int nq, const int *qn, const float *const *k, const float *const *v, int n,
                   int hd, float scale, float softcap, di_attn_partial *const *out) {
  static const float zero[DI_ATTN_GROUP_MAX_HD];
  const float *rows[QMAX]; /* query i in lane i, the unused lanes zero */
  _Alignas(64) int32_t len[QMAX] = {0}; /* lane L takes part in row j while j < len[L] */
  for (int L = 0; L < QMAX; L++) rows[L] = L < nq ? q[L] : zero;
  for (int i = 0; i < nq; i++) len[i] = qn[i];
  _Alignas(64) float qt[DI_ATTN_GROUP_MAX_HD * QMAX];
  for (int d = 0; d < hd; d += 16) transpose16(rows, d, qt + 16 * d);
  /* scores, then weights, of row j for the query in lane L at w[j * 16 + L] */
  _Alignas(64) float w[DI_ATTN_TILE * QMAX];
  const __m512i vlen = _mm512_load_si512(len);
  const __m512 vscale = _mm512_set1_ps(scale);
  const bool cap = softcap > 0;
  __m512 mx = _mm512_set1_ps(-INFINITY);
  int j = 0;
  for (; j + 3 <= n; j += 3) scores_rows(3, qt, k, j, hd / 8, vscale, vlen, !cap, w, &mx);
  for (; j < n; j++) scores_rows(1, qt, k, j, hd / 8, vscale, vlen, !cap, w, &mx);
  if (cap) /* the cap comes before the max */
    for (j = 0; j < n; j++) {
      for (int L = 0; L < QMAX; L++) w[j * QMAX + L] = softcap * tanhf(w[j * QMAX + L] / softcap);
      const __mmask16 in = _mm512_cmpgt_epi32_mask(vlen, _mm512_set1_epi32(j));
      mx = _mm512_mask_max_ps(mx, in, mx, _mm512_load_ps(w + (size_t)j * QMAX));
    }
  __m512 l = _mm512_setzero_ps();
  for (j = 0; j < n; j++) { /* l in position order, as the AVX2 tile */
    const __mmask16 in = _mm512_cmpgt_epi32_mask(vlen, _mm512_set1_epi32(j));
    const __m512 e = _mm512_maskz_mov_ps(in, di_softmax_exp_avx512(_mm512_sub_ps(_mm512_load_ps(w + (size_t)j * QMAX), mx)));
    l = _mm512_add_ps(l, e);
    _mm512_store_ps(w + (size_t)j * QMAX, e);
  }
  _Alignas(64) float mxs[QMAX], ls[QMAX];
  _mm512_store_ps(mxs, mx);
  _mm512_store_ps(ls, l);
  /* V, 4 queries and 64 dimensions at a time */
  for (int i0 = 0; i0 < nq; i0 += 4) {
    const int nv = nq - i0 < 4 ? nq - i0 : 4;
    const float *wp[4];
    for (int i = 0; i < nv; i++) {
      wp[i] = w + i0 + i;
      out[i0 + i]->m = mxs[i0 + i], out[i0 + i]->l = ls[i0 + i];
    }
    v_pass(DI_KV_DTYPE_F32, nv, wp, QMAX, qn + i0, (const uint8_t *const *)v, hd, false, out + i0);
  }
}

/* Rows [j, j + 8) of rows (clamped to n - 1), `bytes` each, towards L1. A
 * decode tile's K/V rows lie in the pool's blocks, one per position and head,
 * too scattered for the hardware prefetcher: the loads waited on memory
 * (SmolLM2, 16 streams at ~160 positions: ~40% of the step in this tile). */
AI void prefetch8(const uint8_t *const *rows, int j, int n, int bytes) {
  for (int r = 0; r < 8; r++) {
    const uint8_t *p = rows[j + r < n ? j + r : n - 1];
    for (int o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 3);
  }
}

/* Queries q[0..nq) (2 <= nq < 8), query i over rows [0, qn[i]) of
 * the K/V rows of type t as stored (n = the largest qn; hd a multiple of 16),
 * for groups too small to fill tile16's lanes (decode): a pair's 8 rows per
 * score tree, each query's softmax on its own row of scores, then V 4 queries
 * at a time. The rows are converted where they are used: staging the whole
 * tile as f32 cost more than the work of so few queries. */
AI void tile_few_t(di_kv_dtype t, const float *const *q, int nq, const int *qn, const uint8_t *const *k,
                   const uint8_t *const *v, int n, int hd, float scale, float softcap, di_attn_partial *const *out) {
  _Alignas(64) float sc[8][DI_ATTN_TILE + 8];
  const __m512 vscale = _mm512_set1_ps(scale);
  const int es = t == DI_KV_DTYPE_F32 ? 4 : 2;
  for (int i = 0; i < nq; i += 2) {
    __m512 qq[DI_ATTN_GROUP_MAX_HD / 8];
    const float *qb = q[i + 1 < nq ? i + 1 : i]; /* an odd last query pairs with itself */
    for (int c = 0; c < hd / 8; c++) qq[c] = join8f(_mm256_loadu_ps(q[i] + 8 * c), _mm256_loadu_ps(qb + 8 * c));
    for (int j0 = 0; j0 < n; j0 += 8) {
      const uint8_t *kp[8];
      UNROLL for (int r = 0; r < 8; r++) kp[r] = k[j0 + r < n ? j0 + r : j0];
      if (i == 0) { /* the next 8 K rows, and the V rows the V pass reads after the scores */
        prefetch8(k, j0 + 8, n, hd * es);
        if (v[0] != k[0]) prefetch8(v, j0, n, hd * es); /* MLA: V is the K rows */
      }
      __m512 acc[8];
      UNROLL for (int r = 0; r < 8; r++) acc[r] = _mm512_setzero_ps();
      for (int c = 0; c < hd / 8; c++)
        UNROLL for (int r = 0; r < 8; r++) acc[r] = _mm512_fmadd_ps(qq[c], bcast8_kv(kp[r], c, t), acc[r]);
      const __m512 s = _mm512_mul_ps(tree8x2(acc), vscale); /* [a rows | b rows] */
      _mm256_store_ps(sc[i] + j0, _mm512_castps512_ps256(s));
      _mm256_store_ps(sc[i + 1] + j0, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    }
  }
  for (int i = 0; i < nq; i++) out[i]->m = tile_softmax(sc[i], qn[i], softcap);
  for (int i0 = 0; i0 < nq; i0 += 4) {
    const int nv = nq - i0 < 4 ? nq - i0 : 4;
    const float *wp[4];
    for (int i = 0; i < nv; i++) wp[i] = sc[i0 + i];
    v_pass_t(t, nv, wp, 1, qn + i0, v, hd, true, out + i0);
  }
}

/* Decode groups of 5-8 queries (the query heads of one KV head of one token):
 * query i in lanes 2i and 2i + 1 and the K rows in pairs, so lane 2i + p of
 * row pair r scores query i against row 2r + p. As in tile16, each of a
 * score's 8 partials is a register summing the products the AVX2 tile's ymm
 * lane sums, in the same order, and hsum8's tree is 7 vertical adds; a K pair's
 * element is one 64-bit broadcast load, the rows converted and interleaved
 * once per call (tile_few converted and broadcast a K row chunk per FMA and
 * per query pair, and ran the softmax 8 lanes wide per query). */
AI void k_pairs(di_kv_dtype t, const uint8_t *const *k, const uint8_t *const *v, int n, int hd, double *kk) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int j = 0; j < n; j += 2) { /* an odd last row pairs with itself (its twin's lanes are masked) */
    if (j % 8 == 0) { /* the next 8 K rows, and the V rows the V pass reads after the scores */
      prefetch8(k, j + 8, n, hd * (t == DI_KV_DTYPE_F32 ? 4 : 2));
      if (v[0] != k[0]) prefetch8(v, j, n, hd * (t == DI_KV_DTYPE_F32 ? 4 : 2)); /* MLA: V is the K rows */
    }
    const uint8_t *a = k[j], *b = k[j + 1 < n ? j + 1 : j];
    double *o = kk + (size_t)(j / 2) * hd;
    for (int d = 0; d < hd; d += 16) {
      const __m512 x = load16_kv(a, d, t), y = load16_kv(b, d, t);
      _mm512_store_pd(o + d, _mm512_castps_pd(_mm512_permutex2var_ps(x, lo, y)));
      _mm512_store_pd(o + d + 8, _mm512_castps_pd(_mm512_permutex2var_ps(x, hi, y)));
    }
  }
}

/* The scaled scores of row pairs [rp, rp + R) (R <= 3) to w + 16 * pair. */
AI void pair_scores(int R, const float *qt, const double *kk, int rp, int hd, __m512 vscale, float *w) {
  __m512 a[3][8];
  UNROLL for (int r = 0; r < 3; r++)
    UNROLL for (int i = 0; i < 8; i++) a[r][i] = _mm512_setzero_ps();
  for (int c = 0; c < hd / 8; c++)
    UNROLL for (int i = 0; i < 8; i++) {
      __m512 qv = _mm512_load_ps(qt + 16 * (8 * c + i));
      __asm__("" : "+v"(qv)); /* one load for the R FMAs */
      UNROLL for (int r = 0; r < R; r++)
        a[r][i] = _mm512_fmadd_ps(qv, _mm512_castpd_ps(_mm512_set1_pd(kk[(size_t)(rp + r) * hd + 8 * c + i])), a[r][i]);
    }
  UNROLL for (int r = 0; r < R; r++) {
    const __m512 lo = _mm512_add_ps(_mm512_add_ps(a[r][0], a[r][1]), _mm512_add_ps(a[r][2], a[r][3]));
    const __m512 hi = _mm512_add_ps(_mm512_add_ps(a[r][4], a[r][5]), _mm512_add_ps(a[r][6], a[r][7]));
    _mm512_store_ps(w + (size_t)(rp + r) * 16, _mm512_mul_ps(_mm512_add_ps(lo, hi), vscale));
  }
}

AI void tile_pairs_t(di_kv_dtype t, const float *const *q, int nq, const int *qn, const uint8_t *const *k,
                     const uint8_t *const *v, int n, int hd, float scale, float softcap, di_attn_partial *const *out) {
  static const float zero[DI_ATTN_GROUP_MAX_HD];
  _Alignas(64) double kk[DI_ATTN_TILE / 2 * DI_ATTN_GROUP_MAX_HD];
  _Alignas(64) float qt[DI_ATTN_GROUP_MAX_HD * 16], w[DI_ATTN_TILE * 8 + 16];
  _Alignas(64) int32_t len[16]; /* lane L takes part in row j while j < len[L] */
  const float *rows[16];
  for (int L = 0; L < 16; L++) {
    rows[L] = L / 2 < nq ? q[L / 2] : zero;
    len[L] = L / 2 < nq ? qn[L / 2] : 0;
  }
  for (int d = 0; d < hd; d += 16) transpose16(rows, d, qt + 16 * d);
  k_pairs(t, k, v, n, hd, kk);
  const int np = (n + 1) / 2;
  const __m512 vscale = _mm512_set1_ps(scale);
  int rp = 0;
  for (; rp + 3 <= np; rp += 3) pair_scores(3, qt, kk, rp, hd, vscale, w);
  for (; rp < np; rp++) pair_scores(1, qt, kk, rp, hd, vscale, w);
  if (softcap > 0) /* the cap comes before the max */
    for (int x = 0; x < np * 16; x++) w[x] = softcap * tanhf(w[x] / softcap);
  const __m512i vlen = _mm512_load_si512(len), par = _mm512_setr_epi32(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1);
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (rp = 0; rp < np; rp++) {
    const __mmask16 in = _mm512_cmpgt_epi32_mask(vlen, _mm512_add_epi32(par, _mm512_set1_epi32(2 * rp)));
    mx = _mm512_mask_max_ps(mx, in, mx, _mm512_load_ps(w + 16 * rp));
  }
  mx = _mm512_max_ps(mx, _mm512_permute_ps(mx, 0xb1)); /* both lanes of a query */
  /* l in row order, as the AVX2 tile: lane 2i adds row 2rp's weight, then row
   * 2rp + 1's (a row past a query's end adds +0, which changes no sum); the
   * weights stored by row for the V pass (row 2rp's 8 queries, then 2rp + 1's) */
  const __m512i split = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  __m512 l = _mm512_setzero_ps();
  for (rp = 0; rp < np; rp++) {
    const __mmask16 in = _mm512_cmpgt_epi32_mask(vlen, _mm512_add_epi32(par, _mm512_set1_epi32(2 * rp)));
    const __m512 e = _mm512_maskz_mov_ps(in, di_softmax_exp_avx512(_mm512_sub_ps(_mm512_load_ps(w + 16 * rp), mx)));
    l = _mm512_add_ps(_mm512_add_ps(l, e), _mm512_permute_ps(e, 0xb1));
    _mm512_store_ps(w + 16 * rp, _mm512_permutexvar_ps(split, e));
  }
  _Alignas(64) float mxs[16], ls[16];
  _mm512_store_ps(mxs, mx);
  _mm512_store_ps(ls, l);
  for (int i = 0; i < nq; i++) out[i]->m = mxs[2 * i], out[i]->l = ls[2 * i];
  for (int i0 = 0; i0 < nq; i0 += 4) {
    const int nv = nq - i0 < 4 ? nq - i0 : 4;
    const float *wp[4];
    for (int i = 0; i < nv; i++) wp[i] = w + i0 + i;
    v_pass_t(t, nv, wp, 8, qn + i0, v, hd, false, out + i0);
  }
}

/* A decode group of 2-8 queries: tile_pairs for 5-8, tile_few for 2-4 (where
 * a pair-layout tile's lanes would be mostly empty; it measured no faster). */
AI void group_t(di_kv_dtype t, const float *const *q, int nq, const int *qn, const uint8_t *const *k,
                const uint8_t *const *v, int n, int hd, float scale, float softcap, di_attn_partial *const *out) {
  if (nq >= 5) tile_pairs_t(t, q, nq, qn, k, v, n, hd, scale, softcap, out);
  else tile_few_t(t, q, nq, qn, k, v, n, hd, scale, softcap, out);
}

static void group(di_kv_dtype t, const float *const *q, int nq, const int *qn, const uint8_t *const *k,
                  const uint8_t *const *v, int n, int hd, float scale, float softcap, di_attn_partial *const *out) {
  switch (t) { /* the element type a constant in each copy */
  case DI_KV_DTYPE_F32: group_t(DI_KV_DTYPE_F32, q, nq, qn, k, v, n, hd, scale, softcap, out); break;
  case DI_KV_DTYPE_F16: group_t(DI_KV_DTYPE_F16, q, nq, qn, k, v, n, hd, scale, softcap, out); break;
  default: group_t(DI_KV_DTYPE_BF16, q, nq, qn, k, v, n, hd, scale, softcap, out); break;
  }
}

/* Queries [0, m) of a group over the rows kr/vr of type t: group, or the AVX2
 * tile for one. */
static void few(const float *const *q, int m, const int *lens, const uint8_t *const *kr, const uint8_t *const *vr,
                di_kv_dtype t, int hd, float scale, float softcap, di_attn_partial *const *out) {
  int mn = 0;
  for (int x = 0; x < m; x++) mn = lens[x] > mn ? lens[x] : mn;
  if (m > 1) group(t, q, m, lens, kr, vr, mn, hd, scale, softcap, out);
  else di_cpu_attn_tile_avx2(q[0], kr, vr, lens[0], hd, t, scale, softcap, out[0]);
}

void di_cpu_attn_tile_group_avx512(const float *const *q, int nq, const uint8_t *const *krow,
                                   const uint8_t *const *vrow, int n, const int *qn, int hd, di_kv_dtype t,
                                   float scale, float softcap, di_attn_partial *const *out) {
  if (nq < 2 || hd % 16 != 0 || hd > DI_ATTN_GROUP_MAX_HD) {
    di_cpu_attn_tile_group_avx2(q, nq, krow, vrow, n, qn, hd, t, scale, softcap, out);
    return;
  }
  int lens[DI_ATTN_MAX_Q];
  for (int i = 0; i < nq; i++) lens[i] = qn ? qn[i] : n;
  if (nq <= 8) { /* a decode group: the rows as stored, converted where used */
    few(q, nq, lens, krow, vrow, t, hd, scale, softcap, out);
    return;
  }
  _Alignas(64) float kbuf[DI_ATTN_TILE * DI_ATTN_GROUP_MAX_HD], vbuf[DI_ATTN_TILE * DI_ATTN_GROUP_MAX_HD];
  const float *kp[DI_ATTN_TILE], *vp[DI_ATTN_TILE];
  tile_to_f32(krow, vrow, n, hd, t, kbuf, vbuf, kp, vp);
  for (int i = 0, m; i < nq; i += m) {
    m = nq - i < QMAX ? nq - i : QMAX;
    int mn = 0;
    for (int x = 0; x < m; x++) mn = lens[i + x] > mn ? lens[i + x] : mn;
    if (m >= 8) tile16(q + i, m, lens + i, kp, vp, mn, hd, scale, softcap, out + i);
    else /* tile16's fixed costs per row are lower only from 8 queries */
      few(q + i, m, lens + i, (const uint8_t *const *)kp, (const uint8_t *const *)vp, DI_KV_DTYPE_F32, hd, scale, softcap,
          out + i);
  }
}
