/* AVX2 + FMA + F16C inner loops of attention (compiled with -mavx2 -mfma -mf16c). */
#include <immintrin.h>

#include "backend/cpu/attn.h"

static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static inline __m256 load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 load_bf16(const uint16_t *p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

#define DOT(NAME, T, LOAD)                                          \
  static float NAME(const float *q, const void *k, int n) {         \
    const T *x = k;                                                 \
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();      \
    int i = 0;                                                      \
    for (; i + 16 <= n; i += 16) {                                  \
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), LOAD(x + i), a0);  \
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), LOAD(x + i + 8), a1); \
    }                                                               \
    for (; i < n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), LOAD(x + i), a0); \
    return hsum(_mm256_add_ps(a0, a1));                             \
  }

#define AXPY(NAME, T, LOAD)                                         \
  static void NAME(float *acc, float p, const void *v, int n) {     \
    const T *x = v;                                                 \
    __m256 pv = _mm256_set1_ps(p);                                  \
    for (int i = 0; i < n; i += 8)                                  \
      _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(pv, LOAD(x + i), _mm256_loadu_ps(acc + i))); \
  }

DOT(dot_f32, float, _mm256_loadu_ps)
DOT(dot_f16, uint16_t, load_f16)
DOT(dot_bf16, uint16_t, load_bf16)
AXPY(axpy_f32, float, _mm256_loadu_ps)
AXPY(axpy_f16, uint16_t, load_f16)
AXPY(axpy_bf16, uint16_t, load_bf16)

di_kv_dot_fn di_cpu_kv_dot_avx2(di_kv_type t) {
  return t == DI_KV_F32 ? dot_f32 : t == DI_KV_F16 ? dot_f16 : dot_bf16;
}

di_kv_axpy_fn di_cpu_kv_axpy_avx2(di_kv_type t) {
  return t == DI_KV_F32 ? axpy_f32 : t == DI_KV_F16 ? axpy_f16 : axpy_bf16;
}
