/* AVX2 kernels for packed Q4_0 / Q4_1 / Q5_0 / Q8_0 / MXFP4 / Q4_K / Q5_K / Q6_K weights (layout: matmul_pack.c;
 * group loop, tiles and panels: matmul_pack_tiles.h).
 *
 * A tile is MT activation rows x one group of 8 weight rows; lane c of every
 * vector belongs to output column 8g + c. Per 32-element block and row:
 *   Q4_0/Q4_1: 4 words of nibbles give 8 registers of 4 quants x 8 columns
 *     (low nibbles: elements 4w..4w+3, high: 16+4w..); each is multiplied by the
 *     4 activation bytes broadcast to all lanes (maddubs: unsigned q x signed a,
 *     pairs <= 2*15*127), the 8 int16 results summed (<= 30480, no overflow),
 *     then one madd to int32. Q4_0's offset: isum -= 8 * sum(a), exact.
 *   Q5_0: the same with each byte's fifth bit or-ed in (q5_word), 16 * sum(a).
 *   Q8_0: 8 words; |q| x sign(a, q) per word, madd to int32 each time (two
 *     int16 pairs could overflow).
 *   MXFP4: 4 words of codes, each nibble through di_mxfp4_kv (pshufb), then as
 *     Q8_0 but summed in int16 (|q| <= 12) with one madd per block.
 * Then in float, lane by lane and in K order, exactly as the scalar reference
 * (q32_finish in matmul_pack_x86.h, shared with the AVX-512 kernels):
 *   acc = fma(cvt(isum), d_w * d_a, acc); acc = fma(m_w, s_a, acc) (Q4_1); Y = acc.
 * (One chain, not a second one for the mins: 4 more registers for 4-row tiles.)
 * So Y[m][n] is the same bits for any M, n0..n1, tile shape, thread count or
 * ISA level. */
#include "backend/cpu/matmul_pack_x86.h"

#define NO_UNROLL _Pragma("GCC unroll 1")

AI __m256i bcast4(const int8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

/* One 32-byte word of quants (4 consecutive elements x 8 columns) against MT
 * activation rows. Tiles of several rows run the word loop rolled: unrolled,
 * the compiler hoists all words' unpacked registers and spills them; GEMV
 * (one row, registers to spare) keeps it unrolled. */
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

/* Q5_0's nibble word w (after its high-bit word) with the fifth bits: for each
 * half, bit 2w + h of every byte of the permuted qh word moved to bit 4. Pairs of
 * maddubs products reach 2*31*127 and a word's two sum to 15748, so each word
 * goes to int32 at once. */
AI __m256i q5_bits(__m256i qh, int w, int h) {
  const int k = 2 * w + h;
  __m256i v = k < 4 ? _mm256_slli_epi32(qh, 4 - k) : k > 4 ? _mm256_srli_epi32(qh, k - 4) : qh;
  return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}
AI void q5_word(int MT, const uint8_t *q, int w, const di_act_q8 *const *a, __m256i m4, __m256i ones, __m256i *isum) {
  __m256i qh = _mm256_loadu_si256((const __m256i *)q), v = _mm256_loadu_si256((const __m256i *)(q + 32 * (1 + w)));
  __m256i lo = _mm256_or_si256(_mm256_and_si256(v, m4), q5_bits(qh, w, 0));
  __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), q5_bits(qh, w, 1));
  UNROLL for (int i = 0; i < MT; i++) {
    __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(a[i]->qs + 4 * w)),
                                 _mm256_maddubs_epi16(hi, bcast4(a[i]->qs + 16 + 4 * w)));
    isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(s, ones));
  }
}

/* MXFP4's code word w: both nibble halves through the table (int8 -12..12),
 * then |q| x sign(a, q) as Q8_0's words; a maddubs pair is <= 2*12*127, so the
 * int16 lanes take all 8 (<= 24384) before one madd. */
AI void mxfp4_word(int MT, const uint8_t *q, int w, const di_act_q8 *const *a, __m256i kv, __m256i m4, __m256i *p) {
  __m256i v = _mm256_loadu_si256((const __m256i *)(q + 32 * w));
  __m256i lo = _mm256_shuffle_epi8(kv, _mm256_and_si256(v, m4));
  __m256i hi = _mm256_shuffle_epi8(kv, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
  __m256i alo = _mm256_abs_epi8(lo), ahi = _mm256_abs_epi8(hi);
  UNROLL for (int i = 0; i < MT; i++) {
    __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(alo, _mm256_sign_epi8(bcast4(a[i]->qs + 4 * w), lo)),
                                 _mm256_maddubs_epi16(ahi, _mm256_sign_epi8(bcast4(a[i]->qs + 16 + 4 * w), hi)));
    p[i] = _mm256_add_epi16(p[i], s);
  }
}

/* One 32-element block of 8 columns (Q4_0/Q4_1/Q5_0/Q8_0/MXFP4) into the MT float chains. */
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
  } else if (di_pk_q5(t)) {
    UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm256_setzero_si256();
    UNROLL for (int w = 0; w < 4; w++) q5_word(MT, q, w, a, m4, ones, isum);
  } else if (t == DI_MXFP4) {
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)di_mxfp4_kv));
    __m256i p[MT_MAX];
    UNROLL for (int i = 0; i < MT; i++) p[i] = _mm256_setzero_si256();
    if (MT == 1) {
      UNROLL for (int w = 0; w < 4; w++) mxfp4_word(MT, q, w, a, kv, m4, p);
    } else {
      NO_UNROLL for (int w = 0; w < 4; w++) mxfp4_word(MT, q, w, a, kv, m4, p);
    }
    UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm256_madd_epi16(p[i], ones);
  } else {
    __m256i p[MT_MAX];
    UNROLL for (int i = 0; i < MT; i++) p[i] = _mm256_setzero_si256();
    if (MT == 1) {
      UNROLL for (int w = 0; w < 4; w++) q4_word(MT, q, w, a, m4, p);
    } else {
      NO_UNROLL for (int w = 0; w < 4; w++) q4_word(MT, q, w, a, m4, p);
    }
    UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm256_madd_epi16(p[i], ones);
  }
  q32_finish(t, MT, gp, a, isum, di_pk_offset(t), acc);
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

/* One Q4_K super-block of 8 columns: per sub-block s, isum += madd(dot_s, sc_s). */
AI void q4k_block(int MT, const uint8_t *gp, const di_act_q8k *const *a, pk_acc *acc) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const q4k_sc d = q4k_decode(gp);
  const uint8_t *q = gp + DI_PK_Q4K_QS;
  __m256i isum[MT_MAX], p[MT_MAX];
  UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm256_setzero_si256();
  UNROLL for (int s = 0; s < 8; s++) {
    q4k_sub(MT, q, s, a, m4, p);
    __m256i sc = q4k_scale(&d, s);
    UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(p[i], sc));
  }
  q4k_finish(MT, gp, a, &d, isum, acc);
}

/* Q5_K: sub-block s's fifth bits of a quant word's bytes, from its qh word
 * (element l's bit s is bit s of qh byte l, and quant word w of every chunk
 * holds elements 4w..4w+3, as qh word w does), moved to bit 4. The 16-bit
 * shifts keep every byte's bit 4 its own: they move by at most 4. */
AI __m256i q5k_fifth(__m256i qh, int s) {
  const __m256i v = s <= 4 ? _mm256_slli_epi16(qh, 4 - s) : _mm256_srli_epi16(qh, s - 4);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* One Q5_K super-block of 8 columns: Q4_K's sub-blocks with the fifth bit
 * or-ed in (0..31). Four maddubs pairs reach 4 * 2 * 31 * 127 = 31496, so
 * each sub-block sums its words in two int16 halves, each madd'ed by the
 * scale: the same integers sum_s sc_s * dot_s. */
#define PK_Q5K 1
AI void q5k_block(int MT, const uint8_t *gp, const di_act_q8k *const *a, pk_acc *acc) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const q4k_sc d = q4k_decode(gp);
  const uint8_t *qh = gp + DI_PK_Q5K_QH, *q = gp + DI_PK_Q5K_QS;
  __m256i isum[MT_MAX], p[2][MT_MAX];
  UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm256_setzero_si256();
  UNROLL for (int s = 0; s < 8; s++) {
    const uint8_t *qc = q + 256 * (s / 2);
    UNROLL for (int i = 0; i < MT; i++) p[0][i] = p[1][i] = _mm256_setzero_si256();
    UNROLL for (int w = 0; w < 8; w++) {
      const __m256i v = _mm256_loadu_si256((const __m256i *)(qc + 32 * w));
      const __m256i nib = _mm256_or_si256(s & 1 ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : _mm256_and_si256(v, m4),
                                          q5k_fifth(_mm256_loadu_si256((const __m256i *)(qh + 32 * w)), s));
      UNROLL for (int i = 0; i < MT; i++)
        p[w / 4][i] = _mm256_add_epi16(p[w / 4][i], _mm256_maddubs_epi16(nib, bcast4(a[i]->qs + 32 * s + 4 * w)));
    }
    const __m256i sc = q4k_scale(&d, s);
    UNROLL for (int i = 0; i < MT; i++)
      isum[i] = _mm256_add_epi32(isum[i], _mm256_add_epi32(_mm256_madd_epi16(p[0][i], sc), _mm256_madd_epi16(p[1][i], sc)));
  }
  q4k_finish(MT, gp, a, &d, isum, acc);
}

/* Word w (4 elements x 8 columns) of chunk r (0..3) of half h of a Q6_K
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

/* One Q6_K super-block of 8 columns: isum = sum_g sc_g * dot_g over the 0..63 quants. */
AI void q6k_block(int MT, const uint8_t *gp, const di_act_q8k *const *a, pk_acc *acc) {
  const uint8_t *q = gp + DI_PK_Q6K_WORDS;
  __m256i isum[MT_MAX];
  UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm256_setzero_si256();
  UNROLL for (int h = 0; h < 2; h++) UNROLL for (int r = 0; r < 4; r++) {
    if (MT == 1) {
      UNROLL for (int j = 0; j < 4; j++) q6k_pair(MT, q, h, r, j, a, isum);
    } else {
      NO_UNROLL for (int j = 0; j < 4; j++) q6k_pair(MT, q, h, r, j, a, isum);
    }
  }
  q6k_finish(MT, gp, a, isum, acc);
}

#define PK_MXFP4 1
#define PK_ENTRY di_cpu_mmp_avx2
#include "backend/cpu/matmul_pack_tiles.h"
