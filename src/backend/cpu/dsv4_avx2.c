/* dsv4_simd.h on AVX2 + FMA (compiled with -mavx2 -mfma): a V is two
 * registers (lanes 0-7, 8-15), tails by masked loads and stores. */
#include <immintrin.h>

#include "backend/cpu/softmax_exp.h"

typedef struct {
  __m256 lo, hi;
} V;
typedef struct {
  __m256d lo, hi;
} VD;
static inline __m256i m8(int left) {
  const int k = left < 0 ? 0 : left > 8 ? 8 : left;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline V v_make(__m256 lo, __m256 hi) { return (V){lo, hi}; }
static inline V V_ZERO(void) { return v_make(_mm256_setzero_ps(), _mm256_setzero_ps()); }
static inline V V_SET1(float x) { return v_make(_mm256_set1_ps(x), _mm256_set1_ps(x)); }
static inline V V_LOAD(const float *p, int left) {
  if (left >= 16) return v_make(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8));
  return v_make(_mm256_maskload_ps(p, m8(left)), _mm256_maskload_ps(p + 8, m8(left - 8)));
}
static inline void V_STORE(float *p, V v, int left) {
  if (left >= 16) {
    _mm256_storeu_ps(p, v.lo), _mm256_storeu_ps(p + 8, v.hi);
    return;
  }
  _mm256_maskstore_ps(p, m8(left), v.lo);
  _mm256_maskstore_ps(p + 8, m8(left - 8), v.hi);
}
static inline void V_STORE_ALL(float *a, V v) { _mm256_store_ps(a, v.lo), _mm256_store_ps(a + 8, v.hi); }
#define V_BIN(NAME, OP) \
  static inline V NAME(V a, V b) { return v_make(OP(a.lo, b.lo), OP(a.hi, b.hi)); }
V_BIN(V_ADD, _mm256_add_ps)
V_BIN(V_SUB, _mm256_sub_ps)
V_BIN(V_MUL, _mm256_mul_ps)
V_BIN(V_DIV, _mm256_div_ps)
V_BIN(V_MAX, _mm256_max_ps)
static inline V V_FMA(V a, V b, V c) { return v_make(_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)); }
static inline V V_EXP(V a) { return v_make(di_softmax_exp_avx2(a.lo), di_softmax_exp_avx2(a.hi)); }
static inline VD VD_ZERO(void) { return (VD){_mm256_setzero_pd(), _mm256_setzero_pd()}; }
static inline VD VD_LOAD_F32(const float *p, int left) {
  const __m256 v = left >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m8(left));
  return (VD){_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))};
}
static inline VD VD_FMA(VD a, VD b, VD c) { return (VD){_mm256_fmadd_pd(a.lo, b.lo, c.lo), _mm256_fmadd_pd(a.hi, b.hi, c.hi)}; }
static inline void VD_STORE_ALL(double *a, VD v) { _mm256_store_pd(a, v.lo), _mm256_store_pd(a + 4, v.hi); }
#define DSV4_FN(name) name##_avx2

#include "backend/cpu/dsv4_simd.h"
