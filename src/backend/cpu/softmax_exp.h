/* exp(x) for softmax weights (x <= 0, the score minus the running maximum),
 * as a polynomial that the scalar, AVX2 and NEON versions evaluate with the
 * same operations, so the three give the same bits (libm's expf is a call per
 * element and differs between C libraries). Within 1 ulp of exp for
 * -87.3 <= x <= 88; below that (and for NaN) the result is 0, above it
 * exp(88). Range reduction x = n ln2 + r with ln2 split in two (Cody-Waite),
 * then Cephes' degree-6 expf polynomial on |r| <= ln2/2, then the exponent n
 * added directly to the float's exponent bits. */
#ifndef DI_CPU_SOFTMAX_EXP_H
#define DI_CPU_SOFTMAX_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define DI_SEXP_LO (-87.33654f)
#define DI_SEXP_HI 88.0f
#define DI_SEXP_LOG2E 1.44269504088896341f
#define DI_SEXP_LN2_HI 0.693359375f
#define DI_SEXP_LN2_LO (-2.12194440e-4f)
#define DI_SEXP_C5 1.9875691500e-4f
#define DI_SEXP_C4 1.3981999507e-3f
#define DI_SEXP_C3 8.3334519073e-3f
#define DI_SEXP_C2 4.1665795894e-2f
#define DI_SEXP_C1 1.6666665459e-1f
#define DI_SEXP_C0 5.0000001201e-1f

static inline float di_softmax_exp(float x) {
  if (!(x >= DI_SEXP_LO)) return 0.0f;
  if (x > DI_SEXP_HI) x = DI_SEXP_HI;
  float n = nearbyintf(x * DI_SEXP_LOG2E);
  float r = fmaf(n, -DI_SEXP_LN2_HI, x);
  r = fmaf(n, -DI_SEXP_LN2_LO, r);
  float p = DI_SEXP_C5;
  p = fmaf(p, r, DI_SEXP_C4);
  p = fmaf(p, r, DI_SEXP_C3);
  p = fmaf(p, r, DI_SEXP_C2);
  p = fmaf(p, r, DI_SEXP_C1);
  p = fmaf(p, r, DI_SEXP_C0);
  float r2 = r * r;
  float y = fmaf(p, r2, r) + 1.0f;
  uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
static inline __m256 di_softmax_exp_avx2(__m256 x) {
  __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(DI_SEXP_LO), _CMP_GE_OQ);
  x = _mm256_min_ps(x, _mm256_set1_ps(DI_SEXP_HI));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(DI_SEXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-DI_SEXP_LN2_HI), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(-DI_SEXP_LN2_LO), r);
  __m256 p = _mm256_set1_ps(DI_SEXP_C5);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(DI_SEXP_C4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(DI_SEXP_C3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(DI_SEXP_C2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(DI_SEXP_C1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(DI_SEXP_C0));
  __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), keep);
}
#endif

#if defined(__AVX512F__)
/* The same, 16 lanes. */
static inline __m512 di_softmax_exp_avx512(__m512 x) {
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(DI_SEXP_LO), _CMP_GE_OQ);
  x = _mm512_min_ps(x, _mm512_set1_ps(DI_SEXP_HI));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(DI_SEXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-DI_SEXP_LN2_HI), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-DI_SEXP_LN2_LO), r);
  __m512 p = _mm512_set1_ps(DI_SEXP_C5);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(DI_SEXP_C4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(DI_SEXP_C3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(DI_SEXP_C2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(DI_SEXP_C1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(DI_SEXP_C0));
  __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(keep, y, _mm512_castsi512_ps(e));
}
#endif

#if defined(__aarch64__)
#include <arm_neon.h>
static inline float32x4_t di_softmax_exp_neon(float32x4_t x) {
  uint32x4_t keep = vcgeq_f32(x, vdupq_n_f32(DI_SEXP_LO));
  x = vminq_f32(x, vdupq_n_f32(DI_SEXP_HI));
  float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(DI_SEXP_LOG2E)));
  float32x4_t r = vfmaq_f32(x, n, vdupq_n_f32(-DI_SEXP_LN2_HI));
  r = vfmaq_f32(r, n, vdupq_n_f32(-DI_SEXP_LN2_LO));
  float32x4_t p = vdupq_n_f32(DI_SEXP_C5);
  p = vfmaq_f32(vdupq_n_f32(DI_SEXP_C4), p, r);
  p = vfmaq_f32(vdupq_n_f32(DI_SEXP_C3), p, r);
  p = vfmaq_f32(vdupq_n_f32(DI_SEXP_C2), p, r);
  p = vfmaq_f32(vdupq_n_f32(DI_SEXP_C1), p, r);
  p = vfmaq_f32(vdupq_n_f32(DI_SEXP_C0), p, r);
  float32x4_t y = vaddq_f32(vfmaq_f32(r, p, vmulq_f32(r, r)), vdupq_n_f32(1.0f));
  int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  float32x4_t out = vmulq_f32(y, vreinterpretq_f32_s32(e));
  return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(out), keep));
}
#endif

#endif
