/* x86 pieces shared by the AVX2 and AVX-512 attention tiles (attn_avx2.c,
 * attn_avx512.c): the K/V element loads, the 8-row horizontal sum and the
 * softmax weights of a tile's scores, so both tiles give the same bits. */
#ifndef DI_CPU_ATTN_X86_H
#define DI_CPU_ATTN_X86_H

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#include "backend/cpu/attn.h"
#include "backend/cpu/softmax_exp.h"

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")

AI __m256 load_kv(const uint8_t *p, di_kv_dtype t) {
  if (t == DI_KV_DTYPE_F32) return _mm256_loadu_ps((const float *)p);
  __m128i h = _mm_loadu_si128((const __m128i *)p);
  if (t == DI_KV_DTYPE_F16) return _mm256_cvtph_ps(h);
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

/* A tile's K and V rows as f32 (exact conversions) for several queries:
 * kp[j]/vp[j] point at row j in kbuf/vbuf ([n][hd]), or at the cache rows
 * themselves when they are f32 already. The element type is a constant in
 * each loop (tile_rows_f32), not a test per 8 values. */
AI void tile_rows_f32(const uint8_t *const *krow, const uint8_t *const *vrow, int n, int hd, const di_kv_dtype t,
                      float *kbuf, float *vbuf, const float **kp, const float **vp) {
  bool v_is_k = true; /* MLA (v_in_k): V is read from the K rows, converted once */
  for (int j = 0; j < n; j++) v_is_k &= krow[j] == vrow[j];
  for (int j = 0; j < n; j++) {
    float *kd = kbuf + (size_t)j * hd, *vd = v_is_k ? kd : vbuf + (size_t)j * hd;
    if (j + 2 < n)
      for (int d = 0; d < hd; d += 32) _mm_prefetch((const char *)krow[j + 2] + (size_t)d * 2, _MM_HINT_T0);
    for (int d = 0; d < hd; d += 8) _mm256_storeu_ps(kd + d, load_kv(krow[j] + (size_t)d * 2, t));
    if (!v_is_k)
      for (int d = 0; d < hd; d += 8) _mm256_storeu_ps(vd + d, load_kv(vrow[j] + (size_t)d * 2, t));
    kp[j] = kd, vp[j] = vd;
  }
}
AI void tile_to_f32(const uint8_t *const *krow, const uint8_t *const *vrow, int n, int hd, di_kv_dtype t,
                    float *kbuf, float *vbuf, const float **kp, const float **vp) {
  if (t == DI_KV_DTYPE_F32)
    for (int j = 0; j < n; j++) kp[j] = (const float *)krow[j], vp[j] = (const float *)vrow[j];
  else if (t == DI_KV_DTYPE_F16) tile_rows_f32(krow, vrow, n, hd, DI_KV_DTYPE_F16, kbuf, vbuf, kp, vp);
  else tile_rows_f32(krow, vrow, n, hd, DI_KV_DTYPE_BF16, kbuf, vbuf, kp, vp);
}

/* Scores s[0..n) (s padded to a multiple of 8) -> softcapped, then exp(s - max)
 * in place; returns the max. */
AI float tile_softmax(float *s, int n, float softcap) {
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
  return mx;
}

#endif
