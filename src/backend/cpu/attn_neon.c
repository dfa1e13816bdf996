/* NEON inner loops of attention: the AVX2 tile (attn_avx2.c) with each 8-lane
 * register as two float32x4, and the same order of additions in the horizontal
 * sums, so scores and outputs match the AVX2 path bit for bit. */
#include <arm_neon.h>
#include <math.h>

#include "backend/cpu/attn.h"
#include "backend/cpu/neon.h"
#include "backend/cpu/softmax_exp.h"

static inline f32x8 load_kv(const uint8_t *p, di_kv_dtype t) {
  f32x8 r;
  if (t == DI_KV_DTYPE_F32) {
    r.lo = vld1q_f32((const float *)p);
    r.hi = vld1q_f32((const float *)p + 4);
  } else if (t == DI_KV_DTYPE_F16) {
    float16x8_t h = vld1q_f16((const __fp16 *)p);
    r.lo = vcvt_f32_f16(vget_low_f16(h));
    r.hi = vcvt_high_f32_f16(h);
  } else {
    uint16x8_t h = vld1q_u16((const uint16_t *)p);
    r.lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
    r.hi = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
  }
  return r;
}

static inline f32x8 fma8(f32x8 acc, f32x8 a, f32x8 b) {
  acc.lo = vfmaq_f32(acc.lo, a.lo, b.lo);
  acc.hi = vfmaq_f32(acc.hi, a.hi, b.hi);
  return acc;
}

/* AVX2's hadd tree for one vector: ((0+1) + (2+3)) + ((4+5) + (6+7)). */
static inline float hadd8(f32x8 v) {
  float32x4_t p = vpaddq_f32(v.lo, v.hi);
  p = vpaddq_f32(p, p);
  return vgetq_lane_f32(p, 0) + vgetq_lane_f32(p, 1);
}

void di_cpu_attn_tile_neon(const float *q, const uint8_t *const *krow, const uint8_t *const *vrow, int n, int hd,
                           di_kv_dtype t, float scale, float softcap, di_attn_partial *out) {
  const size_t es = t == DI_KV_DTYPE_F32 ? 4 : 2;
  float s[DI_ATTN_TILE];
  for (int j0 = 0; j0 < n; j0 += 8) {
    f32x8 acc[8];
    int m = n - j0 < 8 ? n - j0 : 8;
    for (int r = 0; r < 8; r++) acc[r].lo = acc[r].hi = vdupq_n_f32(0);
    for (int d = 0; d < hd; d += 8) {
      f32x8 qv = {vld1q_f32(q + d), vld1q_f32(q + d + 4)};
      for (int r = 0; r < m; r++) acc[r] = fma8(acc[r], qv, load_kv(krow[j0 + r] + (size_t)d * es, t));
    }
    for (int r = 0; r < m; r++) {
      float x = hadd8(acc[r]) * scale;
      s[j0 + r] = softcap > 0 ? softcap * tanhf(x / softcap) : x;
    }
  }
  float mx = -INFINITY;
  for (int j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
  int j = 0;
  for (; j + 4 <= n; j += 4) vst1q_f32(s + j, di_softmax_exp_neon(vsubq_f32(vld1q_f32(s + j), vdupq_n_f32(mx))));
  for (; j < n; j++) s[j] = di_softmax_exp(s[j] - mx);
  float l = 0;
  for (j = 0; j < n; j++) l += s[j];
  for (int d0 = 0; d0 < hd; d0 += 64) {
    int w = hd - d0 < 64 ? (hd - d0) / 8 : 8;
    f32x8 acc[8];
    for (int r = 0; r < w; r++) acc[r].lo = acc[r].hi = vdupq_n_f32(0);
    for (int j = 0; j < n; j++) {
      f32x8 p = {vdupq_n_f32(s[j]), vdupq_n_f32(s[j])};
      const uint8_t *v = vrow[j] + (size_t)d0 * es;
      for (int r = 0; r < w; r++) acc[r] = fma8(acc[r], p, load_kv(v + (size_t)r * 8 * es, t));
    }
    for (int r = 0; r < w; r++) {
      vst1q_f32(out->acc + d0 + r * 8, acc[r].lo);
      vst1q_f32(out->acc + d0 + r * 8 + 4, acc[r].hi);
    }
  }
  out->m = mx;
  out->l = l;
}

void di_cpu_softmax_exp_neon(const float *x, float *y, int n) {
  int i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, di_softmax_exp_neon(vld1q_f32(x + i)));
  for (; i < n; i++) y[i] = di_softmax_exp(x[i]);
}
