#include "backend/cpu/attn.h"

#include <math.h>

#include "backend/cpu/isa.h"
#include "backend/cpu/softmax_exp.h"
#include "util/fp16.h"

static float dot_f32(const float *q, const void *k, int n) {
  const float *x = k;
  float s = 0;
  for (int i = 0; i < n; i++) s += q[i] * x[i];
  return s;
}
static float dot_f16(const float *q, const void *k, int n) {
  const uint16_t *x = k;
  float s = 0;
  for (int i = 0; i < n; i++) s += q[i] * di_f16_to_f32(x[i]);
  return s;
}
static float dot_bf16(const float *q, const void *k, int n) {
  const uint16_t *x = k;
  float s = 0;
  for (int i = 0; i < n; i++) s += q[i] * di_bf16_to_f32(x[i]);
  return s;
}
static void axpy_f32(float *acc, float p, const void *v, int n) {
  const float *x = v;
  for (int i = 0; i < n; i++) acc[i] += p * x[i];
}
static void axpy_f16(float *acc, float p, const void *v, int n) {
  const uint16_t *x = v;
  for (int i = 0; i < n; i++) acc[i] += p * di_f16_to_f32(x[i]);
}
static void axpy_bf16(float *acc, float p, const void *v, int n) {
  const uint16_t *x = v;
  for (int i = 0; i < n; i++) acc[i] += p * di_bf16_to_f32(x[i]);
}

/* Portable reference path, per KV element type (the AVX2 path does a whole tile at once). */
typedef float (*kv_dot_fn)(const float *q, const void *k, int n);
typedef void (*kv_axpy_fn)(float *acc, float p, const void *v, int n);
static const kv_dot_fn dots[] = {[DI_KV_DTYPE_F16] = dot_f16, [DI_KV_DTYPE_F32] = dot_f32, [DI_KV_DTYPE_BF16] = dot_bf16};
static const kv_axpy_fn axpys[] = {[DI_KV_DTYPE_F16] = axpy_f16, [DI_KV_DTYPE_F32] = axpy_f32, [DI_KV_DTYPE_BF16] = axpy_bf16};

/* K and V rows of head kvh for positions [lo, hi], one block at a time: inside
 * a block a head's positions are rows head_dim elements apart. */
static void kv_rows(const di_kv_pool *kv, int layer, const int32_t *blocks, int kvh, int head_dim, int lo, int hi,
                    const uint8_t **kr, const uint8_t **vr) {
  const int bs = kv->block_size;
  const size_t row = (size_t)head_dim * kv->elt_bytes;
  for (int j = lo; j <= hi;) {
    int blk = j / bs, end = (blk + 1) * bs - 1 < hi ? (blk + 1) * bs - 1 : hi;
    size_t o = di_kv_head_offset(kv, kvh, j % bs, head_dim);
    const uint8_t *k = (const uint8_t *)di_kv_k(kv, blocks[blk], layer) + o;
    const uint8_t *v = (const uint8_t *)di_kv_v(kv, blocks[blk], layer) + o;
    for (; j <= end; j++, k += row, v += row) {
      kr[j - lo] = k;
      vr[j - lo] = v;
    }
  }
}

void di_cpu_attn_tile(const di_kv_pool *kv, int layer, const int32_t *blocks, int kvh, int head_dim, const float *q,
                      int lo, int hi, float scale, float softcap, di_attn_partial *out) {
  di_attn_tile_simd_fn simd = NULL;
#if defined(DI_CPU_X86)
  if (di_cpu_isa() >= DI_ISA_AVX2) simd = di_cpu_attn_tile_avx2;
#elif defined(DI_CPU_ARM64)
  if (di_cpu_isa() == DI_ISA_NEON) simd = di_cpu_attn_tile_neon;
#endif
  const uint8_t *kr[DI_ATTN_TILE], *vr[DI_ATTN_TILE];
  kv_rows(kv, layer, blocks, kvh, head_dim, lo, hi, kr, vr);
  if (simd && head_dim % 8 == 0) {
    simd(q, kr, vr, hi - lo + 1, head_dim, kv->type, scale, softcap, out);
    return;
  }
  const kv_dot_fn dot = dots[kv->type];
  const kv_axpy_fn axpy = axpys[kv->type];
  float s[DI_ATTN_TILE];
  float mx = -INFINITY;
  for (int j = lo; j <= hi; j++) {
    float x = dot(q, kr[j - lo], head_dim) * scale;
    if (softcap > 0) x = softcap * tanhf(x / softcap);
    s[j - lo] = x;
    if (x > mx) mx = x;
  }
  float l = 0;
  for (int d = 0; d < head_dim; d++) out->acc[d] = 0;
  for (int j = lo; j <= hi; j++) {
    float p = di_softmax_exp(s[j - lo] - mx);
    l += p;
    axpy(out->acc, p, vr[j - lo], head_dim);
  }
  out->m = mx;
  out->l = l;
}

void di_cpu_attn_tile_group(const di_kv_pool *kv, int layer, const int32_t *blocks, int kvh, int head_dim,
                            const float *const *q, int nq, int lo, int hi, const int *qhi, float scale, float softcap,
                            di_attn_partial *const *out) {
#if defined(DI_CPU_X86)
  if (nq > 1 && di_cpu_isa() >= DI_ISA_AVX2 && head_dim % 8 == 0) {
    const uint8_t *kr[DI_ATTN_TILE], *vr[DI_ATTN_TILE];
    kv_rows(kv, layer, blocks, kvh, head_dim, lo, hi, kr, vr);
    int qn[DI_ATTN_MAX_Q];
    for (int i = 0; qhi && i < nq; i++) qn[i] = qhi[i] - lo + 1;
    if (di_cpu_isa() >= DI_ISA_AVX512)
      di_cpu_attn_tile_group_avx512(q, nq, kr, vr, hi - lo + 1, qhi ? qn : NULL, head_dim, kv->type, scale, softcap,
                                    out);
    else
      di_cpu_attn_tile_group_avx2(q, nq, kr, vr, hi - lo + 1, qhi ? qn : NULL, head_dim, kv->type, scale, softcap,
                                  out);
    return;
  }
#endif
  for (int i = 0; i < nq; i++)
    di_cpu_attn_tile(kv, layer, blocks, kvh, head_dim, q[i], lo, qhi ? qhi[i] : hi, scale, softcap, out[i]);
}

void di_cpu_attn_merge(const di_attn_partial *const *parts, int n, int head_dim, float *out) {
#if defined(DI_CPU_X86)
  if (di_cpu_isa() >= DI_ISA_AVX2 && head_dim % 8 == 0) {
    di_cpu_attn_merge_avx2(parts, n, head_dim, out);
    return;
  }
#endif
  float mx = -INFINITY;
  for (int i = 0; i < n; i++)
    if (parts[i]->m > mx) mx = parts[i]->m;
  float l = 0;
  for (int d = 0; d < head_dim; d++) out[d] = 0;
  for (int i = 0; i < n; i++) {
    float w = di_softmax_exp(parts[i]->m - mx);
    l += parts[i]->l * w;
    for (int d = 0; d < head_dim; d++) out[d] += parts[i]->acc[d] * w;
  }
  float inv = 1.0f / l;
  for (int d = 0; d < head_dim; d++) out[d] *= inv;
}
