/* AVX2 + FMA + F16C inner loops of attention (compiled with -mavx2 -mfma -mf16c).
 *
 * The tile function is specialised per KV element type and keeps its
 * accumulators in registers: the K pass always runs 8 rows (rows past the
 * tile's end alias its first row and are discarded), the V pass runs 64
 * dimensions at a time. The sums are formed in the same order as before the
 * specialisation and as the NEON tile, so the results are the same bits; the
 * softmax weights come from softmax_exp.h (same bits as its scalar version). */
#include <immintrin.h>
#include <math.h>

#include "backend/cpu/attn.h"
#include "backend/cpu/softmax_exp.h"

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")

AI __m256 load_kv(const uint8_t *p, di_kv_type t) {
  if (t == DI_KV_F32) return _mm256_loadu_ps((const float *)p);
  __m128i h = _mm_loadu_si128((const __m128i *)p);
  if (t == DI_KV_F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Sums each of 8 vectors into one lane of the result (lane i = sum of v[i]). */
AI __m256 hsum8(const __m256 v[8]) {
  __m256 a = _mm256_hadd_ps(v[0], v[1]), b = _mm256_hadd_ps(v[2], v[3]);
  __m256 c = _mm256_hadd_ps(v[4], v[5]), d = _mm256_hadd_ps(v[6], v[7]);
  __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
  /* ab lanes: [s0 s1 s2 s3 | s0' s1' s2' s3'] (low/high halves), same for cd */
  __m256 lo = _mm256_permute2f128_ps(ab, cd, 0x20), hi = _mm256_permute2f128_ps(ab, cd, 0x31);
  return _mm256_add_ps(lo, hi);
}

AI void tile(const float *q, const uint8_t *const *krow, const uint8_t *const *vrow, int n, int hd,
             const di_kv_type t, float scale, float softcap, di_attn_partial *out) {
  const size_t es = t == DI_KV_F32 ? 4 : 2;
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
  if (softcap > 0)
    for (int j = 0; j < n; j++) s[j] = softcap * tanhf(s[j] / softcap);
  /* The max is exact in any order (a max of 0 may differ in its sign, which
   * no exp(s - m) below or in the merge can see); 8 lanes, not a serial
   * vmaxss chain, which cost a quarter of the tile. */
  __m256 vm = _mm256_set1_ps(-INFINITY);
  int j = 0;
  for (; j + 8 <= n; j += 8) vm = _mm256_max_ps(vm, _mm256_load_ps(s + j));
  _Alignas(32) float ml[8];
  _mm256_store_ps(ml, vm);
  float mx = -INFINITY;
  for (int i = 0; i < 8; i++) mx = ml[i] > mx ? ml[i] : mx;
  for (; j < n; j++) mx = s[j] > mx ? s[j] : mx;
  const __m256 vmx = _mm256_set1_ps(mx);
  for (int j0 = 0; j0 < n; j0 += 8) /* s[n..] past the tile are finite leftovers, never read below */
    _mm256_store_ps(s + j0, di_softmax_exp_avx2(_mm256_sub_ps(_mm256_load_ps(s + j0), vmx)));
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
                           di_kv_type t, float scale, float softcap, di_attn_partial *out) {
  switch (t) {
  case DI_KV_F16: tile(q, krow, vrow, n, hd, DI_KV_F16, scale, softcap, out); break;
  case DI_KV_F32: tile(q, krow, vrow, n, hd, DI_KV_F32, scale, softcap, out); break;
  default: tile(q, krow, vrow, n, hd, DI_KV_BF16, scale, softcap, out); break;
  }
}

/* nq queries on the same K/V rows: the tile's K and V are converted to f32
 * once into scratch, then each query runs the F32 tile on them. Conversion is
 * exact and the F32 tile adds in the same order, so every query's result has
 * the bits of its own di_cpu_attn_tile_avx2 call. */
void di_cpu_attn_tile_group_avx2(const float *const *q, int nq, const uint8_t *const *krow,
                                 const uint8_t *const *vrow, int n, int hd, di_kv_type t, float scale, float softcap,
                                 di_attn_partial *const *out) {
  if (t == DI_KV_F32 || nq == 1 || hd > DI_ATTN_GROUP_MAX_HD) {
    for (int i = 0; i < nq; i++) di_cpu_attn_tile_avx2(q[i], krow, vrow, n, hd, t, scale, softcap, out[i]);
    return;
  }
  _Alignas(32) float kbuf[DI_ATTN_TILE * DI_ATTN_GROUP_MAX_HD], vbuf[DI_ATTN_TILE * DI_ATTN_GROUP_MAX_HD];
  const uint8_t *kp[DI_ATTN_TILE], *vp[DI_ATTN_TILE];
  for (int j = 0; j < n; j++) {
    float *kd = kbuf + (size_t)j * hd, *vd = vbuf + (size_t)j * hd;
    for (int d = 0; d < hd; d += 8) {
      _mm256_store_ps(kd + d, load_kv(krow[j] + (size_t)d * 2, t));
      _mm256_store_ps(vd + d, load_kv(vrow[j] + (size_t)d * 2, t));
    }
    kp[j] = (const uint8_t *)kd;
    vp[j] = (const uint8_t *)vd;
  }
  for (int i = 0; i < nq; i++) tile(q[i], kp, vp, n, hd, DI_KV_F32, scale, softcap, out[i]);
}

void di_cpu_softmax_exp_avx2(const float *x, float *y, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, di_softmax_exp_avx2(_mm256_loadu_ps(x + i)));
  for (; i < n; i++) y[i] = di_softmax_exp(x[i]);
}
