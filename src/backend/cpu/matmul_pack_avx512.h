/* AVX-512 pieces shared by the packed VNNI kernels (matmul_pack_vnni.h) and
 * the AMX path (matmul_pack_amx.c): the unpacking of two groups' words side by
 * side into one zmm (group g low, g+1 high), the fifth bits of Q5_0 / Q5_K,
 * Q6_K's 6-bit quants, and q32_finish16, the float finish of a group pair.
 * Both users end in the same integers (exact), so this finish is what keeps
 * their outputs' bits the same as the AVX2 and scalar kernels'.
 *
 * The including file includes <immintrin.h> or, for the emulation test,
 * SIMDe's AVX-512 first. */
#ifndef DI_CPU_MATMUL_PACK_AVX512_H
#define DI_CPU_MATMUL_PACK_AVX512_H

#include "backend/cpu/matmul_pack_x86.h"
#include "backend/cpu/x86_512.h"

/* Q5_0's fifth bits: each int32 lane of the permuted high-bit word rotated
 * left by its count (di_pk_q5_rot), then bit 4 of every byte. */
AI __m512i q5_fifth(__m512i qh, __m512i rot) {
  return _mm512_and_si512(_mm512_rolv_epi32(qh, rot), _mm512_set1_epi8(0x10));
}

/* Q5_K: sub-block s's fifth bits of a quant word pair's bytes from the qh
 * word pair (the same elements), moved to bit 4; as the AVX2 q5k_fifth. */
AI __m512i q5k_fifth(__m512i qh, int s) {
  /* Shift counts in a register: SIMDe (the emulated test build) wants
   * immediates to be literal constants, which s is only after inlining. */
  const __m512i v = s <= 4 ? _mm512_sll_epi16(qh, _mm_cvtsi32_si128(4 - s))
                           : _mm512_srl_epi16(qh, _mm_cvtsi32_si128(s - 4));
  return _mm512_and_si512(v, _mm512_set1_epi8(0x10));
}

/* Chunk r's 6-bit quants (0..63) from its ql bytes l and qh bytes hb, byte for byte. */
AI __m512i q6k_quants(__m512i l, __m512i hb, int r) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x30);
  l = r < 2 ? _mm512_and_si512(l, m4) : _mm512_and_si512(_mm512_srli_epi16(l, 4), m4);
  hb = r == 0 ? _mm512_slli_epi16(hb, 4) : r == 1 ? _mm512_slli_epi16(hb, 2) : r == 2 ? hb : _mm512_srli_epi16(hb, 2);
  return _mm512_or_si512(l, _mm512_and_si512(hb, m2));
}

AI __m512i join_words(const uint8_t *p0, const uint8_t *p1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)),
                            _mm256_loadu_si256((const __m256i *)p1), 1);
}
/* The 8 fp16 values at p0 (then p1) as 16 floats; two F16C conversions, as the
 * emulation has no 512-bit one and this runs once per block for all rows. */
AI __m512 join_ph(const uint8_t *p0, const uint8_t *p1) {
  return join_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p0)), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p1)));
}
AI __m512 cvt16(__m512i v) {
#ifdef DI_AVX512_EMULATE /* SIMDe 0.7.4 has no _mm512_cvtepi32_ps */
  return join_ps(_mm256_cvtepi32_ps(_mm512_castsi512_si256(v)), _mm256_cvtepi32_ps(_mm512_extracti64x4_epi64(v, 1)));
#else
  return _mm512_cvtepi32_ps(v);
#endif
}

/* Q5_0's nibble word w of groups g (low half) and g+1 (high half) with their
 * fifth bits: quants 0..31 (the pair kernel's and the AMX staging's). */
AI void q5_pair_word(const uint8_t *q0, const uint8_t *q1, __m512i qh, int w, __m512i *lo, __m512i *hi) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), v = join_words(q0 + 32 * (1 + w), q1 + 32 * (1 + w));
  *lo = _mm512_or_si512(_mm512_and_si512(v, m4), q5_fifth(qh, _mm512_set1_epi32(di_pk_q5_rot(w, 0))));
  *hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), q5_fifth(qh, _mm512_set1_epi32(di_pk_q5_rot(w, 1))));
}

/* q32_finish, 16 lanes (groups g, g+1) at a time, for MT rows: row i's
 * activation scales are d[i * stride], s[i * stride] (stride in floats; the
 * pair kernel's rows a row apart, the AMX path's 16 rows side by side), its
 * integer sums isum(i). */
AI void q32_finish16(di_dtype t, int MT, const uint8_t *gp0, const uint8_t *gp1, const float *d, const float *s,
                     size_t stride, const __m512i *isum, __m512 *acc) {
  __m512 dw = t == DI_MXFP4 ? join_ps(e8m0_half8(gp0), e8m0_half8(gp1)) : join_ph(gp0, gp1);
  _Pragma("GCC unroll 16") for (int i = 0; i < MT; i++) {
    __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(d[i * stride]));
    acc[i] = _mm512_fmadd_ps(cvt16(isum[i]), dd, acc[i]);
  }
  if (di_pk_min(t)) {
    __m512 mw = join_ph(gp0 + DI_PK_M, gp1 + DI_PK_M);
    _Pragma("GCC unroll 16") for (int i = 0; i < MT; i++)
      acc[i] = _mm512_fmadd_ps(mw, _mm512_set1_ps(s[i * stride]), acc[i]);
  }
}

#endif
