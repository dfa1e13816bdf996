/* NEON kernels (aarch64, where Advanced SIMD is baseline): F32/F16/BF16 weights
 * with f32 activations, the activation quantizers, and the selector that adds the
 * int8 kernels (matmul_int_neon.h, built for ARMv8.0 and for ARMv8.2 dotprod).
 *
 * Float tiles follow matmul_avx2.c: per output 8 float lanes (two float32x4)
 * updated by one fused multiply-add per 8 elements in K order, AVX2's horizontal
 * sum, then the K % 8 tail in scalar f32. Conversions from F16/BF16 are exact, so
 * results match the AVX2 kernels bit for bit, and the chain of an output does not
 * depend on the tile shape (row invariance). */
#include <arm_neon.h>
#include <string.h>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/matmul_tiles.h"
#include "backend/cpu/neon.h"

/* ---------------- F32 / F16 / BF16 weights, f32 activations ---------------- */

#define fl_QK 8

AI f32x8 fl_load(di_dtype t, const uint8_t *p) {
  f32x8 r;
  if (t == DI_F32) {
    r.lo = vld1q_f32((const float *)p);
    r.hi = vld1q_f32((const float *)p + 4);
  } else if (t == DI_F16) {
    float16x8_t h = vld1q_f16((const __fp16 *)p);
    r.lo = vcvt_f32_f16(vget_low_f16(h));
    r.hi = vcvt_high_f32_f16(h);
  } else { /* BF16: the high half of an f32 */
    uint16x8_t h = vld1q_u16((const uint16_t *)p);
    r.lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
    r.hi = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
  }
  return r;
}

AI float fl_scalar(di_dtype t, const uint8_t *row, int64_t k) {
  if (t == DI_F32) return ((const float *)row)[k];
  di_fp16 h;
  memcpy(&h, row + 2 * k, 2);
  return t == DI_F16 ? di_cpu_fp16_to_f32(h) : di_cpu_bf16_to_f32(h);
}

AI void fl_tile(di_dtype t, int MT, int NT, const uint8_t *w, size_t wrow, const uint8_t *x,
                size_t xrow, int64_t nb, int64_t K, float *Y, int64_t ldy) {
  const int64_t es = t == DI_F32 ? 4 : 2;
  f32x8 acc[MT_MAX][4];
  UNROLL for (int i = 0; i < MT; i++) UNROLL for (int j = 0; j < NT; j++)
    acc[i][j].lo = acc[i][j].hi = vdupq_n_f32(0);
  for (int64_t b = 0; b < nb; b++) {
    f32x8 wv[4];
    UNROLL for (int j = 0; j < NT; j++) wv[j] = fl_load(t, w + j * wrow + b * 8 * es);
    UNROLL for (int i = 0; i < MT; i++) {
      const float *xp = (const float *)(x + i * xrow) + b * 8;
      float32x4_t xlo = vld1q_f32(xp), xhi = vld1q_f32(xp + 4);
      UNROLL for (int j = 0; j < NT; j++) {
        acc[i][j].lo = vfmaq_f32(acc[i][j].lo, wv[j].lo, xlo);
        acc[i][j].hi = vfmaq_f32(acc[i][j].hi, wv[j].hi, xhi);
      }
    }
  }
  UNROLL for (int i = 0; i < MT; i++) UNROLL for (int j = 0; j < NT; j++) {
    const float *xr = (const float *)(x + i * xrow);
    float tail = 0;
    for (int64_t k = nb * 8; k < K; k++) tail += fl_scalar(t, w + j * wrow, k) * xr[k];
    Y[i * ldy + j] = di_neon_hsum8(acc[i][j]) + tail;
  }
}
DEFINE_DRIVER(fl, 4, 2)

DEFINE_WRAP(mm_f32, fl, DI_F32)
DEFINE_WRAP(mm_f16, fl, DI_F16)
DEFINE_WRAP(mm_bf16, fl, DI_BF16)

di_cpu_mm_fn di_cpu_mm_neon(di_dtype t, bool dotprod) {
  switch (t) {
  case DI_F32: return mm_f32;
  case DI_F16: return mm_f16;
  case DI_BF16: return mm_bf16;
  default: return dotprod ? di_cpu_mm_neon_dot(t) : di_cpu_mm_neon_i8(t);
  }
}

/* ---------------- activation quantizers ----------------
 * Bit-identical to the scalar ones in quant.c: the same max (vmaxnm keeps fmaxf's
 * treatment of NaN), the same scale expressions and products, round-half-even
 * (vcvtn), and truncation to int8 like the scalar (int8_t) cast. */

AI float absmax(const float *x, int n) {
  float32x4_t m = vdupq_n_f32(0);
  for (int i = 0; i < n; i += 4) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(x + i)));
  return vmaxnmvq_f32(m);
}

/* 16 floats times sc, rounded (clamped to 127 for Q8_K), stored as int8; returns their sum. */
AI int32_t act_q16(const float *x, float32x4_t sc, bool clamp, int8_t *out) {
  int32x4_t q[4];
  UNROLL for (int i = 0; i < 4; i++) {
    q[i] = vcvtnq_s32_f32(vmulq_f32(vld1q_f32(x + 4 * i), sc));
    if (clamp) q[i] = vminq_s32(q[i], vdupq_n_s32(127));
  }
  int16x8_t a = vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1]));
  int16x8_t b = vcombine_s16(vmovn_s32(q[2]), vmovn_s32(q[3]));
  vst1q_s8(out, vcombine_s8(vmovn_s16(a), vmovn_s16(b)));
  return vaddvq_s32(vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3])));
}

static void actq_q8(const float *x, void *yv, int64_t k) {
  di_act_q8 *y = yv;
  for (int64_t i = 0; i < k / 32; i++, x += 32) {
    float amax = absmax(x, 32), d = amax / 127.0f, id = amax != 0 ? 127.0f / amax : 0.0f;
    float32x4_t sc = vdupq_n_f32(id);
    int32_t s = act_q16(x, sc, false, y[i].qs) + act_q16(x + 16, sc, false, y[i].qs + 16);
    y[i].d = di_cpu_fp16_round(d);
    y[i].s = di_cpu_fp16_round(d * (float)s);
    y[i].sum = s;
  }
}

static void actq_q8k(const float *x, void *yv, int64_t k) {
  di_act_q8k *y = yv;
  for (int64_t i = 0; i < k / 256; i++, x += 256) {
    float amax = absmax(x, 256);
    if (amax == 0) {
      memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    /* the signed value of the first element of largest magnitude, as the scalar scan */
    float max = 0;
    for (int j = 0; j < 256; j++)
      if (x[j] == amax || x[j] == -amax) {
        max = x[j];
        break;
      }
    float iscale = -127.0f / max;
    float32x4_t sc = vdupq_n_f32(iscale);
    for (int g = 0; g < 16; g++) y[i].bsums[g] = (int16_t)act_q16(x + 16 * g, sc, true, y[i].qs + 16 * g);
    y[i].d = 1.0f / iscale;
  }
}

di_cpu_actq_fn di_cpu_actq_neon(di_cpu_act_kind kind) {
  switch (kind) {
  case DI_ACT_Q8: return actq_q8;
  case DI_ACT_Q8K: return actq_q8k;
  default: return NULL;
  }
}
