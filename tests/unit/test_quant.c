/* Block formats, quantizers, dequantization and matmul of the CPU backend:
 * - dequantization against an independent per-element decoder written here;
 * - quantize -> dequantize error bounds (types with a quantizer);
 * - matmul against a double-precision dequantize-then-dot reference, within a
 *   bound derived from the activation quantization error;
 * - scalar vs the best ISA within a stated tolerance;
 * - row invariance, bitwise: a row alone (M=1) equals the same row inside
 *   M=2..37, and any n0..n1 split equals the full range. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/isa.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/quant.h"
#include "check.h"
#include "util/fp16.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 11);
}
static float rndf(void) { return (float)(rnd() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }

static const di_dtype all_types[] = {DI_F32, DI_F16, DI_BF16, DI_Q4_0, DI_Q4_1, DI_Q5_0,
                                     DI_Q5_1, DI_Q8_0, DI_Q4_K, DI_Q5_K, DI_Q6_K};
#define NTYPES (int)(sizeof all_types / sizeof all_types[0])

static bool is_k(di_dtype t) { return t == DI_Q4_K || t == DI_Q5_K || t == DI_Q6_K; }

static uint16_t h16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static int bit(const uint8_t *p, int i) { return (p[i / 8] >> (i % 8)) & 1; }

/* Element i of a block, decoded straight from the documented layout by byte
 * offsets (independent of the structs and loops in src/). */
static float ref_elem(di_dtype t, const uint8_t *b, int i) {
  switch (t) {
  case DI_F32: { float f; memcpy(&f, b + 4 * i, 4); return f; }
  case DI_F16: return di_cpu_fp16_to_f32(h16(b + 2 * i));
  case DI_BF16: { uint32_t u = (uint32_t)h16(b + 2 * i) << 16; float f; memcpy(&f, &u, 4); return f; }
  case DI_Q8_0: return di_cpu_fp16_to_f32(h16(b)) * (float)(int8_t)b[2 + i];
  case DI_Q4_0: case DI_Q4_1: case DI_Q5_0: case DI_Q5_1: {
    bool has_m = t == DI_Q4_1 || t == DI_Q5_1, five = t == DI_Q5_0 || t == DI_Q5_1;
    const uint8_t *qs = b + 2 + (has_m ? 2 : 0) + (five ? 4 : 0);
    int q = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
    if (five) q |= bit(b + 2 + (has_m ? 2 : 0), i) << 4;
    float d = di_cpu_fp16_to_f32(h16(b));
    if (has_m) return d * (float)q + di_cpu_fp16_to_f32(h16(b + 2));
    return d * (float)(q - (five ? 16 : 8));
  }
  case DI_Q4_K: case DI_Q5_K: {
    int j = i / 32, l = i % 32;
    const uint8_t *s = b + 4;
    int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
    int mn = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    const uint8_t *qs = b + 16 + (t == DI_Q5_K ? 32 : 0);
    int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
    if (t == DI_Q5_K) q |= ((b[16 + l] >> j) & 1) << 4;
    float d = di_cpu_fp16_to_f32(h16(b)), dmin = di_cpu_fp16_to_f32(h16(b + 2));
    return d * (float)sc * (float)q - dmin * (float)mn;
  }
  case DI_Q6_K: {
    int half = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
    const uint8_t *ql = b + 64 * half, *qh = b + 128 + 32 * half;
    /* quarter 0: low nibble of ql[l]; 1: low of ql[l+32]; 2: high of ql[l]; 3: high of ql[l+32] */
    int byte = ql[l + (quarter % 2) * 32];
    int lo = quarter < 2 ? byte & 15 : byte >> 4;
    int hi = (qh[l] >> (2 * quarter)) & 3;
    int sc = (int8_t)b[192 + i / 16];
    float d = di_cpu_fp16_to_f32(h16(b + 208));
    return d * (float)sc * (float)((lo | hi << 4) - 32);
  }
  default: return NAN;
  }
}

/* A row of random weights of n elements: quantized floats where a quantizer
 * exists, otherwise random bytes with sane fp16 scales. */
static void make_row(di_dtype t, int64_t n, void *dst, float scale) {
  if (!is_k(t)) {
    float *x = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = rndf() * scale;
    CHECK(di_cpu_quantize_row(t, x, dst, n));
    /* Q8_0 files may hold -128, which our quantizer never writes: |-128| must not
     * overflow the unsigned operand of the int8 dot product. */
    if (t == DI_Q8_0)
      for (int64_t b = 0; b < n / 32; b += 3) ((di_block_q8_0 *)dst)[b].qs[b % 32] = -128;
    free(x);
    return;
  }
  size_t bb = di_dtype_block_bytes(t);
  uint8_t *p = dst;
  for (int64_t i = 0; i < n / 256; i++, p += bb) {
    for (size_t j = 0; j < bb; j++) p[j] = (uint8_t)rnd();
    di_fp16 d = di_cpu_f32_to_fp16(scale * (0.002f + 0.01f * (rndf() + 1)));
    di_fp16 dm = di_cpu_f32_to_fp16(scale * 0.01f * (rndf() + 1));
    if (t == DI_Q6_K) {
      memcpy(p + 208, &d, 2);
    } else {
      memcpy(p, &d, 2);
      memcpy(p + 2, &dm, 2);
    }
  }
}

/* The KV cache's f32 -> f16 store: its SIMD path (F16C on x86) gives the
 * scalar di_f32_to_f16's bits for 16M floats spread over every exponent, the
 * specials and NaNs with payloads. */
static void test_kv_store_f16(void) {
  enum { N = 1 << 24 };
  float *x = malloc(N * sizeof *x);
  uint16_t *got = malloc(N * sizeof *got);
  for (uint32_t i = 0; i < N; i++) {
    uint32_t b = i * 256u + (i % 251u); /* every 256th bit pattern, low bits varied */
    memcpy(&x[i], &b, 4);
  }
  const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, 65504.0f, 65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-24f};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) x[i] = special[i];
  di_cpu_kv_store(got, x, N, DI_KV_DTYPE_F16);
  int bad = 0;
  for (uint32_t i = 0; i < N; i++) bad += got[i] != di_f32_to_f16(x[i]);
  CHECKF(bad == 0, "%d of %d f16 KV stores differ from the scalar conversion", bad, N);
  free(x), free(got);
}

/* The KV cache's f16 / bf16 -> f32 load (DeepSeek-V4 reads its cached rows
 * through it): every one of the 65536 patterns as the scalar conversion gives
 * it (bitwise; NaNs stay NaNs), at an odd offset so the SIMD body and the tail both run. */
static void test_kv_load(void) {
  enum { N = 65536 + 3 };
  uint16_t *h = malloc(N * sizeof *h);
  float *got = malloc(N * sizeof *got);
  for (uint32_t i = 0; i < N; i++) h[i] = (uint16_t)(i * 40503u);
  for (int t = 0; t < 2; t++) {
    const di_kv_dtype type = t ? DI_KV_DTYPE_BF16 : DI_KV_DTYPE_F16;
    di_cpu_kv_load(got, h + 1, N - 1, type);
    int bad = 0;
    for (uint32_t i = 1; i < N; i++) {
      float want = t ? di_bf16_to_f32(h[i]) : di_f16_to_f32(h[i]);
      bad += isnan(want) ? !isnan(got[i - 1]) : memcmp(&want, &got[i - 1], 4) != 0;
    }
    CHECKF(bad == 0, "%d of %d %s KV loads differ from the scalar conversion", bad, N - 1, t ? "bf16" : "f16");
  }
  free(h), free(got);
}

static void test_fp16(void) {
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = di_cpu_fp16_to_f32((di_fp16)h);
    if (isnan(f)) continue;
    if (di_cpu_f32_to_fp16(f) != h) bad++;
  }
  CHECKF(bad == 0, "%d fp16 values do not round-trip", bad);
  /* halfway cases round to even; overflow to inf */
  CHECK(di_cpu_f32_to_fp16(1.0f + 0x1p-11f) == 0x3c00);
  CHECK(di_cpu_f32_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3c02);
  CHECK(di_cpu_f32_to_fp16(65520.0f) == 0x7c00);
  CHECK(di_cpu_f32_to_fp16(65519.0f) == 0x7bff);
  CHECK(di_cpu_f32_to_fp16(0x1p-25f) == 0);         /* halfway to the smallest subnormal */
  CHECK(di_cpu_f32_to_fp16(0x1.8p-24f) == 2);       /* 1.5 units rounds to 2 */
  CHECK(di_cpu_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);
  CHECK(di_cpu_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);
}

static void test_dequant(void) {
  const int64_t n = 1024;
  for (int ti = 0; ti < NTYPES; ti++) {
    di_dtype t = all_types[ti];
    size_t rb = di_dtype_row_bytes(t, n);
    uint8_t *w = malloc(rb);
    float *x = malloc(n * 4), *y = malloc(n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = rndf() * 3.0f;
    if (is_k(t)) {
      make_row(t, n, w, 1.0f);
    } else {
      CHECK(di_cpu_quantize_row(t, x, w, n));
    }
    di_cpu_dequant_row(t, w, y, n);
    int qk = di_dtype_block(t), mism = 0;
    double maxerr = 0;
    for (int64_t i = 0; i < n; i++) {
      float r = ref_elem(t, w + (size_t)(i / qk) * di_dtype_block_bytes(t), (int)(i % qk));
      if (memcmp(&r, &y[i], 4) != 0) mism++;
      maxerr = fmax(maxerr, fabs((double)y[i] - x[i]));
    }
    CHECKF(mism == 0, "%s: %d elements differ from the layout decoder", di_dtype_name(t), mism);
    if (!is_k(t)) {
      /* |x| <= 3: half a step of the grid (6/15, 6/31 for Q4_1/Q5_1; 3/127 Q8_0), or a
       * whole step d = 3/8, 3/16 for Q4_0/Q5_0, whose grid stops one step short of
       * the opposite extreme; fp16/bf16 relative rounding */
      double tol = t == DI_F32 ? 0 : t == DI_F16 ? 3e-3 : t == DI_BF16 ? 1.2e-2
                 : t == DI_Q8_0 ? 3.0 / 127 * 0.51 : t == DI_Q4_1 ? 0.21 : t == DI_Q5_1 ? 0.1
                 : t == DI_Q4_0 ? 0.376 : 0.188;
      CHECKF(maxerr <= tol, "%s: quantization error %g > %g", di_dtype_name(t), maxerr, tol);
    }
    free(w), free(x), free(y);
  }
  CHECK(!di_cpu_quantize_row(DI_Q4_K, (float[256]){0}, (uint8_t[256]){0}, 256));
  CHECK(!di_cpu_dtype_supported(DI_Q2_K));
  CHECK(di_cpu_act_format(DI_Q4_0) == di_cpu_act_format(DI_Q8_0));
  CHECK(di_cpu_act_format(DI_Q4_K) == di_cpu_act_format(DI_Q6_K));
  CHECK(di_cpu_act_format(DI_F16) == di_cpu_act_format(DI_F32));
  if (!getenv("DI_CPU_EXACT")) /* the debug mode keeps every activation f32 */
    CHECK(di_cpu_act_format(DI_Q4_K) != di_cpu_act_format(DI_Q5_0));
}

typedef struct {
  di_dtype t;
  int64_t N, K;
  size_t wrow;
  uint8_t *W;
  float *Wf; /* dequantized */
} wmat;

static wmat make_w(di_dtype t, int64_t N, int64_t K) {
  wmat w = {.t = t, .N = N, .K = K};
  w.wrow = di_dtype_row_bytes(t, K) + 16; /* padded stride: kernels must honour it */
  w.W = calloc((size_t)N, w.wrow);
  w.Wf = malloc((size_t)(N * K) * 4);
  for (int64_t n = 0; n < N; n++) {
    make_row(t, K, w.W + n * w.wrow, 0.5f + (float)(n % 5) * 0.3f);
    di_cpu_dequant_row(t, w.W + n * w.wrow, w.Wf + n * K, K);
  }
  return w;
}

static void free_w(wmat *w) { free(w->W), free(w->Wf); }

static void *prepare(di_dtype t, const float *X, int64_t M, int64_t K) {
  void *xq = malloc(di_cpu_act_bytes(t, M, K) + 1);
  di_cpu_act_prepare(t, X, M, K, xq);
  return xq;
}

static int64_t test_k(di_dtype t) { return is_k(t) ? 768 : (t == DI_F32 || t == DI_F16 || t == DI_BF16) ? 203 : 416; }

/* Against double precision: error of activation quantization (at most half a
 * step, amax/254 per element of a block) times |w|, plus f32 rounding. */
static void test_matmul_reference(void) {
  const int64_t M = 5, N = 19;
  for (int ti = 0; ti < NTYPES; ti++) {
    di_dtype t = all_types[ti];
    int64_t K = test_k(t);
    wmat w = make_w(t, N, K);
    float *X = malloc((size_t)(M * K) * 4), *Y = malloc((size_t)(M * N) * 4);
    for (int64_t i = 0; i < M * K; i++) X[i] = rndf() * (i % 7 == 0 ? 4.0f : 1.0f);
    void *xq = prepare(t, X, M, K);
    di_cpu_matmul(t, w.W, w.wrow, xq, M, K, Y, N, 0, N);
    int qa = t == DI_F32 || t == DI_F16 || t == DI_BF16 ? 0 : is_k(t) ? 256 : 32;
    int bad = 0;
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        double ref = 0, mag = 0, qerr = 0;
        for (int64_t k = 0; k < K; k++) {
          double wk = w.Wf[n * K + k], xk = X[m * K + k];
          ref += wk * xk;
          mag += fabs(wk * xk);
          if (qa && k % qa == 0) {
            double amax = 0;
            for (int j = 0; j < qa; j++) amax = fmax(amax, fabs(X[m * K + k + j]));
            double wsum = 0;
            for (int j = 0; j < qa; j++) wsum += fabs(w.Wf[n * K + k + j]);
            qerr += wsum * amax / 254.0 * 1.001;
          }
        }
        double tol = qerr + mag * 1e-5 + 1e-6;
        if (fabs(Y[m * N + n] - ref) > tol && bad++ < 3)
          fprintf(stderr, "%s m=%ld n=%ld: %g vs %g (tol %g)\n", di_dtype_name(t), (long)m,
                  (long)n, Y[m * N + n], ref, tol);
      }
    CHECKF(bad == 0, "%s (%s): %d outputs off the double reference", di_dtype_name(t),
           di_cpu_isa_name(di_cpu_isa()), bad);
    free(X), free(Y), free(xq), free_w(&w);
  }
}

/* Scalar vs the best ISA on the same data: activations must quantize to the same
 * bytes, outputs agree within 1e-5 of sum |w*x| (float summation order only). */
static void test_scalar_vs_simd(di_cpu_isa_level best) {
  if (best == DI_ISA_SCALAR) return;
  const int64_t M = 6, N = 23;
  for (int ti = 0; ti < NTYPES; ti++) {
    di_dtype t = all_types[ti];
    int64_t K = test_k(t);
    wmat w = make_w(t, N, K);
    float *X = malloc((size_t)(M * K) * 4), *Ys = malloc((size_t)(M * N) * 4),
          *Yv = malloc((size_t)(M * N) * 4);
    for (int64_t i = 0; i < M * K; i++) X[i] = rndf();
    size_t ab = di_cpu_act_bytes(t, M, K);
    CHECK(di_cpu_isa_set(DI_ISA_SCALAR));
    void *xs = prepare(t, X, M, K);
    di_cpu_matmul(t, w.W, w.wrow, xs, M, K, Ys, N, 0, N);
    CHECK(di_cpu_isa_set(best));
    void *xv = prepare(t, X, M, K);
    CHECKF(memcmp(xs, xv, ab) == 0, "%s: activations differ between scalar and %s",
           di_dtype_name(t), di_cpu_isa_name(best));
    di_cpu_matmul(t, w.W, w.wrow, xs, M, K, Yv, N, 0, N);
    int bad = 0;
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        double mag = 0;
        for (int64_t k = 0; k < K; k++) mag += fabs((double)w.Wf[n * K + k] * X[m * K + k]);
        if (fabs(Ys[m * N + n] - Yv[m * N + n]) > 1e-5 * mag + 1e-6) bad++;
      }
    CHECKF(bad == 0, "%s: %d outputs differ between scalar and %s", di_dtype_name(t), bad,
           di_cpu_isa_name(best));
    free(X), free(Ys), free(Yv), free(xs), free(xv), free_w(&w);
  }
}

/* Bitwise: row m computed with M=1 equals row m inside every M in 2..37, and
 * every split of n0..n1 equals the full range. */
static void row_invariance_case(di_dtype t, int64_t K, int64_t MMAX) {
  const int64_t N = 21;
  {
    wmat w = make_w(t, N, K);
    float *X = malloc((size_t)(MMAX * K) * 4);
    for (int64_t i = 0; i < MMAX * K; i++) X[i] = rndf();
    void *xq = prepare(t, X, MMAX, K);
    size_t xrow = di_cpu_act_bytes(t, 1, K);
    float *alone = malloc((size_t)(MMAX * N) * 4), *Y = malloc((size_t)(MMAX * N) * 4);
    for (int64_t m = 0; m < MMAX; m++)
      di_cpu_matmul(t, w.W, w.wrow, (uint8_t *)xq + m * xrow, 1, K, alone + m * N, N, 0, N);
    int bad = 0;
    for (int64_t M = 2; M <= MMAX; M++) {
      /* the batch starts at a varying row so each row sits at several tile offsets */
      int64_t first = (M * 7) % (MMAX - M + 1);
      di_cpu_matmul(t, w.W, w.wrow, (uint8_t *)xq + first * xrow, M, K, Y, N, 0, N);
      if (memcmp(Y, alone + first * N, (size_t)(M * N) * 4) != 0) bad++;
    }
    CHECKF(bad == 0, "%s (%s): %d batch sizes change some row's bits", di_dtype_name(t),
           di_cpu_isa_name(di_cpu_isa()), bad);
    static const int steps[] = {1, 2, 3, 5, 7, 8, 13};
    bad = 0;
    for (int s = 0; s < 7; s++) {
      memset(Y, 0, (size_t)(MMAX * N) * 4);
      for (int64_t n0 = 0; n0 < N; n0 += steps[s]) {
        int64_t n1 = n0 + steps[s] < N ? n0 + steps[s] : N;
        di_cpu_matmul(t, w.W, w.wrow, xq, MMAX, K, Y, N, n0, n1);
      }
      if (memcmp(Y, alone, (size_t)(MMAX * N) * 4) != 0) bad++;
    }
    CHECKF(bad == 0, "%s (%s): %d column splits change bits", di_dtype_name(t),
           di_cpu_isa_name(di_cpu_isa()), bad);
    free(X), free(xq), free(alone), free(Y), free_w(&w);
  }
}

static void test_row_invariance(void) {
  for (int ti = 0; ti < NTYPES; ti++)
    row_invariance_case(all_types[ti], is_k(all_types[ti]) ? 512 : test_k(all_types[ti]), 37);
  /* long rows: the GEMM walks N in panels of ~192 KB of weights, so these cross
   * panel boundaries */
  row_invariance_case(DI_F32, 12291, 9);
  row_invariance_case(DI_Q8_0, 32 * 400, 9);
  row_invariance_case(DI_Q6_K, 256 * 60, 6);
}

#ifdef DI_CPU_ARM64
/* The SDOT and the ARMv8.0 builds of the NEON int8 kernels form the same exact
 * integer lanes and then run the same float code, so they agree bit for bit
 * (GEMV and GEMM shapes). Without SDOT (e.g. qemu -cpu cortex-a53) only the
 * ARMv8.0 build runs, through the other tests. */
static void test_neon_dotprod(void) {
  if (!di_cpu_features_get()->neon_dotprod) return;
  static const di_dtype qtypes[] = {DI_Q4_0, DI_Q4_1, DI_Q5_0, DI_Q5_1, DI_Q8_0, DI_Q4_K, DI_Q5_K, DI_Q6_K};
  const int64_t N = 13;
  for (size_t ti = 0; ti < sizeof qtypes / sizeof qtypes[0]; ti++) {
    di_dtype t = qtypes[ti];
    int64_t K = test_k(t);
    wmat w = make_w(t, N, K);
    for (int64_t M = 1; M <= 5; M += 4) {
      float *X = malloc((size_t)(M * K) * 4), *Yd = malloc((size_t)(M * N) * 4), *Yi = malloc((size_t)(M * N) * 4);
      for (int64_t i = 0; i < M * K; i++) X[i] = rndf();
      void *xq = prepare(t, X, M, K);
      size_t xrow = di_cpu_act_bytes(t, 1, K);
      di_cpu_mm_neon_dot(t)(w.W, w.wrow, xq, xrow, M, K, Yd, N, 0, N);
      di_cpu_mm_neon_i8(t)(w.W, w.wrow, xq, xrow, M, K, Yi, N, 0, N);
      CHECKF(memcmp(Yd, Yi, (size_t)(M * N) * 4) == 0, "%s M=%ld: NEON SDOT and ARMv8.0 kernels differ",
             di_dtype_name(t), (long)M);
      free(X), free(Yd), free(Yi), free(xq);
    }
    free_w(&w);
  }
}
#endif

/* The activation quantizers of every ISA level give the scalar one's bytes:
 * rows of several lengths (16-block groups whole and partial), with an all-zero
 * block, tiny values (subnormal fp16 d) and large ones (d near fp16's top). */
static void test_act_quant_levels(di_cpu_isa_level best) {
  static const int64_t ks[] = {32, 96, 512, 544, 768, 2048, 5632};
  static const di_dtype types[] = {DI_Q8_0, DI_Q4_K};
  for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
    for (size_t ti = 0; ti < 2; ti++) {
      const int64_t K = ks[ki], M = 3;
      if (is_k(types[ti]) && K % 256) continue;
      float *X = malloc((size_t)(M * K) * 4);
      for (int64_t i = 0; i < M * K; i++) {
        const int64_t blk = (i % K) / 32;
        const float scale = blk % 5 == 1 ? 0.0f : blk % 5 == 2 ? 1e-6f : blk % 5 == 3 ? 8.0e6f : 1.0f;
        X[i] = rndf() * scale;
      }
      CHECK(di_cpu_isa_set(DI_ISA_SCALAR));
      void *ref = prepare(types[ti], X, M, K);
      for (int lv = DI_ISA_SCALAR + 1; lv <= (int)best; lv++) {
        if (!di_cpu_isa_set((di_cpu_isa_level)lv)) continue;
        void *got = prepare(types[ti], X, M, K);
        CHECKF(!memcmp(ref, got, di_cpu_act_bytes(types[ti], M, K)), "activation quantizer %s K %ld: level %s differs",
               di_dtype_name(types[ti]), (long)K, di_cpu_isa_name((di_cpu_isa_level)lv));
        free(got);
      }
      CHECK(di_cpu_isa_set(best));
      free(ref), free(X);
    }
}

int main(void) {
  di_cpu_isa_level best = di_cpu_isa();
  printf("cpu isa: %s%s\n", di_cpu_isa_name(best),
         best == DI_ISA_NEON && di_cpu_features_get()->neon_dotprod ? " (dotprod)" : "");
  test_fp16();
  test_kv_store_f16();
  test_kv_load();
  test_dequant();
  CHECK(di_cpu_isa_set(DI_ISA_SCALAR));
  test_matmul_reference();
  test_row_invariance();
  CHECK(di_cpu_isa_set(best));
  test_matmul_reference();
  test_row_invariance();
  test_scalar_vs_simd(best);
  test_act_quant_levels(best);
#ifdef DI_CPU_ARM64
  test_neon_dotprod();
#endif
  return di_test_finish("test_quant");
}
