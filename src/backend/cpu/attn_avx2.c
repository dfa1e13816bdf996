/* AVX2 + FMA + F16C inner loops of attention (compiled with -mavx2 -mfma -mf16c).
 *
 * The tile function is specialised per KV element type and keeps its
 * accumulators in registers: the K pass always runs 8 rows (rows past the
 * tile's end alias its first row and are discarded), the V pass runs 64
 * dimensions at a time. The sums are formed in the same order as before the
 * specialisation and as the NEON tile, so the results are the same bits; the
 * softmax weights come from softmax_exp.h (same bits as its scalar version). */
#include "backend/cpu/attn_x86.h"

AI void tile(const float *q, const uint8_t *const *krow, const uint8_t *const *vrow, int n, int hd,
             const di_kv_dtype t, float scale, float softcap, di_attn_partial *out) {
  const size_t es = t == DI_KV_DTYPE_F32 ? 4 : 2;
  _Alignas(32) float s[DI_ATTN_TILE + 8];
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int j0 = 0; j0 < n; j0 += 8) {
    const uint8_t *kp[8];
    UNROLL for (int r = 0; r < 8; r++) kp[r] = krow[j0 + r < n ? j0 + r : j0];
    __m256 acc[8];
    UNROLL for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 8) {
      __m256 qv = _mm256_loadu_ps(q + d);
      UNROLL for (int r = 0; r < 8; r++) acc[r] = _mm256_fmadd_ps(qv, load_kv(kp[r] + (size_t)d * es, t), acc[r]);
    }
    _mm256_store_ps(s + j0, _mm256_mul_ps(hsum8(acc), vscale));
  }
  const float mx = tile_softmax(s, n, softcap);
  /* l = s[0] + s[1] + ... in order (the scalar and NEON tiles' order), added
   * inside the first V pass, where its latency hides behind the FMAs. */
  float l = 0;
  int d0 = 0;
  for (; d0 + 64 <= hd; d0 += 64) {
    __m256 acc[8];
    UNROLL for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
    if (d0 == 0)
      for (int jj = 0; jj < n; jj++) {
        __m256 p = _mm256_set1_ps(s[jj]);
        l += s[jj];
        const uint8_t *v = vrow[jj];
        UNROLL for (int r = 0; r < 8; r++) acc[r] = _mm256_fmadd_ps(p, load_kv(v + (size_t)r * 8 * es, t), acc[r]);
      }
    else
      for (int jj = 0; jj < n; jj++) {
        __m256 p = _mm256_set1_ps(s[jj]);
        const uint8_t *v = vrow[jj] + (size_t)d0 * es;
        UNROLL for (int r = 0; r < 8; r++) acc[r] = _mm256_fmadd_ps(p, load_kv(v + (size_t)r * 8 * es, t), acc[r]);
      }
    UNROLL for (int r = 0; r < 8; r++) _mm256_storeu_ps(out->acc + d0 + r * 8, acc[r]);
  }
  if (hd < 64)
    for (int jj = 0; jj < n; jj++) l += s[jj];
  for (; d0 < hd; d0 += 8) { /* head_dim % 64 != 0: the last dimensions 8 at a time */
    __m256 acc = _mm256_setzero_ps();
    for (int jj = 0; jj < n; jj++) acc = _mm256_fmadd_ps(_mm256_set1_ps(s[jj]), load_kv(vrow[jj] + (size_t)d0 * es, t), acc);
    _mm256_storeu_ps(out->acc + d0, acc);
  }
  out->m = mx;
  out->l = l;
}

void di_cpu_attn_tile_avx2(const float *q, const uint8_t *const *krow, const uint8_t *const *vrow, int n, int hd,
                           di_kv_dtype t, float scale, float softcap, di_attn_partial *out) {
  switch (t) {
  case DI_KV_DTYPE_F16: tile(q, krow, vrow, n, hd, DI_KV_DTYPE_F16, scale, softcap, out); break;
  case DI_KV_DTYPE_F32: tile(q, krow, vrow, n, hd, DI_KV_DTYPE_F32, scale, softcap, out); break;
  default: tile(q, krow, vrow, n, hd, DI_KV_DTYPE_BF16, scale, softcap, out); break;
  }
}

/* nq queries on the same K/V rows, query i over the first qn[i] of the n rows
 * (qn NULL: all n): the tile's K and V are converted to f32 once into
 * scratch, then each query runs the F32 tile on them. Conversion is exact and
 * the F32 tile adds in the same order, so every query's result has the bits
 * of its own di_cpu_attn_tile_avx2 call. */
void di_cpu_attn_tile_group_avx2(const float *const *q, int nq, const uint8_t *const *krow,
                                 const uint8_t *const *vrow, int n, const int *qn, int hd, di_kv_dtype t, float scale,
                                 float softcap, di_attn_partial *const *out) {
  if (t == DI_KV_DTYPE_F32 || nq == 1 || hd > DI_ATTN_GROUP_MAX_HD) {
    for (int i = 0; i < nq; i++) di_cpu_attn_tile_avx2(q[i], krow, vrow, qn ? qn[i] : n, hd, t, scale, softcap, out[i]);
    return;
  }
  _Alignas(32) float kbuf[DI_ATTN_TILE * DI_ATTN_GROUP_MAX_HD], vbuf[DI_ATTN_TILE * DI_ATTN_GROUP_MAX_HD];
  const float *kp[DI_ATTN_TILE], *vp[DI_ATTN_TILE];
  tile_to_f32(krow, vrow, n, hd, t, kbuf, vbuf, kp, vp);
  for (int i = 0; i < nq; i++)
    tile(q[i], (const uint8_t *const *)kp, (const uint8_t *const *)vp, qn ? qn[i] : n, hd, DI_KV_DTYPE_F32, scale, softcap,
         out[i]);
}

/* di_cpu_attn_merge 8 dimensions at a time (hd a multiple of 8): the same
 * multiplies and adds per dimension, unfused, in the same order, so the same
 * bits; the scalar loop kept out[] in memory across the partials. */
void di_cpu_attn_merge_avx2(const di_attn_partial *const *parts, int n, int hd, float *out) {
  float mx = -INFINITY;
  for (int i = 0; i < n; i++)
    if (parts[i]->m > mx) mx = parts[i]->m;
  float w[DI_ATTN_MAX_TILES], l = 0;
  for (int i = 0; i < n; i++) {
    w[i] = di_softmax_exp(parts[i]->m - mx);
    l += parts[i]->l * w[i];
  }
  const __m256 inv = _mm256_set1_ps(1.0f / l);
  for (int d = 0; d < hd; d += 8) {
    __m256 o = _mm256_setzero_ps();
    for (int i = 0; i < n; i++) o = _mm256_add_ps(o, _mm256_mul_ps(_mm256_loadu_ps(parts[i]->acc + d), _mm256_set1_ps(w[i])));
    _mm256_storeu_ps(out + d, _mm256_mul_ps(o, inv));
  }
}

void di_cpu_softmax_exp_avx2(const float *x, float *y, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, di_softmax_exp_avx2(_mm256_loadu_ps(x + i)));
  for (; i < n; i++) y[i] = di_softmax_exp(x[i]);
}
