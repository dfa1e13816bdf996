/* The x86 parts shared by the packed-layout kernels of matmul_pack_avx2.c and
 * matmul_pack_vnni.h: the float chains, the scale decoders and each block's
 * finish. The two files differ only in how they form the int32 sums of a block
 * (AVX2: maddubs + madd; AVX-512: vpdpbusd on two words at once); the sums are
 * exact integers, so both end in the same lanes with the same values, and from
 * there on the instructions below are the only ones that touch an output. That
 * is what keeps Y bit-identical across ISA levels (and to the scalar reference,
 * di_cpu_q32_block_step / di_cpu_qk_block_step; built with -ffp-contract=off).
 *
 * A lane c of every 8-lane vector here belongs to output column 8g + c. */
#ifndef DI_CPU_MATMUL_PACK_X86_H
#define DI_CPU_MATMUL_PACK_X86_H

#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/matmul_tiles.h" /* AI, UNROLL, MT_MAX */

/* Per activation row: the output's chain and the K-quant mins' chain (matmul_pack_tiles.h). */
typedef struct { __m256 s, m; } pk_acc;
AI void pk_acc_zero(pk_acc *acc) { acc->s = acc->m = _mm256_setzero_ps(); }
/* K-quants: s + sm as the scalar chain (Q6_K's sm stays +0). */
AI void pk_store(di_dtype t, const pk_acc *acc, float *y) {
  _mm256_storeu_ps(y, di_pk_kquant(t) ? _mm256_add_ps(acc->s, acc->m) : acc->s);
}

/* MXFP4's 8 E8M0 bytes as 2^(e - 128), bit for bit di_e8m0_half. */
AI __m256 e8m0_half8(const uint8_t *p) {
  const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)), one = _mm256_set1_epi32(1);
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, one), 23);
  const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e); /* e < 2 */
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
}
/* The 8 rows' block scales d_w of a 32-element group-block. */
AI __m256 pk_dw(di_dtype t, const uint8_t *gp) {
  return t == DI_MXFP4 ? e8m0_half8(gp) : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)gp));
}

/* Q4_0/Q4_1/Q8_0/MXFP4, after the integer part: isum[i] holds sum(q_w * a) + bias *
 * sum(a) per column (the bias of the form the kernel fed the quants in), then
 * acc = fma(cvt(isum), d_w * d_a, acc); acc = fma(m_w, s_a, acc) (Q4_1), lane by lane. */
AI void q32_finish(di_dtype t, int MT, const uint8_t *gp, const di_act_q8 *const *a, __m256i *isum, int bias,
                   pk_acc *acc) {
  __m256 dw = pk_dw(t, gp);
  UNROLL for (int i = 0; i < MT; i++) {
    __m256i is = bias ? _mm256_sub_epi32(isum[i], _mm256_set1_epi32(bias * a[i]->sum)) : isum[i];
    __m256 dd = _mm256_mul_ps(dw, _mm256_broadcast_ss(&a[i]->d));
    acc[i].s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), dd, acc[i].s);
  }
  if (di_pk_min(t)) {
    __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gp + DI_PK_M)));
    UNROLL for (int i = 0; i < MT; i++) acc[i].s = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(&a[i]->s), acc[i].s);
  }
}

/* pshufb control giving int16 lanes 2c, 2c+1 (column c) the scale bytes 4c+r and
 * 4c+r2 of a scale word: zero-extended, or (HI) in the high byte, for an
 * arithmetic shift to sign-extend. */
AI __m256i sc_ctl(int r, int r2, bool HI) {
  int v[4];
  for (int c = 0; c < 4; c++) {
    uint32_t b0 = (uint32_t)(4 * c + r), b1 = (uint32_t)(4 * c + r2);
    v[c] = (int)(HI ? 0x80u | b0 << 8 | 0x80u << 16 | b1 << 24 : b0 | 0x80u << 8 | b1 << 16 | 0x80u << 24);
  }
  return _mm256_setr_epi32(v[0], v[1], v[2], v[3], v[0], v[1], v[2], v[3]);
}
/* Q6_K's int8 scales r, r2 of each column's scale word, sign-extended to int16. */
AI __m256i q6k_scales(const uint8_t *word, int r, int r2) {
  return _mm256_srai_epi16(_mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)word), sc_ctl(r, r2, true)), 8);
}

/* Q4_K's 6-bit scales and mins of the 8 columns, decoded from the 3 scale words:
 * byte 4c + r of sc[0] (sc[1]) is column c's scale of sub-block r (4 + r); the
 * same for the mins in mn[]. */
typedef struct { __m256i sc[2], mn[2]; } q4k_sc;
AI q4k_sc q4k_decode(const uint8_t *gp) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), m6 = _mm256_set1_epi8(0x3f), m2h = _mm256_set1_epi8(0x30);
  __m256i A = _mm256_loadu_si256((const __m256i *)(gp + DI_PK_QK_SC)),
          B = _mm256_loadu_si256((const __m256i *)(gp + DI_PK_QK_SC + DI_PK_WORD)),
          C = _mm256_loadu_si256((const __m256i *)(gp + DI_PK_QK_SC + 2 * DI_PK_WORD));
  q4k_sc r;
  r.sc[0] = _mm256_and_si256(A, m6);
  r.mn[0] = _mm256_and_si256(B, m6);
  r.sc[1] = _mm256_or_si256(_mm256_and_si256(C, m4), _mm256_and_si256(_mm256_srli_epi16(A, 2), m2h));
  r.mn[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(C, 4), m4), _mm256_and_si256(_mm256_srli_epi16(B, 2), m2h));
  return r;
}
/* Sub-block s's scale of each column as int16 in lanes 2c (2c+1 zero), for a madd. */
AI __m256i q4k_scale(const q4k_sc *d, int s) { return _mm256_shuffle_epi8(d->sc[s / 4], sc_ctl(s % 4, s % 4, false)); }

/* One Q4_K super-block's finish, in the order of di_cpu_qk_block_step: isum[i] =
 * sum_s sc_s * dot_s (exact), imin = sum_s m_s * (sum of x over s), exact in
 * int32 lanes; s = fma(isum, d_w * d_a, s), m = fma(imin, dmin_w * -d_a, m). */
AI void q4k_finish(int MT, const uint8_t *gp, const di_act_q8k *const *a, const q4k_sc *d, const __m256i *isum,
                   pk_acc *acc) {
  __m256i mn[4] = {_mm256_shuffle_epi8(d->mn[0], sc_ctl(0, 1, false)), _mm256_shuffle_epi8(d->mn[0], sc_ctl(2, 3, false)),
                   _mm256_shuffle_epi8(d->mn[1], sc_ctl(0, 1, false)), _mm256_shuffle_epi8(d->mn[1], sc_ctl(2, 3, false))};
  __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)gp));
  __m256 dmw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gp + DI_PK_M)));
  UNROLL for (int i = 0; i < MT; i++) {
    /* bsums of 16 -> of 32 (<= 4064, int16), paired per int32 for madd against (m_s, m_s+1) */
    __m256i bs = _mm256_loadu_si256((const __m256i *)a[i]->bsums);
    __m128i b32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    __m256i imin = _mm256_madd_epi16(mn[0], _mm256_broadcastd_epi32(b32));
    imin = _mm256_add_epi32(imin, _mm256_madd_epi16(mn[1], _mm256_broadcastd_epi32(_mm_shuffle_epi32(b32, 0x55))));
    imin = _mm256_add_epi32(imin, _mm256_madd_epi16(mn[2], _mm256_broadcastd_epi32(_mm_shuffle_epi32(b32, 0xaa))));
    imin = _mm256_add_epi32(imin, _mm256_madd_epi16(mn[3], _mm256_broadcastd_epi32(_mm_shuffle_epi32(b32, 0xff))));
    __m256 da = _mm256_broadcast_ss(&a[i]->d);
    acc[i].s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_mul_ps(dw, da), acc[i].s);
    acc[i].m = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(dmw, _mm256_xor_ps(da, _mm256_set1_ps(-0.0f))),
                               acc[i].m);
  }
}

/* One Q6_K super-block's finish, in the order of di_cpu_qk_block_step: isum[i]
 * = sum_g sc_g * dot_g(q) on the 0..63 quants; the -32 offset comes off as
 * 32 * sum_g sc_g * bsums_g (a madd per group pair), then s = fma(isum, d_w * d_a, s). */
AI void q6k_finish(int MT, const uint8_t *gp, const di_act_q8k *const *a, __m256i *isum, pk_acc *acc) {
  const uint8_t *q = gp + DI_PK_Q6K_WORDS;
  __m256i corr[8]; /* MT <= 8 (matmul_pack_tiles.h, PK_MT_CAP) */
  UNROLL for (int i = 0; i < MT; i++) corr[i] = _mm256_setzero_si256();
  UNROLL for (int pr = 0; pr < 8; pr++) {
    __m256i sc = q6k_scales(q + 32 * di_pk_q6k_sc(pr / 2), 2 * pr % 4, 2 * pr % 4 + 1);
    UNROLL for (int i = 0; i < MT; i++) {
      int32_t bs;
      memcpy(&bs, a[i]->bsums + 2 * pr, 4);
      corr[i] = _mm256_add_epi32(corr[i], _mm256_madd_epi16(sc, _mm256_set1_epi32(bs)));
    }
  }
  __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)gp));
  UNROLL for (int i = 0; i < MT; i++) {
    __m256i is = _mm256_sub_epi32(isum[i], _mm256_slli_epi32(corr[i], 5));
    acc[i].s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, _mm256_broadcast_ss(&a[i]->d)), acc[i].s);
  }
}

#endif
