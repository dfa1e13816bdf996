/* NEON kernels for packed Q4_0 / Q4_1 / Q5_0 / Q8_0 / Q4_K / Q6_K weights (layout:
 * matmul_pack.c; group loop, tiles and panels: matmul_pack_tiles.h), written
 * once and compiled twice like matmul_int_neon.h: matmul_pack_neon.c (ARMv8.0)
 * and matmul_pack_dot_neon.c (-march=armv8.2-a+dotprod), defining NEON_DOT 0
 * or 1 and PK_ENTRY, the name of the exported selector.
 *
 * A tile is MT activation rows x one group of 8 weight rows. A 32-byte word of
 * the layout (4 consecutive quants of each of the 8 columns) is two registers,
 * columns 0-3 and 4-7, so int32 lane c % 4 of register c / 4 is output column
 * 8g + c, as lane c of the AVX2 kernels' one register. Per word and row the 4
 * activation bytes are broadcast and multiplied into the column lanes (dacc):
 * SDOT adds them to int32 directly; ARMv8.0 accumulates a short run of words'
 * products in int16 per quant byte (each use states its bound) and widens
 * once per run. Integer sums are exact, so both builds and the AVX2 kernels get
 * the same integers; the per-block scales multiply them in int32 as the scalar
 * reference does.
 *
 * Then in float, lane by lane and in K order, exactly the operations of
 * di_cpu_q32_block_step / di_cpu_qk_block_step (this file is built with
 * -ffp-contract=off, so only the written fused multiply-adds fuse; fma(a, b, c)
 * is a * b + c rounded once):
 *   Q4_0/Q8_0: s = fma(cvt(isum), d_w * d_a, s); Q4_1 then s = fma(m_w, s_a, s);
 *   Q4_K: s = fma(cvt(isum), d_w * d_a, s), m = fma(cvt(imin), dmin_w * -d_a, m); Y = s + m;
 *   Q6_K: s = fma(cvt(isum), d_w * d_a, s); Y = s + m with m = +0 (as the scalar sm).
 * So Y[m][n] has the same bits as the scalar reference and the AVX2 kernels
 * for any M, column range, tile shape or thread count.
 *
 * Loops over words and rows are unrolled; the K-quants' loops over sub-blocks
 * stay rolled: fully unrolled, the compiler hoisted loads across sub-blocks and
 * spilled (Q6_K: ~25000 stack accesses in the ARMv8.0 object, ~300 rolled).
 * Their shifts are vector operands, so a loop variable can set them. */
#include <arm_neon.h>
#include <string.h>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/matmul_tiles.h"
#include "backend/cpu/neon.h"

#define NO_UNROLL _Pragma("GCC unroll 1")

/* ---------------- integer dot products of 8 columns ---------------- */

/* Eight int32 column sums: lane c % 4 of c[c / 4]. */
typedef struct { int32x4_t c[2]; } i32x8;

#if NEON_DOT
typedef struct { int32x4_t c[2]; } dacc;
#else
/* h: int16 products per quant byte (register k / 2, bytes 8 (k % 2) .. +7,
 * so lanes 4j..4j+3 are one column); p: int32 sums of byte pairs, for runs that
 * must widen after every word (dacc_word_wide). */
typedef struct { int16x8_t h[4]; int32x4_t p[4]; } dacc;
#endif

/* The 4 activation bytes at a (4-aligned in di_act_q8 / di_act_q8k) in every lane. */
AI int8x16_t bcast4(const int8_t *a) {
  int32_t v;
  memcpy(&v, a, 4);
  return vreinterpretq_s8_s32(vdupq_n_s32(v));
}

AI void dacc_zero(dacc *d) {
#if NEON_DOT
  d->c[0] = d->c[1] = vdupq_n_s32(0);
#else
  UNROLL for (int k = 0; k < 4; k++) {
    d->h[k] = vdupq_n_s16(0);
    d->p[k] = vdupq_n_s32(0);
  }
#endif
}

/* d += the word (q0: columns 0-3, q1: 4-7) times the activation bytes a..a+3.
 * ARMv8.0: into int16, so the caller bounds the run's sum of |q * a| per byte. */
AI void dacc_word(dacc *d, int8x16_t q0, int8x16_t q1, const int8_t *a) {
  int8x16_t b = bcast4(a);
#if NEON_DOT
  d->c[0] = vdotq_s32(d->c[0], q0, b);
  d->c[1] = vdotq_s32(d->c[1], q1, b);
#else
  d->h[0] = vmlal_s8(d->h[0], vget_low_s8(q0), vget_low_s8(b));
  d->h[1] = vmlal_high_s8(d->h[1], q0, b);
  d->h[2] = vmlal_s8(d->h[2], vget_low_s8(q1), vget_low_s8(b));
  d->h[3] = vmlal_high_s8(d->h[3], q1, b);
#endif
}

/* As dacc_word for full int8 quants (Q8_0: (-128)^2 twice overflows int16):
 * ARMv8.0 widens each word's products to int32 pairs at once. */
AI void dacc_word_wide(dacc *d, int8x16_t q0, int8x16_t q1, const int8_t *a) {
#if NEON_DOT
  dacc_word(d, q0, q1, a);
#else
  int8x16_t b = bcast4(a);
  d->p[0] = vpadalq_s16(d->p[0], vmull_s8(vget_low_s8(q0), vget_low_s8(b)));
  d->p[1] = vpadalq_s16(d->p[1], vmull_high_s8(q0, b));
  d->p[2] = vpadalq_s16(d->p[2], vmull_s8(vget_low_s8(q1), vget_low_s8(b)));
  d->p[3] = vpadalq_s16(d->p[3], vmull_high_s8(q1, b));
#endif
}

/* The run's sum per column. */
AI i32x8 dacc_cols(const dacc *d) {
  i32x8 r;
#if NEON_DOT
  r.c[0] = d->c[0];
  r.c[1] = d->c[1];
#else
  /* byte pairs (4j, 4j+1), (4j+2, 4j+3) of a register, then the two pairs of a column */
  UNROLL for (int k = 0; k < 2; k++)
    r.c[k] = vpaddq_s32(vpadalq_s16(d->p[2 * k], d->h[2 * k]), vpadalq_s16(d->p[2 * k + 1], d->h[2 * k + 1]));
#endif
  return r;
}

/* isum += v * sc, lane by lane. */
AI void mla8(i32x8 *isum, i32x8 v, const int32x4_t sc[2]) {
  UNROLL for (int k = 0; k < 2; k++) isum->c[k] = vmlaq_s32(isum->c[k], v.c[k], sc[k]);
}

/* Byte r (0..3) of every int32 lane, zero- or sign-extended: a column's scale
 * when each lane holds 4 of them. Variable shifts, so r need not be an immediate. */
AI int32x4_t byte_u(uint8x16_t v, int r) {
  return vreinterpretq_s32_u32(
      vandq_u32(vshlq_u32(vreinterpretq_u32_u8(v), vdupq_n_s32(-8 * r)), vdupq_n_u32(0xff)));
}
AI int32x4_t byte_s(uint8x16_t v, int r) {
  return vshrq_n_s32(vshlq_s32(vreinterpretq_s32_u8(v), vdupq_n_s32(8 * (3 - r))), 24);
}

/* ---------------- float chains ---------------- */

/* Per activation row: the output's chain and the K-quant mins' chain (matmul_pack_tiles.h). */
typedef struct { f32x8 s, m; } pk_acc;

AI void pk_acc_zero(pk_acc *acc) { acc->s.lo = acc->s.hi = acc->m.lo = acc->m.hi = vdupq_n_f32(0); }

/* The 8 columns' fp16 head field at p, as floats (exact). */
AI f32x8 head8(const uint8_t *p) {
  float16x8_t h = vld1q_f16((const __fp16 *)p);
  return (f32x8){vcvt_f32_f16(vget_low_f16(h)), vcvt_high_f32_f16(h)};
}

/* acc = fma(cvt(isum), w * a, acc): the scalar steps' s = fma(isum, d_w * d_a, s) (products commute exactly). */
AI void chain_add(f32x8 *acc, i32x8 isum, f32x8 w, float a) {
  acc->lo = vfmaq_f32(acc->lo, vcvtq_f32_s32(isum.c[0]), vmulq_n_f32(w.lo, a));
  acc->hi = vfmaq_f32(acc->hi, vcvtq_f32_s32(isum.c[1]), vmulq_n_f32(w.hi, a));
}

/* K-quants: s + sm as the scalar chain (Q6_K's m stays +0, as its sm). */
AI void pk_store(di_dtype t, const pk_acc *acc, float *y) {
  f32x8 v = acc->s;
  if (di_pk_kquant(t)) {
    v.lo = vaddq_f32(v.lo, acc->m.lo);
    v.hi = vaddq_f32(v.hi, acc->m.hi);
  }
  vst1q_f32(y, v.lo);
  vst1q_f32(y + 4, v.hi);
}

/* ---------------- Q4_0 / Q4_1 / Q5_0 / Q8_0 ---------------- */

/* Bit k of every byte of x moved to bit 4 (other bits: don't care). */
AI uint32x4_t q5_shift(uint32x4_t x, int k) {
  switch (k) {
  case 0: return vshlq_n_u32(x, 4);
  case 1: return vshlq_n_u32(x, 3);
  case 2: return vshlq_n_u32(x, 2);
  case 3: return vshlq_n_u32(x, 1);
  case 4: return x;
  case 5: return vshrq_n_u32(x, 1);
  case 6: return vshrq_n_u32(x, 2);
  default: return vshrq_n_u32(x, 3);
  }
}

/* One 32-element block of 8 columns into the MT chains. */
AI void q32_block(di_dtype t, int MT, const uint8_t *gp, const di_act_q8 *const *a, pk_acc *acc) {
  const uint8_t *q = gp + DI_PK_G * di_pk_head_bytes(t);
  dacc d[MT_MAX];
  UNROLL for (int i = 0; i < MT; i++) dacc_zero(&d[i]);
  if (t == DI_Q8_0) {
    UNROLL for (int w = 0; w < 8; w++) {
      int8x16_t q0 = vld1q_s8((const int8_t *)q + 32 * w), q1 = vld1q_s8((const int8_t *)q + 32 * w + 16);
      UNROLL for (int i = 0; i < MT; i++) dacc_word_wide(&d[i], q0, q1, a[i]->qs + 4 * w);
    }
  } else {
    /* word w: low nibbles are elements 4w..4w+3, high ones 16+4w..; Q4_0's offset
     * applied to the quants (-8..7). 8 products per int16 lane, each |q * a| <=
     * 15 * 128: <= 15360. */
    const int8x16_t off = vdupq_n_s8((int8_t)di_pk_offset(t));
    const bool q5 = di_pk_q5(t); /* its nibble words follow the high-bit word */
    UNROLL for (int w = 0; w < 4; w++) {
      int8x16_t lo[2], hi[2];
      UNROLL for (int k = 0; k < 2; k++) {
        uint8x16_t v = vld1q_u8(q + 32 * (w + q5) + 16 * k);
        uint8x16_t l = vandq_u8(v, vdupq_n_u8(0x0f)), h = vshrq_n_u8(v, 4);
        if (q5) { /* bit 2w + hf of each byte of the permuted high bits to bit 4 */
          uint32x4_t qh = vreinterpretq_u32_u8(vld1q_u8(q + 16 * k));
          l = vorrq_u8(l, vandq_u8(vreinterpretq_u8_u32(q5_shift(qh, 2 * w)), vdupq_n_u8(0x10)));
          h = vorrq_u8(h, vandq_u8(vreinterpretq_u8_u32(q5_shift(qh, 2 * w + 1)), vdupq_n_u8(0x10)));
        }
        lo[k] = vsubq_s8(vreinterpretq_s8_u8(l), off);
        hi[k] = vsubq_s8(vreinterpretq_s8_u8(h), off);
      }
      UNROLL for (int i = 0; i < MT; i++) {
        dacc_word(&d[i], lo[0], lo[1], a[i]->qs + 4 * w);
        dacc_word(&d[i], hi[0], hi[1], a[i]->qs + 16 + 4 * w);
      }
    }
  }
  f32x8 dw = head8(gp);
  UNROLL for (int i = 0; i < MT; i++) chain_add(&acc[i].s, dacc_cols(&d[i]), dw, a[i]->d);
  if (di_pk_min(t)) {
    f32x8 mw = head8(gp + DI_PK_M);
    UNROLL for (int i = 0; i < MT; i++) {
      acc[i].s.lo = vfmaq_n_f32(acc[i].s.lo, mw.lo, a[i]->s);
      acc[i].s.hi = vfmaq_n_f32(acc[i].s.hi, mw.hi, a[i]->s);
    }
  }
}

/* ---------------- Q4_K ---------------- */

/* One Q4_K super-block of 8 columns, in the order of di_cpu_qk_block_step:
 * isum = sum_s sc_s * dot_s and imin = sum_s m_s * (sum of x over s), exact in
 * int32 lanes. The 6-bit scales and mins (di_cpu_k_scale_min) are decoded for
 * 4 columns per register: byte 4c + r is sub-block r (low) or 4 + r (high). */
AI void q4k_block(int MT, const uint8_t *gp, const di_act_q8k *const *a, pk_acc *acc) {
  const uint8x16_t m4 = vdupq_n_u8(0x0f), m6 = vdupq_n_u8(0x3f), m2h = vdupq_n_u8(0x30);
  uint8x16_t sc[2][2], mn[2][2]; /* [columns 0-3 / 4-7][sub-blocks 0-3 / 4-7] */
  UNROLL for (int k = 0; k < 2; k++) {
    uint8x16_t A = vld1q_u8(gp + DI_PK_QK_SC + 16 * k), B = vld1q_u8(gp + DI_PK_QK_SC + 32 + 16 * k),
               C = vld1q_u8(gp + DI_PK_QK_SC + 64 + 16 * k);
    sc[k][0] = vandq_u8(A, m6);
    mn[k][0] = vandq_u8(B, m6);
    sc[k][1] = vorrq_u8(vandq_u8(C, m4), vandq_u8(vshrq_n_u8(A, 2), m2h));
    mn[k][1] = vorrq_u8(vshrq_n_u8(C, 4), vandq_u8(vshrq_n_u8(B, 2), m2h));
  }
  const uint8_t *q = gp + DI_PK_Q4K_QS;
  i32x8 isum[MT_MAX];
  UNROLL for (int i = 0; i < MT; i++) isum[i].c[0] = isum[i].c[1] = vdupq_n_s32(0);
  /* The sub-block loop stays rolled: unrolled, the compiler hoists loads across
   * sub-blocks and spills (thousands of stack accesses in the 4-row tiles). */
  UNROLL for (int hs = 0; hs < 2; hs++) NO_UNROLL for (int r = 0; r < 4; r++) {
    /* sub-block s: the words of chunk s / 2, nibble half s & 1. 8 products per
     * int16 lane, each <= 15 * 128: <= 15360. */
    const int s = 4 * hs + r;
    const uint8_t *qc = q + 256 * (s / 2);
    const int8x16_t nsh = vdupq_n_s8((int8_t)(-4 * (s & 1)));
    dacc d[MT_MAX];
    UNROLL for (int i = 0; i < MT; i++) dacc_zero(&d[i]);
    UNROLL for (int w = 0; w < 8; w++) {
      int8x16_t nib[2];
      UNROLL for (int k = 0; k < 2; k++)
        nib[k] = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(vld1q_u8(qc + 32 * w + 16 * k), nsh), m4));
      UNROLL for (int i = 0; i < MT; i++) dacc_word(&d[i], nib[0], nib[1], a[i]->qs + 32 * s + 4 * w);
    }
    int32x4_t scs[2] = {byte_u(sc[0][hs], r), byte_u(sc[1][hs], r)};
    UNROLL for (int i = 0; i < MT; i++) mla8(&isum[i], dacc_cols(&d[i]), scs);
  }
  i32x8 imin[MT_MAX];
  UNROLL for (int i = 0; i < MT; i++) imin[i].c[0] = imin[i].c[1] = vdupq_n_s32(0);
  UNROLL for (int s = 0; s < 8; s++) {
    int32x4_t ms[2] = {byte_u(mn[0][s / 4], s % 4), byte_u(mn[1][s / 4], s % 4)};
    UNROLL for (int i = 0; i < MT; i++) {
      int32_t bs = a[i]->bsums[2 * s] + a[i]->bsums[2 * s + 1];
      UNROLL for (int k = 0; k < 2; k++) imin[i].c[k] = vmlaq_n_s32(imin[i].c[k], ms[k], bs);
    }
  }
  f32x8 dw = head8(gp), dmw = head8(gp + DI_PK_M);
  UNROLL for (int i = 0; i < MT; i++) {
    chain_add(&acc[i].s, isum[i], dw, a[i]->d);
    chain_add(&acc[i].m, imin[i], dmw, -a[i]->d);
  }
}

/* ---------------- Q6_K ---------------- */

/* Word w (0..7) of chunk r (0..3) of half h of a Q6_K super-block as signed
 * quants (-32..31): low nibbles from ql (shifted right by lsh = 4 * (r / 2)),
 * bits 2r, 2r+1 of qh as bits 4, 5 (shifted left by hsh = 4 - 2r; negative
 * is right). Shift vectors, so that r can be a loop variable. */
AI void q6k_word(const uint8_t *q, int h, int r, int w, int8x16_t lsh, int8x16_t hsh, int8x16_t v[2]) {
  UNROLL for (int k = 0; k < 2; k++) {
    uint8x16_t l = vld1q_u8(q + 32 * di_pk_q6k_ql(h, r & 1, w) + 16 * k);
    uint8x16_t hb = vld1q_u8(q + 32 * di_pk_q6k_qh(h, w) + 16 * k);
    l = vandq_u8(vshlq_u8(l, lsh), vdupq_n_u8(0x0f));
    hb = vandq_u8(vshlq_u8(hb, hsh), vdupq_n_u8(0x30));
    v[k] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(l, hb)), vdupq_n_s8(32));
  }
}

/* One Q6_K super-block of 8 columns, in the order of di_cpu_qk_block_step:
 * isum = sum_g sc_g * dot_g, each 16-element group g's 4 words a run (4
 * products per int16 lane, each |q * a| <= 32 * 128: <= 16384), times its int8
 * scale (byte g % 4 of scale word g / 4). The group loop stays rolled (as
 * Q4_K's sub-blocks). */
AI void q6k_block(int MT, const uint8_t *gp, const di_act_q8k *const *a, pk_acc *acc) {
  const uint8_t *q = gp + DI_PK_Q6K_WORDS;
  i32x8 isum[MT_MAX];
  UNROLL for (int i = 0; i < MT; i++) isum[i].c[0] = isum[i].c[1] = vdupq_n_s32(0);
  NO_UNROLL for (int g = 0; g < 16; g++) {
    const int h = g / 8, r = g / 2 % 4, w0 = 4 * (g % 2);
    const int8x16_t lsh = vdupq_n_s8((int8_t)(-4 * (r / 2))), hsh = vdupq_n_s8((int8_t)(4 - 2 * r));
    dacc d[MT_MAX];
    UNROLL for (int i = 0; i < MT; i++) dacc_zero(&d[i]);
    UNROLL for (int w = w0; w < w0 + 4; w++) {
      int8x16_t v[2];
      q6k_word(q, h, r, w, lsh, hsh, v);
      UNROLL for (int i = 0; i < MT; i++) dacc_word(&d[i], v[0], v[1], a[i]->qs + 128 * h + 32 * r + 4 * w);
    }
    int32x4_t scs[2] = {byte_s(vld1q_u8(q + 32 * di_pk_q6k_sc(g / 4)), g % 4), byte_s(vld1q_u8(q + 32 * di_pk_q6k_sc(g / 4) + 16), g % 4)};
    UNROLL for (int i = 0; i < MT; i++) mla8(&isum[i], dacc_cols(&d[i]), scs);
  }
  f32x8 dw = head8(gp);
  UNROLL for (int i = 0; i < MT; i++) chain_add(&acc[i].s, isum[i], dw, a[i]->d);
}

#include "backend/cpu/matmul_pack_tiles.h"
