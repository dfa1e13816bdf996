/* AVX2 + FMA + F16C inner loops of attention (compiled with -mavx2 -mfma -mf16c). */
#include <immintrin.h>
#include <math.h>

#include "backend/cpu/attn.h"

static inline __m256 load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 load_bf16(const uint16_t *p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* ---- a whole tile at once: scores for 8 positions per pass, accumulators in registers ---- */

static inline __m256 load_kv(const void *p, di_kv_type t) {
  return t == DI_KV_F32 ? _mm256_loadu_ps(p) : t == DI_KV_F16 ? load_f16(p) : load_bf16(p);
}

/* Sums each of 8 vectors into one lane of the result (lane i = sum of v[i]). */
static inline __m256 hsum8(__m256 v[8]) {
  __m256 a = _mm256_hadd_ps(v[0], v[1]), b = _mm256_hadd_ps(v[2], v[3]);
  __m256 c = _mm256_hadd_ps(v[4], v[5]), d = _mm256_hadd_ps(v[6], v[7]);
  __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
  /* ab lanes: [s0 s1 s2 s3 | s0' s1' s2' s3'] (low/high halves), same for cd */
  __m256 lo = _mm256_permute2f128_ps(ab, cd, 0x20), hi = _mm256_permute2f128_ps(ab, cd, 0x31);
  return _mm256_add_ps(lo, hi);
}

void di_cpu_attn_tile_avx2(const float *q, const uint8_t *const *krow, const uint8_t *const *vrow, int n, int hd,
                           di_kv_type t, float scale, float softcap, di_attn_partial *out) {
  const size_t es = t == DI_KV_F32 ? 4 : 2;
  float s[DI_ATTN_TILE];
  for (int j0 = 0; j0 < n; j0 += 8) {
    __m256 acc[8];
    int m = n - j0 < 8 ? n - j0 : 8;
    for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 8) {
      __m256 qv = _mm256_loadu_ps(q + d);
      for (int r = 0; r < m; r++) acc[r] = _mm256_fmadd_ps(qv, load_kv(krow[j0 + r] + (size_t)d * es, t), acc[r]);
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, _mm256_mul_ps(hsum8(acc), _mm256_set1_ps(scale)));
    for (int r = 0; r < m; r++) s[j0 + r] = softcap > 0 ? softcap * tanhf(tmp[r] / softcap) : tmp[r];
  }
  float mx = -INFINITY;
  for (int j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
  float l = 0;
  for (int j = 0; j < n; j++) {
    s[j] = expf(s[j] - mx);
    l += s[j];
  }
  for (int d0 = 0; d0 < hd; d0 += 64) {
    int w = hd - d0 < 64 ? (hd - d0) / 8 : 8;
    __m256 acc[8];
    for (int r = 0; r < w; r++) acc[r] = _mm256_setzero_ps();
    for (int j = 0; j < n; j++) {
      __m256 p = _mm256_set1_ps(s[j]);
      const uint8_t *v = vrow[j] + (size_t)d0 * es;
      for (int r = 0; r < w; r++) acc[r] = _mm256_fmadd_ps(p, load_kv(v + (size_t)r * 8 * es, t), acc[r]);
    }
    for (int r = 0; r < w; r++) _mm256_storeu_ps(out->acc + d0 + r * 8, acc[r]);
  }
  out->m = mx;
  out->l = l;
}
