/* AVX-512 activation quantizer for the 32-element formats (di_act_q8; built
 * with -mavx512f/bw/vl). The same values as di_cpu_quantize_act_q8 and the
 * AVX2 version, bit for bit (test_quant compares them): the per-block scalars
 * (d = amax / 127, id = 127 / amax, their fp16 roundings, s = fp16(d * sum))
 * are formed for 16 blocks per instruction, where the AVX2 version spent two
 * out-of-line scalar fp16 conversions and a division per block; F16C's
 * round-to-nearest-even conversion is the scalar one for every non-NaN value,
 * subnormals and overflow included. Q8K (K-quant weights) keeps the AVX2 one. */
#include <immintrin.h>
#include <stdint.h>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/quant.h"

#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

static inline __m512 fp16_round16(__m512 v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, RNE)); }

static void actq_q8(const float *x, void *yv, int64_t k) {
  di_act_q8 *y = yv;
  const int64_t nb = k / 32;
  for (int64_t b0 = 0; b0 < nb; b0 += 16, y += 16) {
    const int m = nb - b0 < 16 ? (int)(nb - b0) : 16;
    const float *xb = x + b0 * 32;
    _Alignas(64) float amax[16] = {0}, d[16], id[16];
    _Alignas(64) int32_t sum[16] = {0};
    for (int i = 0; i < m; i++) { /* a max of magnitudes: any order gives the scalar loop's value */
      const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(xb + 32 * i)), b = _mm512_abs_ps(_mm512_loadu_ps(xb + 32 * i + 16));
      amax[i] = _mm512_reduce_max_ps(_mm512_max_ps(a, b));
    }
    const __m512 am = _mm512_load_ps(amax);
    const __m512 dv = _mm512_div_ps(am, _mm512_set1_ps(127.0f));
    const __mmask16 nz = _mm512_cmp_ps_mask(am, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    _mm512_store_ps(id, _mm512_maskz_div_ps(nz, _mm512_set1_ps(127.0f), am));
    _mm512_store_ps(d, dv);
    for (int i = 0; i < m; i++) {
      const __m512 s = _mm512_set1_ps(id[i]);
      const __m512i q0 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 32 * i), s), RNE);
      const __m512i q1 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 32 * i + 16), s), RNE);
      _mm_storeu_si128((__m128i *)y[i].qs, _mm512_cvtsepi32_epi8(q0));
      _mm_storeu_si128((__m128i *)(y[i].qs + 16), _mm512_cvtsepi32_epi8(q1));
      sum[i] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    }
    _Alignas(64) float dr[16], sr[16];
    _mm512_store_ps(dr, fp16_round16(dv));
    _mm512_store_ps(sr, fp16_round16(_mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_load_si512(sum)))));
    for (int i = 0; i < m; i++) {
      y[i].d = dr[i];
      y[i].s = sr[i];
      y[i].sum = sum[i];
    }
  }
}

di_cpu_actq_fn di_cpu_actq_avx512(di_cpu_act_kind kind) { return kind == DI_ACT_Q8 ? actq_q8 : NULL; }
