/* Scalar reference: dequantization, ggml-compatible weight quantizers and the
 * activation quantizers. Dequantization evaluates in the same order as gguf-py
 * (scale products first, no fused multiply-add: the kernels are built with
 * -ffp-contract=off) so it is bit-exact with it. */
#include "backend/cpu/quant.h"

#include <math.h>

#include "backend/cpu/matmul.h"

di_fp16 di_cpu_f32_to_fp16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (di_fp16)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
  if (ax >= 0x477ff000u) return (di_fp16)(sign | 0x7c00); /* >= 65520 rounds to inf */
  if (ax < 0x38800000u) { /* below 2^-14: fp16 subnormal, units of 2^-24 */
    float a;
    memcpy(&a, &ax, 4);
    return (di_fp16)(sign | (uint32_t)nearbyintf(a * 0x1p24f));
  }
  uint32_t r = ax - 0x38000000u; /* rebias exponent 127 -> 15 */
  r += 0xfffu + ((r >> 13) & 1);
  return (di_fp16)(sign | (r >> 13));
}

/* ---- dequantization, one block each ---- */

static void dq_q4_0(const void *p, float *y) {
  const di_block_q4_0 *b = p;
  float d = di_cpu_fp16_to_f32(b->d);
  for (int j = 0; j < 16; j++) {
    y[j] = d * (float)((b->qs[j] & 0x0f) - 8);
    y[j + 16] = d * (float)((b->qs[j] >> 4) - 8);
  }
}

static void dq_q4_1(const void *p, float *y) {
  const di_block_q4_1 *b = p;
  float d = di_cpu_fp16_to_f32(b->d), m = di_cpu_fp16_to_f32(b->m);
  for (int j = 0; j < 16; j++) {
    y[j] = d * (float)(b->qs[j] & 0x0f) + m;
    y[j + 16] = d * (float)(b->qs[j] >> 4) + m;
  }
}

static uint32_t qh32(const uint8_t *qh) {
  return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static void dq_q5_0(const void *p, float *y) {
  const di_block_q5_0 *b = p;
  float d = di_cpu_fp16_to_f32(b->d);
  uint32_t qh = qh32(b->qh);
  for (int j = 0; j < 16; j++) {
    int lo = (b->qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
    int hi = (b->qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
    y[j] = d * (float)(lo - 16);
    y[j + 16] = d * (float)(hi - 16);
  }
}

static void dq_q5_1(const void *p, float *y) {
  const di_block_q5_1 *b = p;
  float d = di_cpu_fp16_to_f32(b->d), m = di_cpu_fp16_to_f32(b->m);
  uint32_t qh = qh32(b->qh);
  for (int j = 0; j < 16; j++) {
    int lo = (b->qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
    int hi = (b->qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
    y[j] = d * (float)lo + m;
    y[j + 16] = d * (float)hi + m;
  }
}

static void dq_q8_0(const void *p, float *y) {
  const di_block_q8_0 *b = p;
  float d = di_cpu_fp16_to_f32(b->d);
  for (int j = 0; j < 32; j++) y[j] = d * (float)b->qs[j];
}

static void dq_mxfp4(const void *p, float *y) {
  const di_block_mxfp4 *b = p;
  float d = di_e8m0_half(b->e);
  for (int j = 0; j < 16; j++) {
    y[j] = d * (float)di_mxfp4_kv[b->qs[j] & 15];
    y[j + 16] = d * (float)di_mxfp4_kv[b->qs[j] >> 4];
  }
}

/* Q4_K and Q5_K differ only in the fifth bit (qh == NULL for Q4_K). */
static void dq_k_4_5(di_fp16 dh, di_fp16 dminh, const uint8_t *scales, const uint8_t *qh,
                     const uint8_t *qs, float *y) {
  float d = di_cpu_fp16_to_f32(dh), dmin = di_cpu_fp16_to_f32(dminh);
  for (int j = 0; j < 8; j++) {
    uint8_t sc, m;
    di_cpu_k_scale_min(scales, j, &sc, &m);
    float d1 = d * (float)sc, m1 = dmin * (float)m;
    const uint8_t *q = qs + 32 * (j / 2);
    int shift = (j & 1) * 4;
    for (int l = 0; l < 32; l++) {
      int v = (q[l] >> shift) & 0x0f;
      if (qh) v |= ((qh[l] >> j) & 1) << 4;
      y[32 * j + l] = d1 * (float)v - m1;
    }
  }
}

static void dq_q4_K(const void *p, float *y) {
  const di_block_q4_K *b = p;
  dq_k_4_5(b->d, b->dmin, b->scales, NULL, b->qs, y);
}

static void dq_q5_K(const void *p, float *y) {
  const di_block_q5_K *b = p;
  dq_k_4_5(b->d, b->dmin, b->scales, b->qh, b->qs, y);
}

static void dq_q6_K(const void *p, float *y) {
  const di_block_q6_K *b = p;
  float d = di_cpu_fp16_to_f32(b->d);
  for (int half = 0; half < 2; half++) {
    const uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
    const int8_t *sc = b->scales + 8 * half;
    float *o = y + 128 * half;
    for (int l = 0; l < 32; l++) {
      int is = l / 16;
      int q1 = ((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
      int q2 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
      int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
      int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
      o[l] = d * (float)sc[is + 0] * (float)q1;
      o[l + 32] = d * (float)sc[is + 2] * (float)q2;
      o[l + 64] = d * (float)sc[is + 4] * (float)q3;
      o[l + 96] = d * (float)sc[is + 6] * (float)q4;
    }
  }
}

void di_cpu_dequant_row(di_dtype t, const void *src, float *dst, int64_t n) {
  void (*fn)(const void *, float *) = NULL;
  switch (t) {
  case DI_F32: memcpy(dst, src, (size_t)n * 4); return;
  case DI_F16:
    for (int64_t i = 0; i < n; i++) dst[i] = di_cpu_fp16_to_f32(((const di_fp16 *)src)[i]);
    return;
  case DI_BF16:
    for (int64_t i = 0; i < n; i++) dst[i] = di_cpu_bf16_to_f32(((const di_bf16 *)src)[i]);
    return;
  case DI_Q4_0: fn = dq_q4_0; break;
  case DI_Q4_1: fn = dq_q4_1; break;
  case DI_Q5_0: fn = dq_q5_0; break;
  case DI_Q5_1: fn = dq_q5_1; break;
  case DI_Q8_0: fn = dq_q8_0; break;
  case DI_MXFP4: fn = dq_mxfp4; break;
  case DI_Q4_K: fn = dq_q4_K; break;
  case DI_Q5_K: fn = dq_q5_K; break;
  case DI_Q6_K: fn = dq_q6_K; break;
  default: memset(dst, 0, (size_t)n * 4); return; /* callers check di_cpu_dtype_supported */
  }
  int64_t qk = di_dtype_block(t);
  size_t bb = di_dtype_block_bytes(t);
  for (int64_t i = 0; i < n / qk; i++) fn((const uint8_t *)src + (size_t)i * bb, dst + i * qk);
}

/* ---- weight quantizers, following ggml's reference ones ---- */

/* The element of largest magnitude, keeping its sign (first one on ties). */
static float signed_absmax(const float *x, int n) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; j++)
    if (fabsf(x[j]) > amax) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  return max;
}

static void minmax(const float *x, int n, float *mn, float *mx) {
  *mn = x[0];
  *mx = x[0];
  for (int j = 1; j < n; j++) {
    if (x[j] < *mn) *mn = x[j];
    if (x[j] > *mx) *mx = x[j];
  }
}

/* Symmetric 4/5-bit (Q4_0, Q5_0): d = max / -2^(bits-1), q = trunc(x/d + 2^(bits-1) + .5). */
static void q_sym(const float *x, int bits, di_fp16 *dh, uint8_t *qs, uint8_t *qh) {
  float half = (float)(1 << (bits - 1)), d = signed_absmax(x, 32) / -half;
  float id = d != 0 ? 1.0f / d : 0.0f;
  int qmax = (1 << bits) - 1;
  uint32_t h = 0;
  *dh = di_cpu_f32_to_fp16(d);
  for (int j = 0; j < 16; j++) {
    int a = (int8_t)(x[j] * id + (half + 0.5f)), b = (int8_t)(x[j + 16] * id + (half + 0.5f));
    a = a > qmax ? qmax : a;
    b = b > qmax ? qmax : b;
    qs[j] = (uint8_t)((a & 0x0f) | (b & 0x0f) << 4);
    h |= (uint32_t)((a >> 4) & 1) << j | (uint32_t)((b >> 4) & 1) << (j + 16);
  }
  if (qh) memcpy(qh, &(uint8_t[4]){(uint8_t)h, (uint8_t)(h >> 8), (uint8_t)(h >> 16), (uint8_t)(h >> 24)}, 4);
}

/* Asymmetric 4/5-bit (Q4_1, Q5_1): d = (max - min) / (2^bits - 1), q = trunc((x-min)/d + .5). */
static void q_asym(const float *x, int bits, di_fp16 *dh, di_fp16 *mh, uint8_t *qs, uint8_t *qh) {
  float mn, mx;
  minmax(x, 32, &mn, &mx);
  int qmax = (1 << bits) - 1;
  float d = (mx - mn) / (float)qmax, id = d != 0 ? 1.0f / d : 0.0f;
  uint32_t h = 0;
  *dh = di_cpu_f32_to_fp16(d);
  *mh = di_cpu_f32_to_fp16(mn);
  for (int j = 0; j < 16; j++) {
    int a = (uint8_t)((x[j] - mn) * id + 0.5f), b = (uint8_t)((x[j + 16] - mn) * id + 0.5f);
    a = a > qmax ? qmax : a;
    b = b > qmax ? qmax : b;
    qs[j] = (uint8_t)((a & 0x0f) | (b & 0x0f) << 4);
    h |= (uint32_t)((a >> 4) & 1) << j | (uint32_t)((b >> 4) & 1) << (j + 16);
  }
  if (qh) memcpy(qh, &(uint8_t[4]){(uint8_t)h, (uint8_t)(h >> 8), (uint8_t)(h >> 16), (uint8_t)(h >> 24)}, 4);
}

bool di_cpu_quantize_row(di_dtype t, const float *x, void *dst, int64_t n) {
  uint8_t *o = dst;
  switch (t) {
  case DI_F32: memcpy(dst, x, (size_t)n * 4); return true;
  case DI_F16:
    for (int64_t i = 0; i < n; i++) ((di_fp16 *)dst)[i] = di_cpu_f32_to_fp16(x[i]);
    return true;
  case DI_BF16:
    for (int64_t i = 0; i < n; i++) ((di_bf16 *)dst)[i] = di_cpu_f32_to_bf16(x[i]);
    return true;
  case DI_Q4_0:
    for (int64_t i = 0; i < n / 32; i++) {
      di_block_q4_0 *b = (di_block_q4_0 *)o + i;
      q_sym(x + 32 * i, 4, &b->d, b->qs, NULL);
    }
    return true;
  case DI_Q5_0:
    for (int64_t i = 0; i < n / 32; i++) {
      di_block_q5_0 *b = (di_block_q5_0 *)o + i;
      q_sym(x + 32 * i, 5, &b->d, b->qs, b->qh);
    }
    return true;
  case DI_Q4_1:
    for (int64_t i = 0; i < n / 32; i++) {
      di_block_q4_1 *b = (di_block_q4_1 *)o + i;
      q_asym(x + 32 * i, 4, &b->d, &b->m, b->qs, NULL);
    }
    return true;
  case DI_Q5_1:
    for (int64_t i = 0; i < n / 32; i++) {
      di_block_q5_1 *b = (di_block_q5_1 *)o + i;
      q_asym(x + 32 * i, 5, &b->d, &b->m, b->qs, b->qh);
    }
    return true;
  case DI_Q8_0:
    for (int64_t i = 0; i < n / 32; i++) {
      di_block_q8_0 *b = (di_block_q8_0 *)o + i;
      const float *xb = x + 32 * i;
      float amax = 0;
      for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(xb[j]));
      float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
      b->d = di_cpu_f32_to_fp16(d);
      for (int j = 0; j < 32; j++) b->qs[j] = (int8_t)roundf(xb[j] * id);
    }
    return true;
  default: return false;
  }
}

/* ---- activation quantizers: ggml's (AVX2 build), value for value. The AVX2
 * versions in matmul_avx2.c produce the same bytes: same max, same scale
 * expressions, same product, round-half-even (nearbyintf in the default rounding
 * mode, like _mm256_round_ps and ggml's nearest_int). ---- */

void di_cpu_quantize_act_q8(const float *x, di_act_q8 *y, int64_t k) {
  for (int64_t i = 0; i < k / 32; i++, x += 32) {
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    /* ggml multiplies by 127/amax, not by 1/d: the two differ in the last bit */
    float d = amax / 127.0f, id = amax != 0 ? 127.0f / amax : 0.0f;
    int32_t s = 0;
    for (int j = 0; j < 32; j++) {
      int q = (int)nearbyintf(x[j] * id);
      y[i].qs[j] = (int8_t)q;
      s += q;
    }
    y[i].d = di_cpu_fp16_round(d);
    y[i].s = di_cpu_fp16_round(d * (float)s);
    y[i].sum = s;
  }
}

void di_cpu_quantize_act_q8k(const float *x, di_act_q8k *y, int64_t k) {
  for (int64_t i = 0; i < k / 256; i++, x += 256) {
    float amax = 0, max = 0;
    for (int j = 0; j < 256; j++)
      if (fabsf(x[j]) > amax) {
        amax = fabsf(x[j]);
        max = x[j];
      }
    if (amax == 0) {
      memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    float iscale = -127.0f / max;
    for (int g = 0; g < 16; g++) {
      int s = 0;
      for (int j = 16 * g; j < 16 * g + 16; j++) {
        int q = (int)nearbyintf(iscale * x[j]);
        q = q < 127 ? q : 127;
        y[i].qs[j] = (int8_t)q;
        s += q;
      }
      y[i].bsums[g] = (int16_t)s;
    }
    y[i].d = 1.0f / iscale;
  }
}
