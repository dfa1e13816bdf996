/* AVX2 kernels for packed Q4_0 / Q4_1 / Q8_0 / Q4_K / Q6_K weights (layout: matmul_pack.c;
 * group loop, tiles and panels: matmul_pack_tiles.h).
 *
 * A tile is MT activation rows x one group of 8 weight rows; lane c of every
 * vector belongs to output column 8g + c. Per 32-element block and row:
 *   Q4_0/Q4_1: 4 words of nibbles give 8 registers of 4 quants x 8 columns
 *     (low nibbles: elements 4w..4w+3, high: 16+4w..); each is multiplied by the
 *     4 activation bytes broadcast to all lanes (maddubs: unsigned q x signed a,
 *     pairs <= 2*15*127), the 8 int16 results summed (<= 30480, no overflow),
 *     then one madd to int32. Q4_0's offset: isum -= 8 * sum(a), exact.
 *   Q8_0: 8 words; |q| x sign(a, q) per word, madd to int32 each time (two
 *     int16 pairs could overflow).
 * Then in float, lane by lane and in K order, exactly as the scalar reference
 * (di_cpu_q32_block_step; this file is built with -ffp-contract=off):
 *   acc += cvt(isum) * (d_w * d_a); acc += m_w * s_a (Q4_1); Y = acc.
 * (One chain, not a second one for the mins: 4 more registers for 4-row tiles.)
 * So Y[m][n] is the same bits for any M, n0..n1, tile shape, thread count or
 * ISA level. */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/matmul_tiles.h"

#define NO_UNROLL _Pragma("GCC unroll 1")

/* Per activation row: the output's chain and the K-quant mins' chain (matmul_pack_tiles.h). */
typedef struct { __m256 s, m; } pk_acc;
AI void pk_acc_zero(pk_acc *acc) { acc->s = acc->m = _mm256_setzero_ps(); }
/* K-quants: s + sm as the scalar chain (Q6_K's sm stays +0). */
AI void pk_store(di_dtype t, const pk_acc *acc, float *y) {
  _mm256_storeu_ps(y, di_pk_kquant(t) ? _mm256_add_ps(acc->s, acc->m) : acc->s);
}

AI __m256i bcast4(const int8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

/* One 32-byte word of quants (4 consecutive elements x 8 columns) against MT
 * activation rows. Tiles of several rows run the word loop rolled: unrolled,
 * the compiler hoists all words' unpacked registers and spills (Q4 GEMM M=16
 * 142 -> 162 GOP/s rolled); GEMV keeps it unrolled. */
AI void q8_word(int MT, const uint8_t *q, int w, const di_act_q8 *const *a, __m256i ones, __m256i *isum) {
  __m256i wq = _mm256_loadu_si256((const __m256i *)(q + 32 * w)), aq = _mm256_abs_epi8(wq);
  UNROLL for (int i = 0; i < MT; i++) {
    __m256i p = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(bcast4(a[i]->qs + 4 * w), wq));
    isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(p, ones));
  }
}

AI void q4_word(int MT, const uint8_t *q, int w, const di_act_q8 *const *a, __m256i m4, __m256i *p) {
  __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * w));
  __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  UNROLL for (int i = 0; i < MT; i++) {
    __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(a[i]->qs + 4 * w)),
                                 _mm256_maddubs_epi16(hi, bcast4(a[i]->qs + 16 + 4 * w)));
    p[i] = _mm256_add_epi16(p[i], s);
  }
}

/* One 32-element block of 8 columns (Q4_0/Q4_1/Q8_0) into the MT float chains. */
AI void q32_block(di_dtype t, int MT, const uint8_t *gp, const di_act_q8 *const *a, pk_acc *acc) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  const uint8_t *q = gp + DI_PK_G * di_pk_head_bytes(t);
  __m256i isum[MT_MAX];
  if (t == DI_Q8_0) {
    UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm256_setzero_si256();
    if (MT == 1) {
      UNROLL for (int w = 0; w < 8; w++) q8_word(MT, q, w, a, ones, isum);
    } else {
      NO_UNROLL for (int w = 0; w < 8; w++) q8_word(MT, q, w, a, ones, isum);
    }
  } else {
    __m256i p[MT_MAX];
    UNROLL for (int i = 0; i < MT; i++) p[i] = _mm256_setzero_si256();
    if (MT == 1) {
      UNROLL for (int w = 0; w < 4; w++) q4_word(MT, q, w, a, m4, p);
    } else {
      NO_UNROLL for (int w = 0; w < 4; w++) q4_word(MT, q, w, a, m4, p);
    }
    UNROLL for (int i = 0; i < MT; i++) {
      isum[i] = _mm256_madd_epi16(p[i], ones);
      if (t == DI_Q4_0) isum[i] = _mm256_sub_epi32(isum[i], _mm256_set1_epi32(8 * a[i]->sum));
    }
  }
  __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)gp));
  UNROLL for (int i = 0; i < MT; i++) {
    __m256 dd = _mm256_mul_ps(dw, _mm256_broadcast_ss(&a[i]->d));
    acc[i].s = _mm256_add_ps(acc[i].s, _mm256_mul_ps(_mm256_cvtepi32_ps(isum[i]), dd));
  }
  if (t == DI_Q4_1) {
    __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gp + 16)));
    UNROLL for (int i = 0; i < MT; i++) acc[i].s = _mm256_add_ps(acc[i].s, _mm256_mul_ps(mw, _mm256_broadcast_ss(&a[i]->s)));
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

/* Sub-block s (32 elements) of 8 columns: int16 sums of 8 maddubs, each pair
 * <= 2*15*127, so the total <= 30480 fits. Words of chunk s/2, nibble half s&1. */
AI void q4k_sub(int MT, const uint8_t *q, int s, const di_act_q8k *const *a, __m256i m4, __m256i *p) {
  const uint8_t *qc = q + 256 * (s / 2);
  UNROLL for (int i = 0; i < MT; i++) p[i] = _mm256_setzero_si256();
#define Q4K_WORD(w)                                                                                    \
  do {                                                                                                 \
    __m256i v = _mm256_loadu_si256((const __m256i *)(qc + 32 * (w)));                                  \
    __m256i nib = s & 1 ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : _mm256_and_si256(v, m4);     \
    UNROLL for (int i = 0; i < MT; i++)                                                                \
      p[i] = _mm256_add_epi16(p[i], _mm256_maddubs_epi16(nib, bcast4(a[i]->qs + 32 * s + 4 * (w))));   \
  } while (0)
  if (MT == 1) {
    UNROLL for (int w = 0; w < 8; w++) Q4K_WORD(w);
  } else {
    NO_UNROLL for (int w = 0; w < 8; w++) Q4K_WORD(w);
  }
#undef Q4K_WORD
}

/* One Q4_K super-block of 8 columns, in the order of di_cpu_qk_block_step:
 * isum = sum_s sc_s * dot_s and imin = sum_s m_s * (sum of x over s), exact in
 * int32 lanes; s += (d_w * d_a) * isum, m += (dmin_w * -d_a) * imin. The
 * 6-bit scales and mins of the 8 columns are decoded in two registers each
 * (bytes 4c..4c+3: sub-blocks 0-3 or 4-7 of column c). */
AI void q4k_block(int MT, const uint8_t *gp, const di_act_q8k *const *a, pk_acc *acc) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), m6 = _mm256_set1_epi8(0x3f), m2h = _mm256_set1_epi8(0x30);
  __m256i A = _mm256_loadu_si256((const __m256i *)(gp + 32)), B = _mm256_loadu_si256((const __m256i *)(gp + 64)),
          C = _mm256_loadu_si256((const __m256i *)(gp + 96));
  __m256i scl = _mm256_and_si256(A, m6), mnl = _mm256_and_si256(B, m6);
  __m256i sch = _mm256_or_si256(_mm256_and_si256(C, m4), _mm256_and_si256(_mm256_srli_epi16(A, 2), m2h));
  __m256i mnh = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(C, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi16(B, 2), m2h));
  const uint8_t *q = gp + 128;
  __m256i isum[MT_MAX], p[MT_MAX];
  UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm256_setzero_si256();
  UNROLL for (int s = 0; s < 8; s++) {
    q4k_sub(MT, q, s, a, m4, p);
    __m256i sc = _mm256_shuffle_epi8(s < 4 ? scl : sch, sc_ctl(s % 4, s % 4, false));
    UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(p[i], sc));
  }
  __m256i mn[4] = {_mm256_shuffle_epi8(mnl, sc_ctl(0, 1, false)), _mm256_shuffle_epi8(mnl, sc_ctl(2, 3, false)),
                   _mm256_shuffle_epi8(mnh, sc_ctl(0, 1, false)), _mm256_shuffle_epi8(mnh, sc_ctl(2, 3, false))};
  __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)gp));
  __m256 dmw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gp + 16)));
  UNROLL for (int i = 0; i < MT; i++) {
    /* bsums of 16 -> of 32 (<= 4064, int16), paired per int32 for madd against (m_s, m_s+1) */
    __m256i bs = _mm256_loadu_si256((const __m256i *)a[i]->bsums);
    __m128i b32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    __m256i imin = _mm256_madd_epi16(mn[0], _mm256_broadcastd_epi32(b32));
    imin = _mm256_add_epi32(imin, _mm256_madd_epi16(mn[1], _mm256_broadcastd_epi32(_mm_shuffle_epi32(b32, 0x55))));
    imin = _mm256_add_epi32(imin, _mm256_madd_epi16(mn[2], _mm256_broadcastd_epi32(_mm_shuffle_epi32(b32, 0xaa))));
    imin = _mm256_add_epi32(imin, _mm256_madd_epi16(mn[3], _mm256_broadcastd_epi32(_mm_shuffle_epi32(b32, 0xff))));
    __m256 da = _mm256_broadcast_ss(&a[i]->d);
    acc[i].s = _mm256_add_ps(acc[i].s, _mm256_mul_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_mul_ps(dw, da)));
    acc[i].m = _mm256_add_ps(acc[i].m, _mm256_mul_ps(_mm256_cvtepi32_ps(imin),
                                                     _mm256_mul_ps(dmw, _mm256_xor_ps(da, _mm256_set1_ps(-0.0f)))));
  }
}

/* Two consecutive words (8 elements) of chunk r (0..3) of half h of a Q6_K
 * super-block: low nibbles from ql, bits 2r, 2r+1 of qh as bits 4, 5 (0..63). */
AI __m256i q6k_word(const uint8_t *q, int h, int r, int w) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x30);
  __m256i l = _mm256_loadu_si256((const __m256i *)(q + 32 * di_pk_q6k_ql(h, r & 1, w)));
  __m256i hb = _mm256_loadu_si256((const __m256i *)(q + 32 * di_pk_q6k_qh(h, w)));
  l = r < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
  hb = r == 0 ? _mm256_slli_epi16(hb, 4) : r == 1 ? _mm256_slli_epi16(hb, 2) : r == 2 ? hb : _mm256_srli_epi16(hb, 2);
  return _mm256_or_si256(l, _mm256_and_si256(hb, m2));
}

/* Words 2j, 2j+1 of chunk r of half h against MT rows: two maddubs (each pair
 * <= 2*63*127, the sum <= 32004 fits int16), then madd by group 8h+2r+j/2's scale. */
AI void q6k_pair(int MT, const uint8_t *q, int h, int r, int j, const di_act_q8k *const *a, __m256i *isum) {
  int w = 2 * j, g = 8 * h + 2 * r + j / 2;
  __m256i q0 = q6k_word(q, h, r, w), q1 = q6k_word(q, h, r, w + 1);
  __m256i sc = q6k_scales(q + 32 * di_pk_q6k_sc(g / 4), g % 4, g % 4);
  const int e = 128 * h + 32 * r + 4 * w;
  UNROLL for (int i = 0; i < MT; i++) {
    __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(q0, bcast4(a[i]->qs + e)),
                                 _mm256_maddubs_epi16(q1, bcast4(a[i]->qs + e + 4)));
    isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(t, sc));
  }
}

/* One Q6_K super-block of 8 columns, in the order of di_cpu_qk_block_step:
 * isum = sum_g sc_g * (dot_g(q) - 32 * bsum_g), exact in int32 lanes (the -32
 * offset as 32 * sum_g sc_g * bsums_g, a madd per group pair), then
 * s += (d_w * d_a) * isum. */
AI void q6k_block(int MT, const uint8_t *gp, const di_act_q8k *const *a, pk_acc *acc) {
  const uint8_t *q = gp + 16;
  __m256i isum[MT_MAX], corr[MT_MAX];
  UNROLL for (int i = 0; i < MT; i++) isum[i] = corr[i] = _mm256_setzero_si256();
  UNROLL for (int h = 0; h < 2; h++) UNROLL for (int r = 0; r < 4; r++) {
    if (MT == 1) {
      UNROLL for (int j = 0; j < 4; j++) q6k_pair(MT, q, h, r, j, a, isum);
    } else {
      NO_UNROLL for (int j = 0; j < 4; j++) q6k_pair(MT, q, h, r, j, a, isum);
    }
  }
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
    isum[i] = _mm256_sub_epi32(isum[i], _mm256_slli_epi32(corr[i], 5));
    acc[i].s = _mm256_add_ps(acc[i].s, _mm256_mul_ps(_mm256_cvtepi32_ps(isum[i]),
                                                     _mm256_mul_ps(dw, _mm256_broadcast_ss(&a[i]->d))));
  }
}

#define PK_ENTRY di_cpu_mmp_avx2
#include "backend/cpu/matmul_pack_tiles.h"
