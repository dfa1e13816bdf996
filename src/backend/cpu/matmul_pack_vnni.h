/* AVX-512 VNNI kernels for packed Q4_0 / Q4_1 / Q5_0 / Q8_0 / MXFP4 / Q4_K / Q5_K / Q6_K weights
 * (layout: matmul_pack.c; group loop, tiles and panels: matmul_pack_tiles.h;
 * the float finish of every block: matmul_pack_x86.h, shared with AVX2).
 *
 * A 64-byte load takes two consecutive 32-byte words (4 elements x 8 columns
 * each) and one permute interleaves them so that int32 lanes 2c and 2c+1 both
 * belong to column c (word w and word w+1). The 8 activation bytes of the two
 * words, broadcast as one int64, then meet them in a single vpdpbusd (unsigned
 * weight byte x signed activation byte, four products per lane, no
 * saturation). At the end of a block, fold() adds lanes 2c and 2c+1, which
 * leaves exactly the integer sums the AVX2 kernels form, in the same 8 lanes,
 * so the float chains after it are the same instructions on the same values:
 * Y is bit-identical to the AVX2 and scalar kernels for every M and column range.
 *   Q4_0/Q4_1: nibbles 0..15 as they are; Q4_0's -8 comes off as 8 * sum(a).
 *   Q5_0: nibbles with the fifth bit or-ed in (0..31, rotated out of the
 *     permuted high-bit word, di_pk_q5_bits); -16 as 16 * sum(a).
 *   Q8_0: q + 128 (xor 0x80) makes the weights unsigned; 128 * sum(a) comes off.
 *   MXFP4: nibbles through the table di_mxfp4_kv + 12 (vpshufb, 0..24); 12 * sum(a).
 *   Q4_K: per sub-block a vpdpbusd sum (16 products per lane <= 30480, so it
 *     fits the low int16), then vpdpwssd against the scale (high int16 zero).
 *   Q5_K: Q4_K's with the fifth bits (q5k_block).
 *   Q6_K: per word pair the same (4 products <= 32004), by the group's scale.
 * That is the single-group path (K-quants, and Q4_0/Q4_1/Q8_0 groups without a
 * full neighbour); whole pairs of Q4_0/Q4_1/Q8_0 groups take pk_group2 below,
 * one column per lane and no fold.
 *
 * Built with -mavx512f/bw/vl/vnni and called only where the CPU has them, in
 * two translation units so that neither takes long to compile:
 * matmul_pack_kq_avx512.c (the K-quants' tiles) and matmul_pack_avx512.c (the
 * rest and the selector). With DI_AVX512_EMULATE the whole file builds in one
 * unit against SIMDe's portable AVX-512 instead, for the test that checks these
 * kernels on machines without AVX-512 (tests/unit/test_matmul_packed_avx512emu.c). */
#ifndef DI_CPU_MATMUL_PACK_VNNI_H
#define DI_CPU_MATMUL_PACK_VNNI_H

#ifdef DI_AVX512_EMULATE
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#define PK_ENTRY di_cpu_mmp_avx512_emu
#else
#include <immintrin.h>
#define PK_ENTRY di_cpu_mmp_avx512
#endif

#include "backend/cpu/matmul_pack_avx512.h"

di_cpu_mmp_fn PK_ENTRY(di_dtype t);

/* 8-row tiles: a word's unpacking is shared by twice the rows (pk_group2 then
 * holds 20 of the 32 zmm registers). Q4_K too, although its per-row sub-block
 * sums and two float chains do not all fit 8 rows in registers: the chains,
 * touched once per super-block, spill, and that costs less than unpacking
 * every word once more per 4 rows (one thread, weights from DRAM: 8 rows
 * 8-13% and 16 rows 5-12% faster, 4 rows no slower; batched decode's shared
 * experts and attention projections run at 16 rows, where this kernel is
 * compute-bound). Q5_K keeps 4: its two sub-block sums per row spill too. */
#define PK_MT_CAP 8
#define PK_MT_Q32 8
#define PK_MT_Q4K 8
#define PK_MT_Q5K 4
#define PK_MT_Q6K 8

/* Interleaves the int32 lanes of words w (lanes 0-7) and w+1 (8-15): 2c <- c, 2c+1 <- 8+c. */
AI __m512i pair_perm(__m512i v) {
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15), v);
}
AI __m512i load64(const uint8_t *p) { return _mm512_loadu_si512((const void *)p); }
/* Activation bytes p[0..4) to the even lanes, p[4..8) to the odd ones. */
AI __m512i bcast8(const int8_t *p) {
  int64_t v;
  memcpy(&v, p, 8);
  return _mm512_set1_epi64(v);
}
/* Lane 2c + lane 2c+1 -> lane c (wrapping add; the exact sum fits int32). */
AI __m256i fold(__m512i x) { return _mm512_cvtepi64_epi32(_mm512_add_epi64(x, _mm512_srli_epi64(x, 32))); }
/* A 256-bit register of 8 column dwords, each put in lanes 2c and 2c+1. */
AI __m512i dup_cols(__m256i v) {
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
                                  _mm512_castsi256_si512(v));
}

/* Rotation counts for a pair_perm'd word pair: lanes 2c hold word w, 2c+1 word w+1. */
AI __m512i q5_rot2(int w, int h) {
  return _mm512_set1_epi64((int64_t)((uint64_t)(uint32_t)di_pk_q5_rot(w + 1, h) << 32 | (uint32_t)di_pk_q5_rot(w, h)));
}

/* MXFP4: codes (0..15 in each byte) to di_mxfp4_kv + DI_PK_MXFP4_BIAS (0..24), unsigned for vpdpbusd. */
AI __m512i mxfp4_codes(__m512i c) {
  int8_t u[16];
  for (int k = 0; k < 16; k++) u[k] = (int8_t)(di_mxfp4_kv[k] + DI_PK_MXFP4_BIAS);
  return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)u)), c);
}
/* What the unsigned weights carry beyond q: Q8_0 its xor 0x80, Q4_0 / Q5_0 their offset, MXFP4 its bias. */
AI int q32_bias(di_dtype t) { return t == DI_Q8_0 ? 128 : t == DI_MXFP4 ? DI_PK_MXFP4_BIAS : di_pk_offset(t); }

/* One 32-element block of 8 columns (Q4_0/Q4_1/Q5_0/Q8_0/MXFP4) into the MT float chains. */
AI void q32_block(di_dtype t, int MT, const uint8_t *gp, const di_act_q8 *const *a, pk_acc *acc) {
  const uint8_t *q = gp + DI_PK_G * di_pk_head_bytes(t);
  __m512i isum[PK_MT_CAP];
  UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm512_setzero_si512();
  if (t == DI_Q8_0) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    UNROLL for (int w = 0; w < 8; w += 2) {
      __m512i wq = _mm512_xor_si512(pair_perm(load64(q + 32 * w)), flip);
      UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm512_dpbusd_epi32(isum[i], wq, bcast8(a[i]->qs + 4 * w));
    }
  } else if (di_pk_q5(t)) {
    /* words w, w+1 in lanes 2c, 2c+1: each lane rotates its own word's bits to bit 4 */
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i qh = dup_cols(_mm256_loadu_si256((const __m256i *)q));
    UNROLL for (int w = 0; w < 4; w += 2) {
      __m512i v = pair_perm(load64(q + 32 * (1 + w)));
      __m512i lo = _mm512_or_si512(_mm512_and_si512(v, m4), q5_fifth(qh, q5_rot2(w, 0)));
      __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), q5_fifth(qh, q5_rot2(w, 1)));
      UNROLL for (int i = 0; i < MT; i++) {
        isum[i] = _mm512_dpbusd_epi32(isum[i], lo, bcast8(a[i]->qs + 4 * w));
        isum[i] = _mm512_dpbusd_epi32(isum[i], hi, bcast8(a[i]->qs + 16 + 4 * w));
      }
    }
  } else {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    UNROLL for (int w = 0; w < 4; w += 2) {
      __m512i v = pair_perm(load64(q + 32 * w));
      __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      if (t == DI_MXFP4) lo = mxfp4_codes(lo), hi = mxfp4_codes(hi);
      UNROLL for (int i = 0; i < MT; i++) {
        isum[i] = _mm512_dpbusd_epi32(isum[i], lo, bcast8(a[i]->qs + 4 * w));
        isum[i] = _mm512_dpbusd_epi32(isum[i], hi, bcast8(a[i]->qs + 16 + 4 * w));
      }
    }
  }
  __m256i s[PK_MT_CAP];
  UNROLL for (int i = 0; i < MT; i++) s[i] = fold(isum[i]);
  q32_finish(t, MT, gp, a, s, q32_bias(t), acc);
}

/* One Q4_K super-block of 8 columns: per sub-block s (words of chunk s/2,
 * nibble half s&1), isum += dot_s * sc_s. */
AI void q4k_block(int MT, const uint8_t *gp, const di_act_q8k *const *a, pk_acc *acc) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), lo8 = _mm512_set1_epi32(0xff);
  const q4k_sc d = q4k_decode(gp);
  const __m512i sc4[2] = {dup_cols(d.sc[0]), dup_cols(d.sc[1])};
  const uint8_t *q = gp + DI_PK_Q4K_QS;
  __m512i isum[PK_MT_CAP], p[PK_MT_CAP];
  UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm512_setzero_si512();
  UNROLL for (int s = 0; s < 8; s++) {
    const uint8_t *qc = q + 256 * (s / 2);
    UNROLL for (int i = 0; i < MT; i++) p[i] = _mm512_setzero_si512();
    UNROLL for (int w = 0; w < 8; w += 2) {
      __m512i v = pair_perm(load64(qc + 32 * w));
      __m512i nib = s & 1 ? _mm512_and_si512(_mm512_srli_epi16(v, 4), m4) : _mm512_and_si512(v, m4);
      UNROLL for (int i = 0; i < MT; i++) p[i] = _mm512_dpbusd_epi32(p[i], nib, bcast8(a[i]->qs + 32 * s + 4 * w));
    }
    __m512i sc = _mm512_and_si512(_mm512_srli_epi32(sc4[s / 4], 8 * (s % 4)), lo8);
    UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm512_dpwssd_epi32(isum[i], p[i], sc);
  }
  __m256i s[PK_MT_CAP];
  UNROLL for (int i = 0; i < MT; i++) s[i] = fold(isum[i]);
  q4k_finish(MT, gp, a, &d, s, acc);
}

/* One Q5_K super-block of 8 columns: q4k_block with the fifth bit or-ed in
 * (0..31); a lane's 16 products per sub-block could pass int16, so words 0-3
 * and 4-7 sum apart (8 products <= 31496) and each meets the scale in its
 * own vpdpwssd: the same integers. */
#define PK_Q5K 1
AI void q5k_block(int MT, const uint8_t *gp, const di_act_q8k *const *a, pk_acc *acc) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), lo8 = _mm512_set1_epi32(0xff);
  const q4k_sc d = q4k_decode(gp);
  const __m512i sc4[2] = {dup_cols(d.sc[0]), dup_cols(d.sc[1])};
  const uint8_t *q = gp + DI_PK_Q5K_QS;
  __m512i qh[4];
  UNROLL for (int w = 0; w < 8; w += 2) qh[w / 2] = pair_perm(load64(gp + DI_PK_Q5K_QH + 32 * w));
  __m512i isum[PK_MT_CAP], p[2][PK_MT_CAP];
  UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm512_setzero_si512();
  UNROLL for (int s = 0; s < 8; s++) {
    const uint8_t *qc = q + 256 * (s / 2);
    UNROLL for (int i = 0; i < MT; i++) p[0][i] = p[1][i] = _mm512_setzero_si512();
    UNROLL for (int w = 0; w < 8; w += 2) {
      __m512i v = pair_perm(load64(qc + 32 * w));
      __m512i nib = s & 1 ? _mm512_and_si512(_mm512_srli_epi16(v, 4), m4) : _mm512_and_si512(v, m4);
      nib = _mm512_or_si512(nib, q5k_fifth(qh[w / 2], s));
      UNROLL for (int i = 0; i < MT; i++)
        p[w / 4][i] = _mm512_dpbusd_epi32(p[w / 4][i], nib, bcast8(a[i]->qs + 32 * s + 4 * w));
    }
    __m512i sc = _mm512_and_si512(_mm512_srli_epi32(sc4[s / 4], 8 * (s % 4)), lo8);
    UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(isum[i], p[0][i], sc), p[1][i], sc);
  }
  __m256i s[PK_MT_CAP];
  UNROLL for (int i = 0; i < MT; i++) s[i] = fold(isum[i]);
  q4k_finish(MT, gp, a, &d, s, acc);
}

/* Words w, w+1 of chunk r (0..3) of half h of a Q6_K super-block, interleaved:
 * low nibbles from ql, bits 2r, 2r+1 of qh as bits 4, 5 (0..63). */
AI __m512i q6k_words(const uint8_t *q, int h, int r, int w) {
  return pair_perm(q6k_quants(load64(q + 32 * di_pk_q6k_ql(h, r & 1, w)), load64(q + 32 * di_pk_q6k_qh(h, w)), r));
}

/* One Q6_K super-block of 8 columns: isum = sum_g sc_g * dot_g over the 0..63
 * quants, a word pair (8 elements, half of group g = 8h + 2r + j/2) at a time. */
AI void q6k_block(int MT, const uint8_t *gp, const di_act_q8k *const *a, pk_acc *acc) {
  const uint8_t *q = gp + DI_PK_Q6K_WORDS;
  __m512i isum[PK_MT_CAP];
  UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm512_setzero_si512();
  UNROLL for (int h = 0; h < 2; h++) UNROLL for (int r = 0; r < 4; r++) {
    /* groups 8h + 2r and 8h + 2r + 1 share a scale word (4 groups per word) */
    const __m512i sw = dup_cols(_mm256_loadu_si256((const __m256i *)(q + 32 * di_pk_q6k_sc((8 * h + 2 * r) / 4))));
    UNROLL for (int j = 0; j < 4; j++) {
      const int g = 8 * h + 2 * r + j / 2, e = 128 * h + 32 * r + 8 * j;
      __m512i qq = q6k_words(q, h, r, 2 * j);
      /* column c's int8 scale of group g, sign-extended to the low int16 of lanes 2c, 2c+1 */
      __m512i sc = _mm512_srai_epi16(_mm512_srli_epi32(_mm512_slli_epi32(sw, 24 - 8 * (g % 4)), 16), 8);
      UNROLL for (int i = 0; i < MT; i++) {
        __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qq, bcast8(a[i]->qs + e));
        isum[i] = _mm512_dpwssd_epi32(isum[i], p, sc);
      }
    }
  }
  __m256i s[PK_MT_CAP];
  UNROLL for (int i = 0; i < MT; i++) s[i] = fold(isum[i]);
  q6k_finish(MT, gp, a, s, acc);
}

/* ---- Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / MXFP4, two groups (16 columns) at a time ----
 * For these types the fold and the float finish of every 32-element block
 * cost as much as the dot products. Here a zmm holds a word of group g in its
 * low half and the same word of group g+1 in its high half, so each int32 lane
 * is one column's sum already (no fold) and the finish runs on 16 columns per
 * instruction. Lane c of the low (high) half is exactly lane c of the AVX2
 * kernel's group g (g+1), with the same integer sum and the same float
 * operations of q32_finish, so the bits are the same. matmul_pack_tiles.h calls
 * pk_group2 for pairs of full groups and pk_group for the rest. */
#define PK_GROUP2 1
#define PK_MXFP4 1
AI bool pk_group2_ok(di_dtype t) { return !di_pk_kquant(t); }

AI __m512i bcast4(const int8_t *p) {
  int32_t v;
  memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

/* (xrow: the activation rows' stride in bytes, for q32_finish16) */
AI void q32_block2(di_dtype t, int MT, const uint8_t *gp0, const uint8_t *gp1, const di_act_q8 *const *a, size_t xrow,
                   __m512 *acc) {
  const size_t head = DI_PK_G * di_pk_head_bytes(t);
  const uint8_t *q0 = gp0 + head, *q1 = gp1 + head;
  /* The bias term starts each sum (integer adds: the order is free), so it
   * costs one broadcast instead of a broadcast and a subtraction. */
  const int bias = q32_bias(t);
  __m512i isum[PK_MT_CAP];
  UNROLL for (int i = 0; i < MT; i++) isum[i] = bias ? _mm512_set1_epi32(-bias * a[i]->sum) : _mm512_setzero_si512();
  if (t == DI_Q8_0) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    UNROLL for (int w = 0; w < 8; w++) {
      __m512i wq = _mm512_xor_si512(join_words(q0 + 32 * w, q1 + 32 * w), flip);
      UNROLL for (int i = 0; i < MT; i++) isum[i] = _mm512_dpbusd_epi32(isum[i], wq, bcast4(a[i]->qs + 4 * w));
    }
  } else if (di_pk_q5(t)) {
    const __m512i qh = join_words(q0, q1);
    UNROLL for (int w = 0; w < 4; w++) {
      __m512i lo, hi;
      q5_pair_word(q0, q1, qh, w, &lo, &hi);
      UNROLL for (int i = 0; i < MT; i++) {
        isum[i] = _mm512_dpbusd_epi32(isum[i], lo, bcast4(a[i]->qs + 4 * w));
        isum[i] = _mm512_dpbusd_epi32(isum[i], hi, bcast4(a[i]->qs + 16 + 4 * w));
      }
    }
  } else {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    UNROLL for (int w = 0; w < 4; w++) {
      __m512i v = join_words(q0 + 32 * w, q1 + 32 * w);
      __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      if (t == DI_MXFP4) lo = mxfp4_codes(lo), hi = mxfp4_codes(hi);
      UNROLL for (int i = 0; i < MT; i++) {
        isum[i] = _mm512_dpbusd_epi32(isum[i], lo, bcast4(a[i]->qs + 4 * w));
        isum[i] = _mm512_dpbusd_epi32(isum[i], hi, bcast4(a[i]->qs + 16 + 4 * w));
      }
    }
  }
  q32_finish16(t, MT, gp0, gp1, &a[0]->d, &a[0]->s, xrow / sizeof(float), isum, acc);
}

/* Outputs [8g, 8g+16) x MT rows (groups g and g+1 at gw, both full), stored
 * where they fall inside [n0, n1). */
AI void pk_group2(di_dtype t, int MT, bool pf, const di_pk_job *j, const uint8_t *gw, int64_t g, const uint8_t *x,
                  float *Y) {
  const size_t gbb = DI_PK_G * di_pk_block_bytes(t); /* a constant here, as the prefetch distance */
  const uint8_t *w0 = gw, *w1 = gw + j->gstride;
  __m512 acc[PK_MT_CAP];
  UNROLL for (int i = 0; i < MT; i++) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < j->nb; b++) {
    const uint8_t *gp0 = w0 + (size_t)b * gbb, *gp1 = w1 + (size_t)b * gbb;
    /* both groups' block ahead into L1 and L2, as pk_group prefetches one */
    if (pf) {
      gemv_prefetch(gp0, gbb, pk_ahead(gbb));
      gemv_prefetch(gp1, gbb, pk_ahead(gbb));
    }
    const di_act_q8 *a[PK_MT_CAP];
    UNROLL for (int i = 0; i < MT; i++) a[i] = (const di_act_q8 *)(x + i * j->xrow) + b;
    q32_block2(t, MT, gp0, gp1, a, j->xrow, acc);
  }
  int64_t c0 = g * DI_PK_G, lo = j->n0 > c0 ? j->n0 : c0, hi = j->n1 < c0 + 2 * DI_PK_G ? j->n1 : c0 + 2 * DI_PK_G;
  UNROLL for (int i = 0; i < MT; i++) {
    if (lo == c0 && hi == c0 + 2 * DI_PK_G) {
      _mm512_storeu_ps(Y + i * j->ldy + c0, acc[i]);
    } else {
      float out[2 * DI_PK_G];
      _mm512_storeu_ps(out, acc[i]);
      for (int64_t n = lo; n < hi; n++) Y[i * j->ldy + n] = out[n - c0];
    }
  }
}

/* Q6_K in whole 16-row tiles: matmul_q6k16_avx512.c (not in the emulated build). */
#ifndef DI_AVX512_EMULATE
#define PK_ROWS16 1
#endif

/* Where the CPU has AMX-INT8 (and Linux grants it), each per-type entry goes
 * to the AMX path (matmul_pack_amx.c), which hands the rows and columns it does
 * not take back to pk_mm. */
#if !defined(DI_AVX512_EMULATE) && !defined(PK_PART_KQUANT)
#define PK_MM pk_mm_amx
static void pk_mm_amx(di_dtype t, const void *W, size_t wrow, int64_t N, const void *X, size_t xrow, int64_t M,
                      int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1);
#endif

/* the tile functions, the per-type tables and pk_mm */
#include "backend/cpu/matmul_pack_tiles.h"

#if !defined(DI_AVX512_EMULATE) && !defined(PK_PART_KQUANT)
static void pk_mm_amx(di_dtype t, const void *W, size_t wrow, int64_t N, const void *X, size_t xrow, int64_t M,
                      int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1) {
  di_cpu_mmp_amx(t, pk_mm, W, wrow, N, X, xrow, M, K, Y, ldy, n0, n1);
}
#endif

#endif
