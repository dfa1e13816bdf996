/* The AVX-512 attention tile for two queries on the same K/V rows (GQA heads
 * of one KV head; compiled with -mavx512f, called where the ISA level is
 * AVX-512). It is the AVX2 tile's arithmetic with the two queries side by
 * side in one zmm, so each query's result has the bits of its own AVX2 tile:
 *  - scores: lanes 0-7 hold query a's 8-lane partial dot products with K row
 *    r, lanes 8-15 query b's, each lane summing the same products in the same
 *    order as the AVX2 tile's ymm (the K row's 8 values are broadcast to both
 *    halves); each half then goes through the same hsum8;
 *  - the softmax weights through the same tile_softmax;
 *  - V: 16 dimensions per zmm, every dimension summed over the positions in
 *    order, as the AVX2 tile does 8 at a time.
 * Half the FMAs of two AVX2 tiles, and 8 independent chains per pass. */
#include "backend/cpu/attn_x86.h"

/* The 8 floats at p broadcast to both halves (one load, no shuffle). */
AI __m512 bcast8f(const float *p) { return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd((const double *)p))); }
AI __m512 join8f(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}
AI __m256 lo8f(__m512 v) { return _mm512_castps512_ps256(v); }
AI __m256 hi8f(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

/* The scores of 8 rows for two queries from their lane partials (acc[r]:
 * query a's 8 partials of row r in lanes 0-7, query b's in 8-15), as
 * [a r0..r7 | b r0..r7]. Each score is hsum8's tree, ((p0 + p1) + (p2 + p3)) +
 * ((p4 + p5) + (p6 + p7)), so the same bits; but the tree runs on all 16
 * (row, query) pairs at once with in-lane shuffles: 15 shuffles where two
 * hsum8s and the half extracts took 36, on the port the second FMA unit shares. */
AI __m512 tree8x2(const __m512 acc[8]) {
  __m512 l1[4], l2[2];
  /* per 128-bit lane (4 partials of one query): [r p01, r p23, r+1 p01, r+1 p23] */
  UNROLL for (int p = 0; p < 4; p++)
    l1[p] = _mm512_add_ps(_mm512_shuffle_ps(acc[2 * p], acc[2 * p + 1], 0x88),
                          _mm512_shuffle_ps(acc[2 * p], acc[2 * p + 1], 0xdd));
  /* per lane: 4 rows' sums of that lane's 4 partials */
  UNROLL for (int p = 0; p < 2; p++)
    l2[p] = _mm512_add_ps(_mm512_shuffle_ps(l1[2 * p], l1[2 * p + 1], 0x88),
                          _mm512_shuffle_ps(l1[2 * p], l1[2 * p + 1], 0xdd));
  /* lanes of l2[p]: a p0-3, a p4-7, b p0-3, b p4-7 (rows 4p..4p+3) */
  const __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(l2[0], l2[1], 0x88), _mm512_shuffle_f32x4(l2[0], l2[1], 0xdd));
  /* s: [a r0-3 | b r0-3 | a r4-7 | b r4-7] */
  return _mm512_shuffle_f32x4(s, s, 0xd8);
}

/* Queries qa, qb over f32 K/V rows k[j], v[j] (hd a multiple of 16). */
static void tile2(const float *qa, const float *qb, const float *const *k, const float *const *v, int n, int hd,
                  float scale, float softcap, di_attn_partial *oa, di_attn_partial *ob) {
  _Alignas(64) float sa[DI_ATTN_TILE + 8], sb[DI_ATTN_TILE + 8];
  __m512 qq[DI_ATTN_GROUP_MAX_HD / 8];
  for (int c = 0; c < hd / 8; c++) qq[c] = join8f(_mm256_loadu_ps(qa + 8 * c), _mm256_loadu_ps(qb + 8 * c));
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int j0 = 0; j0 < n; j0 += 8) {
    const float *kp[8];
    UNROLL for (int r = 0; r < 8; r++) kp[r] = k[j0 + r < n ? j0 + r : j0];
    __m512 acc[8];
    UNROLL for (int r = 0; r < 8; r++) acc[r] = _mm512_setzero_ps();
    for (int c = 0; c < hd / 8; c++)
      UNROLL for (int r = 0; r < 8; r++) acc[r] = _mm512_fmadd_ps(qq[c], bcast8f(kp[r] + 8 * c), acc[r]);
    const __m512 s = _mm512_mul_ps(tree8x2(acc), vscale);
    _mm256_store_ps(sa + j0, lo8f(s));
    _mm256_store_ps(sb + j0, hi8f(s));
  }
  oa->m = tile_softmax(sa, n, softcap);
  ob->m = tile_softmax(sb, n, softcap);
  float la = 0, lb = 0; /* in position order, as the AVX2 tile, inside the first V pass */
  for (int d0 = 0; d0 < hd; d0 += 64) {
    const int nb = hd - d0 >= 64 ? 4 : (hd - d0) / 16;
    __m512 aa[4], ab[4];
    UNROLL for (int r = 0; r < 4; r++) aa[r] = ab[r] = _mm512_setzero_ps();
    if (nb == 4 && d0 == 0)
      for (int j = 0; j < n; j++) {
        const __m512 pa = _mm512_set1_ps(sa[j]), pb = _mm512_set1_ps(sb[j]);
        la += sa[j], lb += sb[j];
        UNROLL for (int r = 0; r < 4; r++) {
          const __m512 x = _mm512_loadu_ps(v[j] + 16 * r);
          aa[r] = _mm512_fmadd_ps(pa, x, aa[r]);
          ab[r] = _mm512_fmadd_ps(pb, x, ab[r]);
        }
      }
    else if (nb == 4)
      for (int j = 0; j < n; j++) {
        const __m512 pa = _mm512_set1_ps(sa[j]), pb = _mm512_set1_ps(sb[j]);
        UNROLL for (int r = 0; r < 4; r++) {
          const __m512 x = _mm512_loadu_ps(v[j] + d0 + 16 * r);
          aa[r] = _mm512_fmadd_ps(pa, x, aa[r]);
          ab[r] = _mm512_fmadd_ps(pb, x, ab[r]);
        }
      }
    else
      for (int j = 0; j < n; j++) {
        const __m512 pa = _mm512_set1_ps(sa[j]), pb = _mm512_set1_ps(sb[j]);
        if (d0 == 0) la += sa[j], lb += sb[j];
        for (int r = 0; r < nb; r++) {
          const __m512 x = _mm512_loadu_ps(v[j] + d0 + 16 * r);
          aa[r] = _mm512_fmadd_ps(pa, x, aa[r]);
          ab[r] = _mm512_fmadd_ps(pb, x, ab[r]);
        }
      }
    for (int r = 0; r < nb; r++) {
      _mm512_storeu_ps(oa->acc + d0 + 16 * r, aa[r]);
      _mm512_storeu_ps(ob->acc + d0 + 16 * r, ab[r]);
    }
  }
  oa->l = la;
  ob->l = lb;
}

void di_cpu_attn_tile_group_avx512(const float *const *q, int nq, const uint8_t *const *krow,
                                   const uint8_t *const *vrow, int n, int hd, di_kv_type t, float scale,
                                   float softcap, di_attn_partial *const *out) {
  if (nq < 2 || hd % 16 != 0 || hd > DI_ATTN_GROUP_MAX_HD) {
    di_cpu_attn_tile_group_avx2(q, nq, krow, vrow, n, hd, t, scale, softcap, out);
    return;
  }
  _Alignas(64) float kbuf[DI_ATTN_TILE * DI_ATTN_GROUP_MAX_HD], vbuf[DI_ATTN_TILE * DI_ATTN_GROUP_MAX_HD];
  const float *kp[DI_ATTN_TILE], *vp[DI_ATTN_TILE];
  tile_to_f32(krow, vrow, n, hd, t, kbuf, vbuf, kp, vp);
  int i = 0;
  for (; i + 2 <= nq; i += 2) tile2(q[i], q[i + 1], kp, vp, n, hd, scale, softcap, out[i], out[i + 1]);
  if (i < nq)
    di_cpu_attn_tile_avx2(q[i], (const uint8_t *const *)kp, (const uint8_t *const *)vp, n, hd, DI_KV_F32, scale,
                          softcap, out[i]);
}
