/* NEON int8 kernels (quantized weights x Q8_0/Q8_1/Q8_K activations), written once
 * and compiled twice: matmul_int_neon.c (ARMv8.0: widening multiplies) and
 * matmul_dot_neon.c (-march=armv8.2-a+dotprod: SDOT), defining NEON_DOT 0 or 1 and
 * NEON_INT_ENTRY, the name of the exported selector. Which one runs is chosen at
 * run time from HWCAP_ASIMDDP (isa.c).
 *
 * The arithmetic is matmul_avx2.c's, lane for lane: every int32 lane holds the
 * exact integer sum over 4 consecutive elements (times the group scale for the
 * K-quants), each output keeps 8 float lanes (two float32x4) updated by
 * fma(float(lanes), d_w * d_a) per block, the min terms go to their own
 * accumulator, and the final horizontal sum pairs the lanes in AVX2's order.
 * Integer sums are exact whatever instruction forms them, so the two builds agree
 * bit for bit with each other (and with the AVX2 kernels). The chain of an output
 * does not depend on the tile shape: row invariance within NEON. */
#include <arm_neon.h>
#include <string.h>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/matmul_tiles.h"
#include "backend/cpu/neon.h"

/* acc + per-lane sums of 4 consecutive products of a and b (16 int8 each). */
AI int32x4_t dot4(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if NEON_DOT
  return vdotq_s32(acc, a, b);
#else
  /* |product| <= 128 * 128 fits int16; pairwise widening then pairwise add
   * give the 4-element sums in lane order. */
  int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b)), hi = vmull_high_s8(a, b);
  return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
#endif
}

AI float fp16_at(const uint8_t *p) {
  __fp16 h;
  memcpy(&h, p, 2);
  return (float)h;
}

AI size_t block_bytes(di_dtype t) {
  switch (t) {
  case DI_Q4_0: return sizeof(di_block_q4_0);
  case DI_Q4_1: return sizeof(di_block_q4_1);
  case DI_Q5_0: return sizeof(di_block_q5_0);
  case DI_Q5_1: return sizeof(di_block_q5_1);
  case DI_Q8_0: return sizeof(di_block_q8_0);
  case DI_Q4_K: return sizeof(di_block_q4_K);
  case DI_Q5_K: return sizeof(di_block_q5_K);
  default: return sizeof(di_block_q6_K);
  }
}

/* ---------------- 32-element blocks with Q8 activations ---------------- */

#define q32_QK 32

typedef struct {
  int8x16_t q[2]; /* the 32 weights as signed integers, offsets applied */
  float d, m;
} q32_w;

/* Bit j of the 16 bits at qh, as 0x10 in byte j. */
AI uint8x16_t fifth_bits(const uint8_t *qh) {
  static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  uint8x16_t b = vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1]));
  return vandq_u8(vtstq_u8(b, vld1q_u8(bits)), vdupq_n_u8(0x10));
}

AI void q32_load(di_dtype t, const uint8_t *p, q32_w *w) {
  w->d = fp16_at(p);
  w->m = 0;
  if (t == DI_Q8_0) {
    w->q[0] = vld1q_s8((const int8_t *)(p + 2));
    w->q[1] = vld1q_s8((const int8_t *)(p + 18));
    return;
  }
  /* qs offset: after d (Q4_0), d+m (Q4_1), d+qh (Q5_0), d+m+qh (Q5_1) */
  size_t qs = t == DI_Q4_0 ? 2 : t == DI_Q4_1 ? 4 : t == DI_Q5_0 ? 6 : 8;
  uint8x16_t v = vld1q_u8(p + qs);
  uint8x16_t lo = vandq_u8(v, vdupq_n_u8(0x0f)), hi = vshrq_n_u8(v, 4);
  if (t == DI_Q5_0 || t == DI_Q5_1) {
    const uint8_t *qh = p + qs - 4;
    lo = vorrq_u8(lo, fifth_bits(qh));
    hi = vorrq_u8(hi, fifth_bits(qh + 2));
  }
  int off = t == DI_Q4_0 ? 8 : t == DI_Q5_0 ? 16 : 0;
  w->q[0] = vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8((int8_t)off));
  w->q[1] = vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8((int8_t)off));
  if (t == DI_Q4_1 || t == DI_Q5_1) w->m = fp16_at(p + 2);
}

typedef struct { f32x8 v; float m; } q32_acc;

AI void q32_step(di_dtype t, const q32_w *w, const di_act_q8 *a, q32_acc *acc) {
  int32x4_t s0 = dot4(vdupq_n_s32(0), w->q[0], vld1q_s8(a->qs));
  int32x4_t s1 = dot4(vdupq_n_s32(0), w->q[1], vld1q_s8(a->qs + 16));
  float32x4_t dd = vdupq_n_f32(w->d * a->d);
  acc->v.lo = vfmaq_f32(acc->v.lo, vcvtq_f32_s32(s0), dd);
  acc->v.hi = vfmaq_f32(acc->v.hi, vcvtq_f32_s32(s1), dd);
  if (t == DI_Q4_1 || t == DI_Q5_1) acc->m += w->m * a->s;
}

AI void q32_tile(di_dtype t, int MT, int NT, const uint8_t *w, size_t wrow, const uint8_t *x,
                 size_t xrow, int64_t nb, int64_t K, float *Y, int64_t ldy) {
  const size_t bb = block_bytes(t);
  q32_acc acc[MT_MAX][4];
  UNROLL for (int i = 0; i < MT; i++) UNROLL for (int j = 0; j < NT; j++) {
    acc[i][j].v.lo = acc[i][j].v.hi = vdupq_n_f32(0);
    acc[i][j].m = 0;
  }
  for (int64_t b = 0; b < nb; b++) {
    q32_w wv[4];
    UNROLL for (int j = 0; j < NT; j++) q32_load(t, w + j * wrow + b * bb, &wv[j]);
    UNROLL for (int i = 0; i < MT; i++) {
      const di_act_q8 *a = (const di_act_q8 *)(x + i * xrow) + b;
      UNROLL for (int j = 0; j < NT; j++) q32_step(t, &wv[j], a, &acc[i][j]);
    }
  }
  UNROLL for (int i = 0; i < MT; i++) UNROLL for (int j = 0; j < NT; j++)
    Y[i * ldy + j] = di_neon_hsum8(acc[i][j].v) + acc[i][j].m;
}
DEFINE_DRIVER(q32, 2, 2)

/* ---------------- K-quants (256-element super-blocks) with Q8_K activations ----------------
 * Per super-block and (m,n): 8 int32 lanes of sum over the 8 chunks of 32 of
 * scale * (4-element dot); the mins as 4 lanes of min * (pairwise bsums), like
 * AVX2's madd. NT is 1: chunks are unpacked one at a time and reused across MT. */

#define qk_QK 256

typedef struct {
  const uint8_t *p;
  float d, dmin;
  int16x8_t mins; /* Q4_K/Q5_K */
  int32_t sc[16]; /* scale of each 16-element group */
} qk_w;

AI void qk_load(di_dtype t, const uint8_t *p, qk_w *w) {
  w->p = p;
  if (t == DI_Q6_K) {
    w->d = fp16_at(p + 208);
    for (int g = 0; g < 16; g++) w->sc[g] = ((const int8_t *)p)[192 + g];
    return;
  }
  w->d = fp16_at(p);
  w->dmin = fp16_at(p + 2);
  int16_t mn[8];
  for (int j = 0; j < 8; j++) {
    uint8_t sc, m;
    di_cpu_k_scale_min(p + 4, j, &sc, &m);
    w->sc[2 * j] = w->sc[2 * j + 1] = sc;
    mn[j] = m;
  }
  w->mins = vld1q_s16(mn);
}

/* Chunk c (0..7) of 32 weights as signed integers (Q6_K: q - 32). */
AI void qk_chunk(di_dtype t, const qk_w *w, int c, int8x16_t q[2]) {
  const uint8x16_t m4 = vdupq_n_u8(0x0f);
  UNROLL for (int h = 0; h < 2; h++) {
    uint8x16_t v;
    if (t == DI_Q6_K) {
      int half = c / 4, r = c % 4;
      uint8x16_t l = vld1q_u8(w->p + 64 * half + 32 * (r & 1) + 16 * h);
      uint8x16_t hb = vld1q_u8(w->p + 128 + 32 * half + 16 * h);
      l = r < 2 ? vandq_u8(l, m4) : vshrq_n_u8(l, 4);
      /* bits 2r, 2r+1 of qh to bits 4, 5 */
      hb = r == 0 ? vshlq_n_u8(hb, 4) : r == 1 ? vshlq_n_u8(hb, 2) : r == 2 ? hb : vshrq_n_u8(hb, 2);
      v = vorrq_u8(l, vandq_u8(hb, vdupq_n_u8(0x30)));
      q[h] = vsubq_s8(vreinterpretq_s8_u8(v), vdupq_n_s8(32));
      continue;
    }
    const uint8_t *qs = w->p + (t == DI_Q5_K ? 48 : 16);
    v = vld1q_u8(qs + 32 * (c / 2) + 16 * h);
    v = c & 1 ? vshrq_n_u8(v, 4) : vandq_u8(v, m4);
    if (t == DI_Q5_K) {
      uint8x16_t hb = vld1q_u8(w->p + 16 + 16 * h);
      /* bit c of qh to bit 4 */
      hb = vandq_u8(vtstq_u8(hb, vdupq_n_u8((uint8_t)(1u << c))), vdupq_n_u8(0x10));
      v = vorrq_u8(v, hb);
    }
    q[h] = vreinterpretq_s8_u8(v);
  }
}

AI void qk_tile(di_dtype t, int MT, int NT, const uint8_t *w, size_t wrow, const uint8_t *x,
                size_t xrow, int64_t nb, int64_t K, float *Y, int64_t ldy) {
  const size_t bb = block_bytes(t);
  f32x8 acc[MT_MAX];
  float32x4_t accm[MT_MAX];
  float summ[MT_MAX];
  UNROLL for (int i = 0; i < MT; i++) {
    acc[i].lo = acc[i].hi = accm[i] = vdupq_n_f32(0);
    summ[i] = 0;
  }
  for (int64_t b = 0; b < nb; b++) {
    qk_w wv;
    qk_load(t, w + b * bb, &wv);
    int32x4_t isum[MT_MAX][2];
    UNROLL for (int i = 0; i < MT; i++) isum[i][0] = isum[i][1] = vdupq_n_s32(0);
    UNROLL for (int c = 0; c < 8; c++) {
      int8x16_t q[2];
      qk_chunk(t, &wv, c, q);
      UNROLL for (int i = 0; i < MT; i++) {
        const di_act_q8k *a = (const di_act_q8k *)(x + i * xrow) + b;
        UNROLL for (int h = 0; h < 2; h++) {
          int32x4_t d = dot4(vdupq_n_s32(0), q[h], vld1q_s8(a->qs + 32 * c + 16 * h));
          isum[i][h] = vmlaq_n_s32(isum[i][h], d, wv.sc[2 * c + h]);
        }
      }
    }
    UNROLL for (int i = 0; i < MT; i++) {
      const di_act_q8k *a = (const di_act_q8k *)(x + i * xrow) + b;
      float32x4_t dd = vdupq_n_f32(a->d * wv.d);
      acc[i].lo = vfmaq_f32(acc[i].lo, dd, vcvtq_f32_s32(isum[i][0]));
      acc[i].hi = vfmaq_f32(acc[i].hi, dd, vcvtq_f32_s32(isum[i][1]));
      if (t == DI_Q6_K) continue;
      /* bsums of 32-element sub-blocks, then min * sum pairwise: AVX2's hadd + madd */
      int16x8_t q8s = vpaddq_s16(vld1q_s16(a->bsums), vld1q_s16(a->bsums + 8));
      int32x4_t prod = vpaddq_s32(vmull_s16(vget_low_s16(wv.mins), vget_low_s16(q8s)),
                                  vmull_high_s16(wv.mins, q8s));
      float dmin = -a->d * wv.dmin;
      if (t == DI_Q4_K)
        accm[i] = vfmaq_f32(accm[i], vdupq_n_f32(dmin), vcvtq_f32_s32(prod));
      else
        summ[i] += dmin * (float)vaddvq_s32(prod);
    }
  }
  UNROLL for (int i = 0; i < MT; i++)
    Y[i * ldy] = di_neon_hsum8(acc[i]) + (t == DI_Q4_K ? di_neon_hsum4(accm[i]) : summ[i]);
}
DEFINE_DRIVER(qk, 1, 1)

DEFINE_WRAP(mm_q4_0, q32, DI_Q4_0)
DEFINE_WRAP(mm_q4_1, q32, DI_Q4_1)
DEFINE_WRAP(mm_q5_0, q32, DI_Q5_0)
DEFINE_WRAP(mm_q5_1, q32, DI_Q5_1)
DEFINE_WRAP(mm_q8_0, q32, DI_Q8_0)
DEFINE_WRAP(mm_q4_K, qk, DI_Q4_K)
DEFINE_WRAP(mm_q5_K, qk, DI_Q5_K)
DEFINE_WRAP(mm_q6_K, qk, DI_Q6_K)

di_cpu_mm_fn NEON_INT_ENTRY(di_dtype t) {
  switch (t) {
  case DI_Q4_0: return mm_q4_0;
  case DI_Q4_1: return mm_q4_1;
  case DI_Q5_0: return mm_q5_0;
  case DI_Q5_1: return mm_q5_1;
  case DI_Q8_0: return mm_q8_0;
  case DI_Q4_K: return mm_q4_K;
  case DI_Q5_K: return mm_q5_K;
  case DI_Q6_K: return mm_q6_K;
  default: return NULL;
  }
}
