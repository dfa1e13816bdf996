/* Matmul dispatcher and the portable scalar kernels (the reference every SIMD
 * path is tested against). */
#include "backend/cpu/matmul.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "backend/cpu/isa.h"
#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/quant.h"

/* DI_CPU_EXACT=1 (accuracy debugging, slow): activations stay f32 and each
 * weight row is dequantized and dotted in f32, so a model's output can be split
 * into weight-quantization and activation-quantization error. Read once. */
static bool g_exact;
static pthread_once_t g_exact_once = PTHREAD_ONCE_INIT;

static void read_exact_env(void) {
  const char *e = getenv("DI_CPU_EXACT");
  g_exact = e && *e && strcmp(e, "0") != 0;
}

bool di_cpu_exact_mode(void) {
  pthread_once(&g_exact_once, read_exact_env);
  return g_exact;
}

static di_cpu_act_kind act_kind(di_dtype t) {
  if (di_cpu_exact_mode()) return DI_ACT_F32;
  switch (t) {
  case DI_Q4_0: case DI_Q4_1: case DI_Q5_0: case DI_Q5_1: case DI_Q8_0: case DI_MXFP4: return DI_ACT_Q8;
  case DI_Q4_K: case DI_Q5_K: case DI_Q6_K: return DI_ACT_Q8K;
  default: return DI_ACT_F32;
  }
}

bool di_cpu_dtype_supported(di_dtype t) {
  switch (t) {
  case DI_F32: case DI_F16: case DI_BF16: case DI_Q4_0: case DI_Q4_1: case DI_Q5_0:
  case DI_Q5_1: case DI_Q8_0: case DI_MXFP4: case DI_Q4_K: case DI_Q5_K: case DI_Q6_K: return true;
  default: return false;
  }
}

size_t di_cpu_act_row_bytes(di_dtype t, int64_t K) {
  switch (act_kind(t)) {
  case DI_ACT_Q8: return (size_t)(K / DI_QK32) * sizeof(di_act_q8);
  case DI_ACT_Q8K: return (size_t)(K / DI_QKK) * sizeof(di_act_q8k);
  default: return (size_t)K * sizeof(float);
  }
}

int di_cpu_act_format(di_dtype wtype) { return (int)act_kind(wtype); }

size_t di_cpu_act_bytes(di_dtype wtype, int64_t M, int64_t K) {
  return (size_t)M * di_cpu_act_row_bytes(wtype, K);
}

/* ---- scalar kernels ---- */

static void actq_f32(const float *x, void *y, int64_t k) { memcpy(y, x, (size_t)k * 4); }
static void actq_q8(const float *x, void *y, int64_t k) { di_cpu_quantize_act_q8(x, y, k); }
static void actq_q8k(const float *x, void *y, int64_t k) { di_cpu_quantize_act_q8k(x, y, k); }

static float dot_f32(const void *w, const float *x, int64_t k) {
  const float *a = w;
  float s = 0;
  for (int64_t i = 0; i < k; i++) s += a[i] * x[i];
  return s;
}
static float dot_f16(const void *w, const float *x, int64_t k) {
  const di_fp16 *a = w;
  float s = 0;
  for (int64_t i = 0; i < k; i++) s += di_cpu_fp16_to_f32(a[i]) * x[i];
  return s;
}
static float dot_bf16(const void *w, const float *x, int64_t k) {
  const di_bf16 *a = w;
  float s = 0;
  for (int64_t i = 0; i < k; i++) s += di_cpu_bf16_to_f32(a[i]) * x[i];
  return s;
}

/* A 32-element weight block as integers: value = d * q[j] + m (q signed, the
 * Q4_0/Q5_0 offset already applied, as ggml's kernels do before the int8 dot). */
typedef struct { int8_t q[32]; float d, m; } wblock32;

static void unpack_nibbles(const uint8_t *qs, uint32_t qh, int off, int8_t *q) {
  for (int j = 0; j < 16; j++) {
    q[j] = (int8_t)(((qs[j] & 0x0f) | ((qh >> j) & 1) << 4) + off);
    q[j + 16] = (int8_t)(((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) + off);
  }
}

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void unpack32(di_dtype t, const void *p, wblock32 *b) {
  b->m = 0;
  switch (t) {
  case DI_Q4_0: {
    const di_block_q4_0 *w = p;
    unpack_nibbles(w->qs, 0, -8, b->q);
    b->d = di_cpu_fp16_to_f32(w->d);
    break;
  }
  case DI_Q4_1: {
    const di_block_q4_1 *w = p;
    unpack_nibbles(w->qs, 0, 0, b->q);
    b->d = di_cpu_fp16_to_f32(w->d);
    b->m = di_cpu_fp16_to_f32(w->m);
    break;
  }
  case DI_Q5_0: {
    const di_block_q5_0 *w = p;
    unpack_nibbles(w->qs, le32(w->qh), -16, b->q);
    b->d = di_cpu_fp16_to_f32(w->d);
    break;
  }
  case DI_Q5_1: {
    const di_block_q5_1 *w = p;
    unpack_nibbles(w->qs, le32(w->qh), 0, b->q);
    b->d = di_cpu_fp16_to_f32(w->d);
    b->m = di_cpu_fp16_to_f32(w->m);
    break;
  }
  case DI_MXFP4: { /* codes through the table; d a power of two, so d * d_a is exact */
    const di_block_mxfp4 *w = p;
    for (int j = 0; j < 16; j++) b->q[j] = di_mxfp4_kv[w->qs[j] & 15], b->q[j + 16] = di_mxfp4_kv[w->qs[j] >> 4];
    b->d = di_e8m0_half(w->e);
    break;
  }
  default: { /* Q8_0 */
    const di_block_q8_0 *w = p;
    memcpy(b->q, w->qs, 32);
    b->d = di_cpu_fp16_to_f32(w->d);
    break;
  }
  }
}

float di_cpu_q32_block_step(di_dtype t, const void *w, const di_act_q8 *x, float s) {
  wblock32 b;
  unpack32(t, w, &b);
  int32_t isum = 0;
  for (int j = 0; j < 32; j++) isum += b.q[j] * x->qs[j];
  s = fmaf((float)isum, b.d * x->d, s);
  if (t == DI_Q4_1 || t == DI_Q5_1) s = fmaf(b.m, x->s, s);
  return s;
}

/* One scalar chain per output over the blocks in K order, which the packed
 * AVX2 and NEON kernels reproduce lane by lane (matmul_pack_avx2.c, matmul_pack_neon.h). */
static float dot_q32(di_dtype t, const void *w, const di_act_q8 *x, int64_t k) {
  size_t bb = di_dtype_block_bytes(t);
  float s = 0;
  for (int64_t i = 0; i < k / 32; i++) s = di_cpu_q32_block_step(t, (const uint8_t *)w + (size_t)i * bb, &x[i], s);
  return s;
}

/* A 256-element K-quant block as integers: value = d * sc[g] * q - dmin * mn[g],
 * g the 16-element group. */
typedef struct { int8_t q[256]; int sc[16], mn[16]; float d, dmin; } wblockk;

static void unpackk(di_dtype t, const void *p, wblockk *b) {
  if (t == DI_Q6_K) {
    const di_block_q6_K *w = p;
    for (int half = 0; half < 2; half++) {
      const uint8_t *ql = w->ql + 64 * half, *qh = w->qh + 32 * half;
      int8_t *o = b->q + 128 * half;
      for (int l = 0; l < 32; l++) {
        o[l] = (int8_t)(((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32);
        o[l + 32] = (int8_t)(((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32);
        o[l + 64] = (int8_t)(((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32);
        o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32);
      }
    }
    for (int g = 0; g < 16; g++) {
      b->sc[g] = w->scales[g];
      b->mn[g] = 0;
    }
    b->d = di_cpu_fp16_to_f32(w->d);
    b->dmin = 0;
    return;
  }
  const uint8_t *scales, *qs, *qh = NULL;
  if (t == DI_Q4_K) {
    const di_block_q4_K *w = p;
    scales = w->scales, qs = w->qs;
    b->d = di_cpu_fp16_to_f32(w->d), b->dmin = di_cpu_fp16_to_f32(w->dmin);
  } else {
    const di_block_q5_K *w = p;
    scales = w->scales, qs = w->qs, qh = w->qh;
    b->d = di_cpu_fp16_to_f32(w->d), b->dmin = di_cpu_fp16_to_f32(w->dmin);
  }
  for (int j = 0; j < 8; j++) {
    uint8_t sc, m;
    di_cpu_k_scale_min(scales, j, &sc, &m);
    b->sc[2 * j] = b->sc[2 * j + 1] = sc;
    b->mn[2 * j] = b->mn[2 * j + 1] = m;
    for (int l = 0; l < 32; l++) {
      int v = (qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 0x0f;
      if (qh) v |= ((qh[l] >> j) & 1) << 4;
      b->q[32 * j + l] = (int8_t)v;
    }
  }
}

void di_cpu_qk_block_step(di_dtype t, const void *w, const di_act_q8k *x, float *s, float *sm) {
  wblockk b;
  unpackk(t, w, &b);
  int32_t isum = 0, imin = 0;
  for (int g = 0; g < 16; g++) {
    int32_t gs = 0;
    for (int l = 16 * g; l < 16 * g + 16; l++) gs += b.q[l] * x->qs[l];
    isum += b.sc[g] * gs;
    imin += b.mn[g] * x->bsums[g];
  }
  *s = fmaf((float)isum, x->d * b.d, *s);
  *sm = fmaf((float)imin, -x->d * b.dmin, *sm);
}

/* As ggml: (d_a * d_w) * isum into one sum, (-d_a * dmin) * imin into another. */
static float dot_qk(di_dtype t, const void *w, const di_act_q8k *x, int64_t k) {
  size_t bb = di_dtype_block_bytes(t);
  float s = 0, sm = 0;
  for (int64_t i = 0; i < k / 256; i++) di_cpu_qk_block_step(t, (const uint8_t *)w + (size_t)i * bb, &x[i], &s, &sm);
  return s + sm;
}

/* One generic loop; the per-type work is in the dot functions above. */
#define SCALAR_MM(name, call)                                                                \
  static void name(const void *W, size_t wrow, const void *x, size_t xrow, int64_t M,        \
                   int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1, di_dtype t) {    \
    for (int64_t m = 0; m < M; m++)                                                          \
      for (int64_t n = n0; n < n1; n++) {                                                    \
        const void *w = (const uint8_t *)W + (size_t)n * wrow;                               \
        const void *xr = (const uint8_t *)x + (size_t)m * xrow;                              \
        Y[m * ldy + n] = call;                                                               \
      }                                                                                      \
  }
SCALAR_MM(mm_scalar_q32, dot_q32(t, w, xr, K))
SCALAR_MM(mm_scalar_qk, dot_qk(t, w, xr, K))
SCALAR_MM(mm_scalar_f32, t == DI_F32 ? dot_f32(w, xr, K) : t == DI_F16 ? dot_f16(w, xr, K)
                                                                      : dot_bf16(w, xr, K))

/* Exact mode: dequantize row n once per call, then plain f32 dots for every m. */
void di_cpu_mm_exact(const void *W, size_t wrow, const void *x, int64_t M, int64_t K, float *Y,
                     int64_t ldy, int64_t n0, int64_t n1, di_dtype t) {
  static _Thread_local float *buf;
  static _Thread_local int64_t cap;
  if (cap < K) {
    free(buf);
    buf = malloc((size_t)K * sizeof *buf);
    cap = buf ? K : 0;
    if (!buf) return;
  }
  for (int64_t n = n0; n < n1; n++) {
    di_cpu_dequant_row(t, (const uint8_t *)W + (size_t)n * wrow, buf, K);
    for (int64_t m = 0; m < M; m++) Y[m * ldy + n] = dot_f32(buf, (const float *)x + m * K, K);
  }
}

/* ---- dispatch ---- */

typedef struct {
  di_cpu_mm_fn mm[DI_DTYPE_COUNT];
  di_cpu_mmp_fn mmp[DI_DTYPE_COUNT];
  di_cpu_actq_fn actq[DI_ACT_KINDS];
} kernel_table;

/* One table per ISA level, built once for every level; a level change
 * (di_cpu_isa_set) only changes which table is read. */
static kernel_table g_tabs[DI_ISA_AVX512 + 1];
static pthread_once_t g_tabs_once = PTHREAD_ONCE_INIT;

/* Fills t with an ISA's kernels where it has them (NULL keeps the scalar one). */
static void fill_table(kernel_table *t, di_cpu_mm_fn (*mm)(di_dtype, bool), bool arg,
                       di_cpu_actq_fn (*actq)(di_cpu_act_kind)) {
  for (int i = 0; i < DI_DTYPE_COUNT; i++)
    if (di_cpu_dtype_supported((di_dtype)i) && mm((di_dtype)i, arg)) t->mm[i] = mm((di_dtype)i, arg);
  for (int k = 0; k < DI_ACT_KINDS; k++)
    if (actq((di_cpu_act_kind)k)) t->actq[k] = actq((di_cpu_act_kind)k);
}

#ifdef DI_CPU_X86
static di_cpu_mm_fn mm_avx2(di_dtype t, bool unused) { return di_cpu_mm_avx2(t); }
static di_cpu_mm_fn mm_avx512(di_dtype t, bool unused) { return di_cpu_mm_avx512(t); }
#endif

static void build_tables(void) {
  const di_cpu_features *f = di_cpu_features_get();
  for (int level = 0; level <= DI_ISA_AVX512; level++) {
    kernel_table *t = &g_tabs[level];
    t->actq[DI_ACT_F32] = actq_f32;
    t->actq[DI_ACT_Q8] = actq_q8;
    t->actq[DI_ACT_Q8K] = actq_q8k;
    /* never touch code this CPU cannot run */
#ifdef DI_CPU_X86
    /* AVX-512 machines run the AVX2 kernels but for the F32/F16/BF16 ones and the
     * packed int8 ones (with VNNI), which have AVX-512 builds giving the same bits. */
    if (level >= DI_ISA_AVX2 && f->avx2 && f->fma && f->f16c) {
      fill_table(t, mm_avx2, false, di_cpu_actq_avx2);
      if (level >= DI_ISA_AVX512 && f->avx512f && f->avx512bw && f->f16c)
        fill_table(t, mm_avx512, false, di_cpu_actq_avx512);
      bool vnni = level >= DI_ISA_AVX512 && f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni;
      for (int i = 0; i < DI_DTYPE_COUNT; i++) {
        if (!di_cpu_dtype_supported((di_dtype)i)) continue;
        di_cpu_mmp_fn fn = vnni ? di_cpu_mmp_avx512((di_dtype)i) : NULL;
        t->mmp[i] = fn ? fn : di_cpu_mmp_avx2((di_dtype)i);
      }
    }
#endif
#ifdef DI_CPU_ARM64
    if (level == DI_ISA_NEON && f->neon) {
      fill_table(t, di_cpu_mm_neon, f->neon_dotprod, di_cpu_actq_neon);
      for (int i = 0; i < DI_DTYPE_COUNT; i++)
        if (di_cpu_dtype_supported((di_dtype)i)) t->mmp[i] = di_cpu_mmp_neon((di_dtype)i, f->neon_dotprod);
    }
#endif
    (void)f;
  }
}

static const kernel_table *kernels(void) {
  pthread_once(&g_tabs_once, build_tables);
  return &g_tabs[di_cpu_isa()];
}

bool di_cpu_amx_active(void) {
#ifdef DI_CPU_X86
  const di_cpu_features *f = di_cpu_features_get();
  return di_cpu_isa() == DI_ISA_AVX512 && f->avx512vnni && di_cpu_amx_granted();
#else
  return false;
#endif
}

void di_cpu_act_prepare(di_dtype wtype, const float *X, int64_t M, int64_t K, void *xq) {
  di_cpu_act_kind kind = act_kind(wtype);
  di_cpu_actq_fn fn = kernels()->actq[kind];
  size_t rb = di_cpu_act_row_bytes(wtype, K);
  for (int64_t m = 0; m < M; m++) fn(X + m * K, (uint8_t *)xq + (size_t)m * rb, K);
}

void di_cpu_matmul(di_dtype wtype, const void *W, size_t w_row_bytes, const void *xq, int64_t M,
                   int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1) {
  if (M <= 0 || n1 <= n0) return;
  size_t xrow = di_cpu_act_row_bytes(wtype, K);
  if (di_cpu_exact_mode()) {
    di_cpu_mm_exact(W, w_row_bytes, xq, M, K, Y, ldy, n0, n1, wtype);
    return;
  }
  di_cpu_mm_fn fn = kernels()->mm[wtype];
  if (fn) {
    fn(W, w_row_bytes, xq, xrow, M, K, Y, ldy, n0, n1);
    return;
  }
  switch (act_kind(wtype)) {
  case DI_ACT_Q8: mm_scalar_q32(W, w_row_bytes, xq, xrow, M, K, Y, ldy, n0, n1, wtype); break;
  case DI_ACT_Q8K: mm_scalar_qk(W, w_row_bytes, xq, xrow, M, K, Y, ldy, n0, n1, wtype); break;
  default: mm_scalar_f32(W, w_row_bytes, xq, xrow, M, K, Y, ldy, n0, n1, wtype); break;
  }
}

void di_cpu_matmul_packed(di_dtype wtype, const void *W, int64_t N, const void *xq, int64_t M, int64_t K, float *Y,
                          int64_t ldy, int64_t n0, int64_t n1) {
  if (M <= 0 || n1 <= n0) return;
  size_t wrow = di_dtype_row_bytes(wtype, K), xrow = di_cpu_act_row_bytes(wtype, K);
  if (di_cpu_exact_mode()) {
    /* rebuild each GGUF row, then the f32 path */
    static _Thread_local uint8_t *row;
    static _Thread_local size_t cap;
    if (cap < wrow) {
      free(row);
      row = malloc(wrow);
      cap = row ? wrow : 0;
      if (!row) return;
    }
    for (int64_t n = n0; n < n1; n++) {
      di_cpu_packed_row(wtype, W, N, K, n, row);
      di_cpu_mm_exact(row, wrow, xq, M, K, Y + n, ldy, 0, 1, wtype);
    }
    return;
  }
  di_cpu_mmp_fn fn = kernels()->mmp[wtype];
  if (fn) fn(W, wrow, N, xq, xrow, M, K, Y, ldy, n0, n1);
  else di_cpu_mmp_scalar(wtype, W, wrow, N, xq, xrow, M, K, Y, ldy, n0, n1);
}
