/* AVX-512 activation quantizer for the 32-element formats (di_act_q8; built
 * with -mavx512f/bw/vl). The same values as di_cpu_quantize_act_q8 and the
 * AVX2 version, bit for bit (test_quant compares them): the per-block scalars
 * (d = amax / 127, id = 127 / amax, their fp16 roundings, s = fp16(d * sum))
 * are formed for 16 blocks per instruction, where the AVX2 version spent two
 * out-of-line scalar fp16 conversions and a division per block; F16C's
 * round-to-nearest-even conversion is the scalar one for every non-NaN value,
 * subnormals and overflow included. Q8K (K-quant weights) keeps the AVX2 one. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/quant.h"

#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define UNROLL _Pragma("GCC unroll 16")

static inline __m512 fp16_round16(__m512 v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, RNE)); }

/* Block b's reduction goes in at v[SIGMA[b]] so that lane b of tree16's result
 * is block b's (the tree leaves lanes in this order; it is its own inverse). */
static const int SIGMA[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};

/* Lane i of the result: the 16 lanes of v[SIGMA[i]] reduced by max (f32) or
 * add (int32), with 15 vertical operations and 30 shuffles where 16
 * horizontal reductions took ~140 instructions. Max is exact in any order and
 * the int32 sums are exact, so the bits are the scalar loop's. */
static inline __m512 tree_op(__m512 a, __m512 b, bool add) {
  return add ? _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)))
             : _mm512_max_ps(a, b);
}
static inline __m512 tree16(__m512 *v, bool add) {
  UNROLL for (int k = 0; k < 8; k++) /* halves: block k, block k + 8 */
    v[k] = tree_op(_mm512_shuffle_f32x4(v[k], v[k + 8], 0x44), _mm512_shuffle_f32x4(v[k], v[k + 8], 0xee), add);
  UNROLL for (int k = 0; k < 4; k++) /* quarters: k, k + 8, k + 4, k + 12 */
    v[k] = tree_op(_mm512_shuffle_f32x4(v[k], v[k + 4], 0x88), _mm512_shuffle_f32x4(v[k], v[k + 4], 0xdd), add);
  UNROLL for (int k = 0; k < 2; k++)
    v[k] = tree_op(_mm512_shuffle_ps(v[k], v[k + 2], 0x44), _mm512_shuffle_ps(v[k], v[k + 2], 0xee), add);
  return tree_op(_mm512_shuffle_ps(v[0], v[1], 0x88), _mm512_shuffle_ps(v[0], v[1], 0xdd), add);
}

/* Two blocks' 4 x 16 int32 quants (each within -127..127) as their 64 bytes in
 * order: two saturating packs leave each 128-bit lane l holding the 4-element
 * groups l and 4 + l of both blocks, one dword permute puts them in place. */
static inline __m512i pack_pair(__m512i a0, __m512i a1, __m512i b0, __m512i b1) {
  const __m512i p = _mm512_packs_epi16(_mm512_packs_epi32(a0, a1), _mm512_packs_epi32(b0, b1));
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), p);
}

static void actq_q8(const float *x, void *yv, int64_t k) {
  di_act_q8 *y = yv;
  const int64_t nb = k / 32;
  for (int64_t b0 = 0; b0 < nb; b0 += 16, y += 16) {
    const int m = nb - b0 < 16 ? (int)(nb - b0) : 16;
    const float *xb = x + b0 * 32;
    __m512 v[16];
    UNROLL for (int i = 0; i < 16; i++) {
      const __m512 a = i < m ? _mm512_abs_ps(_mm512_loadu_ps(xb + 32 * i)) : _mm512_setzero_ps();
      const __m512 b = i < m ? _mm512_abs_ps(_mm512_loadu_ps(xb + 32 * i + 16)) : _mm512_setzero_ps();
      v[SIGMA[i]] = _mm512_max_ps(a, b);
    }
    const __m512 am = tree16(v, false);
    const __m512 dv = _mm512_div_ps(am, _mm512_set1_ps(127.0f));
    const __mmask16 nz = _mm512_cmp_ps_mask(am, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    _Alignas(64) float id[16];
    _mm512_store_ps(id, _mm512_maskz_div_ps(nz, _mm512_set1_ps(127.0f), am));
    UNROLL for (int i = 0; i < 16; i += 2) {
      __m512i q[4];
      UNROLL for (int h = 0; h < 4; h++) {
        const int bi = i + h / 2;
        q[h] = bi < m ? _mm512_cvt_roundps_epi32(
                            _mm512_mul_ps(_mm512_loadu_ps(xb + 32 * bi + 16 * (h % 2)), _mm512_set1_ps(id[bi])), RNE)
                      : _mm512_setzero_si512();
      }
      v[SIGMA[i]] = _mm512_castsi512_ps(_mm512_add_epi32(q[0], q[1]));
      v[SIGMA[i + 1]] = _mm512_castsi512_ps(_mm512_add_epi32(q[2], q[3]));
      if (i < m) {
        const __m512i p = pack_pair(q[0], q[1], q[2], q[3]);
        _mm256_storeu_si256((__m256i *)y[i].qs, _mm512_castsi512_si256(p));
        if (i + 1 < m) _mm256_storeu_si256((__m256i *)y[i + 1].qs, _mm512_extracti64x4_epi64(p, 1));
      }
    }
    _Alignas(64) int32_t sum[16];
    _Alignas(64) float dr[16], sr[16];
    const __m512i sv = _mm512_castps_si512(tree16(v, true));
    _mm512_store_si512(sum, sv);
    _mm512_store_ps(dr, fp16_round16(dv));
    _mm512_store_ps(sr, fp16_round16(_mm512_mul_ps(dv, _mm512_cvtepi32_ps(sv))));
    for (int i = 0; i < m; i++) {
      y[i].d = dr[i];
      y[i].s = sr[i];
      y[i].sum = sum[i];
    }
  }
}

di_cpu_actq_fn di_cpu_actq_avx512(di_cpu_act_kind kind) { return kind == DI_ACT_Q8 ? actq_q8 : NULL; }
