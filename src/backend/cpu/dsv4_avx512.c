/* dsv4_simd.h on AVX-512 (compiled with -mavx512f): one register per V, tails
 * by masked loads and stores. */
#include <immintrin.h>

#include "backend/cpu/softmax_exp.h"

typedef __m512 V;
typedef __m512d VD;
static inline __mmask16 m16(int left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOAD(p, left) _mm512_maskz_loadu_ps(m16(left), (p))
#define V_STORE(p, v, left) _mm512_mask_storeu_ps((p), m16(left), (v))
#define V_STORE_ALL(a, v) _mm512_store_ps((a), (v))
#define V_ADD _mm512_add_ps
#define V_SUB _mm512_sub_ps
#define V_MUL _mm512_mul_ps
#define V_DIV _mm512_div_ps
#define V_FMA _mm512_fmadd_ps
#define V_MAX _mm512_max_ps
#define V_EXP di_softmax_exp_avx512
#define VD_ZERO() _mm512_setzero_pd()
#define VD_LOAD_F32(p, left) _mm512_cvtps_pd(_mm256_maskz_loadu_ps((__mmask8)(m16(left) & 0xff), (p)))
#define VD_FMA _mm512_fmadd_pd
#define VD_STORE_ALL(a, v) _mm512_store_pd((a), (v))
#define DSV4_FN(name) name##_avx512

#include "backend/cpu/dsv4_simd.h"
