/* The packed weight layout (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q5_K and MXFP4 on x86, Q6_K; matmul.h): packing round-trips
 * row by row, and every output is bit-identical whatever M (1..17), the column
 * range [n0, n1) (including ranges that cut a group of 8 and the zero-padded
 * tail group when N is not a multiple of 8), the ISA level, and the unpacked
 * scalar reference on the GGUF rows: one chain per output in all of them. */
#include <math.h>
#include <stdint.h>

#include "backend/cpu/isa.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/quant.h"
#include "check.h"

static uint32_t g_rng = 2463534242u;
static float rndf(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 17, g_rng ^= g_rng << 5;
  return (float)((double)g_rng / 4294967296.0 * 2.0 - 1.0);
}

#define MMAX 50
static bool g_ran[DI_ISA_AVX512 + 1]; /* ISA levels whose kernels were checked */
static int g_q8_same; /* MXFP4 shapes checked against their Q8_0 rewrite */

/* test_matmul_packed_avx512emu.c includes this file with PACKED_TEST_KERNEL, a
 * kernel selector (di_cpu_mmp_fn (di_dtype)) that is then called directly, in
 * one pass, instead of the dispatcher at every ISA level. */
#ifndef PACKED_TEST_NAME
#define PACKED_TEST_NAME "test_matmul_packed"
#endif
static void matmul_packed(di_dtype t, const void *P, int64_t N, const void *x, int64_t M, int64_t K, float *y,
                          int64_t n0, int64_t n1) {
#ifdef PACKED_TEST_KERNEL
  PACKED_TEST_KERNEL(t)(P, di_dtype_row_bytes(t, K), N, x, di_cpu_act_bytes(t, 1, K), M, K, y, N, n0, n1);
#else
  di_cpu_matmul_packed(t, P, N, x, M, K, y, N, n0, n1);
#endif
}

/* MXFP4 against what its values mean: each row dequantized (checked against
 * kv * 2^(e - 128)) and dotted in double with the dequantized activations is
 * the kernels' result up to the float chain's rounding; and the same blocks
 * rewritten as Q8_0 (q = kv, d = 2^(e - 128), exact in f16 for e in
 * [104, 143]) give the kernels' bits: the same integer sums times the same
 * d_w * d_a, which is why the loader may take either form. */
static void check_mxfp4_ref(const uint8_t *W, int64_t N, int64_t K, const void *xq, const float *ref) {
  const size_t rb = di_dtype_row_bytes(DI_MXFP4, K), qrb = di_dtype_row_bytes(DI_Q8_0, K);
  float *w = malloc((size_t)K * 4);
  uint8_t *q8 = malloc(qrb * (size_t)N);
  int bad_dq = 0, bad_dot = 0;
  bool q8_ok = true;
  for (int64_t n = 0; n < N; n++) {
    const uint8_t *row = W + (size_t)n * rb;
    di_cpu_dequant_row(DI_MXFP4, row, w, K);
    for (int64_t k = 0; k < K; k++) {
      const uint8_t *b = row + 17 * (k / 32);
      const int j = (int)(k % 32), code = j < 16 ? b[1 + j] & 15 : b[1 + j - 16] >> 4;
      bad_dq += w[k] != ldexpf((float)di_mxfp4_kv[code], (int)b[0] - 128);
    }
    for (int64_t m = 0; m < MMAX; m++) {
      const di_act_q8 *a = (const di_act_q8 *)((const uint8_t *)xq + (size_t)m * di_cpu_act_bytes(DI_MXFP4, 1, K));
      double dot = 0, mag = 0;
      for (int64_t k = 0; k < K; k++) {
        double p = (double)w[k] * a[k / 32].d * a[k / 32].qs[k % 32];
        dot += p, mag += fabs(p);
      }
      bad_dot += fabs(ref[m * N + n] - dot) > 1e-6 * mag + 1e-30;
    }
    for (int64_t b = 0; b < K / 32; b++) {
      const uint8_t *src = row + 17 * b;
      di_block_q8_0 *o = (di_block_q8_0 *)(q8 + (size_t)n * qrb) + b;
      q8_ok &= src[0] >= 104 && src[0] <= 143;
      o->d = di_cpu_f32_to_fp16(di_e8m0_half(src[0]));
      for (int j = 0; j < 16; j++) o->qs[j] = di_mxfp4_kv[src[1 + j] & 15], o->qs[j + 16] = di_mxfp4_kv[src[1 + j] >> 4];
    }
  }
  CHECKF(bad_dq == 0, "MXFP4 K=%ld: %d dequantized values differ from kv * 2^(e - 128)", (long)K, bad_dq);
  CHECKF(bad_dot == 0, "MXFP4 N=%ld K=%ld: %d outputs off the dequantized dot product", (long)N, (long)K, bad_dot);
  if (q8_ok) { /* the random rows hold subnormal scales, which f16 cannot; the extreme ones do not */
    void *x8 = malloc(di_cpu_act_bytes(DI_Q8_0, MMAX, K));
    float *y = malloc((size_t)(MMAX * N) * 4);
    memcpy(x8, xq, di_cpu_act_bytes(DI_Q8_0, MMAX, K)); /* the same activation format */
    CHECK(di_cpu_pack(DI_Q8_0, q8, N, K));
    di_cpu_matmul_packed(DI_Q8_0, q8, N, x8, MMAX, K, y, N, 0, N);
    CHECKF(memcmp(y, ref, (size_t)(MMAX * N) * 4) == 0, "MXFP4 N=%ld K=%ld: not the bits of its Q8_0 rewrite",
           (long)N, (long)K);
    g_q8_same++;
    free(x8), free(y);
  }
  free(w), free(q8);
}

/* extreme: every quant at its largest and every activation +127, where
 * int16 partial sums in the kernels would overflow if they were too long. */
static void check_shape(di_dtype t, int64_t N, int64_t K, di_cpu_isa_level best, bool extreme) {
  size_t rb = di_dtype_row_bytes(t, K);
  uint8_t *W = malloc(rb * (size_t)N), *P = malloc(rb * (size_t)N), *row = malloc(rb);
  float *X = malloc((size_t)(MMAX * K) * 4), *src = malloc((size_t)K * 4);
  for (int64_t n = 0; n < N; n++) {
    float scale = 0.05f + 0.01f * (float)(n % 7);
    if (di_dtype_block(t) == 256) { /* no quantizer: random bytes (scales, quants) with sane d, dmin */
      uint8_t *p = W + (size_t)n * rb;
      size_t bb = di_dtype_block_bytes(t);
      for (size_t j = 0; j < rb; j++) p[j] = extreme ? 0xff : (uint8_t)(rndf() * 127.0f + 128.0f);
      for (int64_t b = 0; b < K / 256; b++) {
        di_fp16 d = di_cpu_f32_to_fp16(scale * (0.002f + 0.01f * (rndf() + 1)));
        di_fp16 dm = di_cpu_f32_to_fp16(scale * 0.01f * (rndf() + 1));
        if (t == DI_Q6_K) {
          memcpy(p + b * bb + 208, &d, 2);
        } else {
          memcpy(p + b * bb, &d, 2);
          memcpy(p + b * bb + 2, &dm, 2);
        }
      }
      continue;
    }
    if (t == DI_MXFP4) { /* random codes; exponents around real weights', a few subnormal scales */
      for (int64_t b = 0; b < K / 32; b++) {
        uint8_t *p = W + (size_t)n * rb + (size_t)b * 17;
        int r = (int)((rndf() + 1) * 16);
        p[0] = extreme ? 124 : r == 0 ? 0 : r == 1 ? 1 : (uint8_t)(110 + r % 20);
        for (int j = 1; j < 17; j++) p[j] = extreme ? 0x77 : (uint8_t)(rndf() * 127.0f + 128.0f);
      }
      continue;
    }
    for (int64_t k = 0; k < K; k++) src[k] = extreme ? scale : scale * rndf();
    CHECK(di_cpu_quantize_row(t, src, W + (size_t)n * rb, K));
  }
  for (int64_t i = 0; i < MMAX * K; i++) X[i] = extreme ? 1.0f : rndf() * (i % 5 == 0 ? 3.0f : 1.0f);
  memcpy(P, W, rb * (size_t)N);
  CHECK(di_cpu_pack(t, P, N, K));
  int rt_bad = 0;
  for (int64_t n = 0; n < N; n++) {
    di_cpu_packed_row(t, P, N, K, n, row);
    rt_bad += memcmp(row, W + (size_t)n * rb, rb) != 0;
  }
  CHECKF(rt_bad == 0, "%s N=%ld K=%ld: %d rows do not round-trip", di_dtype_name(t), (long)N, (long)K, rt_bad);

  void *xq = malloc(di_cpu_act_bytes(t, MMAX, K));
  size_t xrow = di_cpu_act_bytes(t, 1, K);
  float *ref = malloc((size_t)(MMAX * N) * 4), *y = malloc((size_t)(MMAX * N) * 4);
  /* reference: the scalar kernel on the GGUF rows */
  CHECK(di_cpu_isa_set(DI_ISA_SCALAR));
  di_cpu_act_prepare(t, X, MMAX, K, xq);
  di_cpu_matmul(t, W, rb, xq, MMAX, K, ref, N, 0, N);
  int bad = 0;
#ifdef PACKED_TEST_KERNEL
  best = DI_ISA_SCALAR; /* one pass */
#endif
  /* every level this CPU runs up to best (an AVX-512 host checks AVX2 too) */
  for (int level = DI_ISA_SCALAR; level <= (int)best; level++) {
    if (!di_cpu_isa_set((di_cpu_isa_level)level)) continue;
    g_ran[level] = true;
    /* 1..17, then 32, 33, 35: two AMX row chunks (where Q6_K's AMX path
     * starts) and a tail; 48, 50: three */
    static const int64_t Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 32, 33, 35, 48, 50};
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
      const int64_t M = Ms[mi];
      /* the rows of a batch of M start anywhere in the activations */
      int64_t first = (M * 5) % (MMAX - M + 1);
      memset(y, 0xff, (size_t)(MMAX * N) * 4);
      /* split the columns at awkward points, as threads might */
      int64_t cuts[4] = {0, N / 3, N - N / 5, N};
      for (int c = 0; c < 3; c++)
        matmul_packed(t, P, N, (const uint8_t *)xq + (size_t)first * xrow, M, K, y, cuts[c], cuts[c + 1]);
      for (int64_t i = 0; i < M * N; i++)
        if (memcmp(&y[i], &ref[first * N + i], 4) != 0) {
          if (bad++ == 0)
            fprintf(stderr, "%s N=%ld K=%ld %s M=%ld: first difference at row %ld col %ld: %a vs %a\n",
                    di_dtype_name(t), (long)N, (long)K, di_cpu_isa_name((di_cpu_isa_level)level), (long)M,
                    (long)(i / N), (long)(i % N), y[i], ref[first * N + i]);
          break;
        }
    }
  }
  CHECK(di_cpu_isa_set(best));
  CHECKF(bad == 0, "%s N=%ld K=%ld: %d batch shapes differ from the reference", di_dtype_name(t), (long)N, (long)K,
         bad);
  if (t == DI_MXFP4) check_mxfp4_ref(W, N, K, xq, ref);
  free(W), free(P), free(row), free(X), free(src), free(xq), free(ref), free(y);
}

/* One line for .ci/run: which packed kernel paths this run checked and which
 * this CPU does not have (so a green run on a smaller CPU says what it left out). */
static void print_paths(di_cpu_isa_level best) {
#ifdef PACKED_TEST_KERNEL
  (void)best;
  printf("kernel paths: ran avx512-vnni packed (emulated with SIMDe); amx not emulated\n");
#else
  const di_cpu_features *f = di_cpu_features_get();
  char ran[128] = "", absent[160] = "";
  for (int l = DI_ISA_SCALAR; l <= DI_ISA_AVX512; l++) {
    const char *name = l == DI_ISA_AVX512 ? "avx512-vnni" : di_cpu_isa_name((di_cpu_isa_level)l);
    bool vnni_missing = l == DI_ISA_AVX512 && !f->avx512vnni; /* AVX-512 without VNNI runs the AVX2 packed kernels */
    if (g_ran[l] && !vnni_missing) snprintf(ran + strlen(ran), sizeof ran - strlen(ran), " %s", name);
#ifdef DI_CPU_X86
    else if (l != DI_ISA_NEON) snprintf(absent + strlen(absent), sizeof absent - strlen(absent), " %s", name);
#else
    else if (l == DI_ISA_NEON) snprintf(absent + strlen(absent), sizeof absent - strlen(absent), " %s", name);
#endif
  }
#ifdef DI_CPU_X86
  CHECK(di_cpu_isa_set(best));
  if (di_cpu_amx_active()) snprintf(ran + strlen(ran), sizeof ran - strlen(ran), " amx");
  else snprintf(absent + strlen(absent), sizeof absent - strlen(absent), " amx (%s)",
                !f->amx_int8 ? "no AMX-INT8 on this CPU" : "not granted or DI_CPU_AMX=0");
#endif
  printf("kernel paths: ran%s; not run here:%s\n", ran, absent[0] ? absent : " none");
#endif
}

int main(void) {
  di_cpu_isa_level best = di_cpu_isa();
  const di_dtype types[] = {DI_Q4_0, DI_Q4_1, DI_Q5_0, DI_Q5_1, DI_Q8_0, DI_Q4_K, DI_Q6_K,
#ifdef DI_CPU_X86
                            DI_Q5_K, DI_MXFP4 /* packed on x86 only */
#endif
  };
  const int64_t Ns[] = {8, 13, 24, 37, 70, 200}; /* 200: several group pairs per thread range (AMX M = 16 pipeline) */
  const int64_t Ks[] = {32, 96, 640};
  /* Q4_K: 1, 3 and 5 super-blocks; 5 crosses the on-the-fly packing of a tail group */
  const int64_t Ks_k[] = {256, 768, 1280};
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    CHECK(di_cpu_packable(types[ti]));
    const int64_t *ks = di_dtype_block(types[ti]) == 256 ? Ks_k : Ks;
    for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
      for (size_t ki = 0; ki < 3; ki++) check_shape(types[ti], Ns[ni], ks[ki], best, false);
    check_shape(types[ti], 37, ks[2], best, true);
  }
#ifdef DI_CPU_X86
  CHECKF(g_q8_same > 0, "no MXFP4 shape was compared with its Q8_0 rewrite");
#else
  CHECK(!di_cpu_packable(DI_Q5_K));
  CHECK(!di_cpu_packable(DI_MXFP4));
#endif
  CHECK(!di_cpu_packable(DI_F16));
  print_paths(best);
#ifdef DI_CPU_X86
  const char *names = "Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K/MXFP4";
#else
  const char *names = "Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q6_K";
#endif
  printf("%s: packed %s bit-identical to the scalar reference for M 1..%d, split columns, %s\n", PACKED_TEST_NAME,
         names, MMAX, di_cpu_isa_name(best));
  return di_test_finish(PACKED_TEST_NAME);
}
