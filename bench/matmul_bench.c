/* Kernel micro-benchmark: decode GEMV bandwidth per weight type on a 1B-class
 * layer shape, prefill GEMM throughput at M=512, and the machine's streaming
 * read bandwidth measured in the same run, so GEMV is reported as a share of it;
 * also GEMM at M=16 (batched decode), with the weights in cache and streamed. Q4_0/Q4_1/Q8_0 weights are packed as the
 * model loader packs them (matmul.h) unless --unpacked.
 *
 *   bench_matmul [--threads N] [--quick] [--cpu-time] [--in-cache] [--unpacked] [--isa scalar|avx2|avx512] [--types q4_0,q8_0,...]
 *
 * Weights are cycled through enough copies (>= 384 MB) that they stream from
 * DRAM like a real model's layers, not from the L3. Times are the best of the
 * repetitions. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/isa.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/peak.h"
#include "bench_weights.h"
#include "model/gguf.h"

/* --cpu-time: process CPU time divided by the thread count instead of wall time,
 * for machines shared with other work (a descheduled thread's wait is not counted;
 * the memory traffic of the others still is). */
static int g_cpu_time, g_threads = 1;

static double now(void) {
  struct timespec ts;
  clock_gettime(g_cpu_time ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
  return g_cpu_time ? t / g_threads : t;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Best of the repetitions: the build machines are shared, and the fastest run is
 * the one least disturbed by other processes. */
static double best(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return v[0];
}

/* ---- a minimal fork/join over threads, splitting N like the engine does ---- */

typedef struct {
  int kind; /* 0 read, 1 matmul */
  const uint64_t *buf;
  size_t words;
  uint64_t sink;
  di_dtype t;
  const void *W;
  size_t wrow;
  const void *xq;
  int64_t M, K, N;
  float *Y;
  int packed;
  int part, parts;
} job;

#ifndef PF_AHEAD
#define PF_AHEAD 128 /* in 16-byte vectors: 2 KB */
#endif

static void run_job(job *j) {
  if (j->kind == 0) {
    size_t lo = j->words * (size_t)j->part / (size_t)j->parts, hi = j->words * (size_t)(j->part + 1) / (size_t)j->parts;
    /* 16-byte vectors (baseline SSE2 / NEON), four chains, one 64-byte line per
     * iteration: the loop must not be the bottleneck, or the kernels' "share"
     * of it would exceed 100%. */
    typedef uint64_t v2 __attribute__((vector_size(16)));
    const v2 *p = (const v2 *)j->buf;
    v2 a0 = {0, 0}, a1 = a0, a2 = a0, a3 = a0;
    /* software prefetch 2 KB ahead, as the GEMV kernels do: here it reads faster than
     * the hardware prefetchers alone */
    for (size_t i = lo / 2; i + 4 <= hi / 2; i += 4) {
      __builtin_prefetch(p + i + PF_AHEAD);
      a0 ^= p[i], a1 ^= p[i + 1], a2 ^= p[i + 2], a3 ^= p[i + 3];
    }
    a0 ^= a1 ^ a2 ^ a3;
    j->sink = a0[0] ^ a0[1];
    return;
  }
  /* split on multiples of 16 columns, as the engine does (forward.c) */
  int64_t n0 = (j->N * j->part / j->parts + 15) / 16 * 16, n1 = (j->N * (j->part + 1) / j->parts + 15) / 16 * 16;
  if (n1 > j->N) n1 = j->N;
  if (j->packed) di_cpu_matmul_packed(j->t, j->W, j->N, j->xq, j->M, j->K, j->Y, j->N, n0, n1);
  else di_cpu_matmul(j->t, j->W, j->wrow, j->xq, j->M, j->K, j->Y, j->N, n0, n1);
}

static void *thread_main(void *p) {
  run_job(p);
  return NULL;
}

static void run_parallel(job *proto, int threads) {
  job jobs[64];
  pthread_t th[64];
  for (int i = 0; i < threads; i++) {
    jobs[i] = *proto;
    jobs[i].part = i;
    jobs[i].parts = threads;
  }
  for (int i = 1; i < threads; i++) pthread_create(&th[i], NULL, thread_main, &jobs[i]);
  run_job(&jobs[0]);
  for (int i = 1; i < threads; i++) pthread_join(th[i], NULL);
  proto->sink = jobs[0].sink;
}

static double read_bandwidth(int threads, int reps) {
  size_t bytes = (size_t)512 << 20;
  uint64_t *buf = aligned_alloc(64, bytes);
  memset(buf, 1, bytes);
  job j = {.kind = 0, .buf = buf, .words = bytes / 8};
  double t[16];
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    run_parallel(&j, threads);
    t[r] = now() - t0;
  }
  if (j.sink == 42) puts("");
  free(buf);
  return (double)bytes / best(t, reps) / 1e9;
}

/* Best time per copy of one pass of j over every weight copy, as a decode
 * step streams each layer once (reps <= 64). */
static double streamed(job *j, const uint8_t *W, size_t mat, size_t copies, int reps, int threads) {
  double tv[64];
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    for (size_t c = 0; c < copies; c++) {
      j->W = W + c * mat;
      run_parallel(j, threads);
    }
    tv[r] = (now() - t0) / (double)copies;
  }
  return best(tv, reps);
}

typedef struct { const char *name; di_dtype t; } tname;
static const tname types[] = {{"f32", DI_F32},   {"f16", DI_F16},   {"bf16", DI_BF16},
                              {"q8_0", DI_Q8_0}, {"q4_0", DI_Q4_0}, {"q4_1", DI_Q4_1},
                              {"q5_0", DI_Q5_0}, {"q5_1", DI_Q5_1}, {"q4_k", DI_Q4_K},
                              {"q5_k", DI_Q5_K}, {"q6_k", DI_Q6_K}, {"mxfp4", DI_MXFP4}};

int main(int argc, char **argv) {
  int threads = 1, quick = 0, in_cache = 0;
  const char *only = NULL;
  int unpacked = 0; /* --unpacked: Q4_0/Q4_1/Q8_0 in GGUF layout (the kernels before packing) */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--cpu-time")) g_cpu_time = 1;
    else if (!strcmp(argv[i], "--in-cache")) in_cache = 1;
    else if (!strcmp(argv[i], "--unpacked")) unpacked = 1;
    else if (!strcmp(argv[i], "--types") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
      const char *v = argv[++i];
      di_cpu_isa_level l = !strcmp(v, "scalar") ? DI_ISA_SCALAR : !strcmp(v, "avx2") ? DI_ISA_AVX2 : DI_ISA_AVX512;
      if (!di_cpu_isa_set(l)) {
        fprintf(stderr, "bench_matmul: this CPU cannot run --isa %s\n", v);
        return 2;
      }
    } else {
      fprintf(stderr, "usage: bench_matmul [--threads N] [--quick] [--cpu-time] [--in-cache] [--unpacked] [--isa scalar|avx2|avx512] [--types q4_0,q8_0,...]\n");
      return 2;
    }
  }
  if (threads < 1 || threads > 64) threads = 1;
  g_threads = threads;
  /* --in-cache: 128 weight rows (72-288 KB quantized, 512 KB F16, 1 MB F32) and
   * one copy, so GEMV shows the kernels' compute ceiling, not memory bandwidth */
  const int64_t N = in_cache ? 128 : 5632, K = 2048, MP = quick ? 64 : 512;
  const int reps = in_cache ? 50 : quick ? 3 : 5;
  int bw_reps = reps < 5 ? reps : 5;
  double bw = read_bandwidth(threads, bw_reps);
  printf("isa %s, threads %d, %s, read bandwidth %.1f GB/s (512 MB streaming read, best of %d)\n",
         di_cpu_isa_name(di_cpu_isa()), threads, g_cpu_time ? "CPU time" : "wall time", bw, bw_reps);
  di_cpu_peak pk = di_cpu_peak_measure(threads);
  printf("machine peak: int8 %.0f GOP/s (%s), f32 %.0f GFLOP/s (%s)\n", pk.int8_gops, pk.int8_how, pk.f32_gflops,
         pk.f32_how);
  printf("GEMV M=1 N=%ld K=%ld, GEMM M=%ld; GEMM share = of the int8 peak (quantized) or f32 peak (float types)\n",
         (long)N, (long)K, (long)MP);
  printf("%-5s %10s %8s %8s %11s %6s %11s %13s\n", "type", "GEMV GB/s", "share", "us/GEMV", "GEMM GOP/s", "share",
         "M=16 GOP/s", "M=16 streamed");
  uint64_t seed = 0x12345678;
  float *X = malloc((size_t)(MP * K) * 4), *Y = malloc((size_t)(MP * N) * 4);
  for (int64_t i = 0; i < MP * K; i++) X[i] = rndf(&seed);
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    di_dtype t = types[ti].t;
    if (only && !strstr(only, types[ti].name)) continue;
    size_t rb = di_dtype_row_bytes(t, K), mat = rb * (size_t)N;
    size_t copies = in_cache ? 1 : ((size_t)(quick ? 128 : 384) << 20) / mat + 1;
    uint8_t *W = aligned_alloc(64, (mat * copies + 63) / 64 * 64);
    fill_weights(t, W, N, K, &seed);
    int packed = !unpacked && di_cpu_packable(t) && di_cpu_pack(t, W, N, K);
    for (size_t c = 1; c < copies; c++) memcpy(W + c * mat, W, mat);
    void *xq = aligned_alloc(64, (di_cpu_act_bytes(t, MP, K) + 63) / 64 * 64);
    di_cpu_act_prepare(t, X, MP, K, xq);
    /* GEMV: one pass over every copy, as decode streams every layer once */
    job j = {.kind = 1, .t = t, .wrow = rb, .xq = xq, .M = 1, .K = K, .N = N, .Y = Y, .packed = packed};
    double gemv = streamed(&j, W, mat, copies, reps, threads), gbs = (double)mat / gemv / 1e9;
    /* GEMM: the activations and one weight copy (prefill reuses each weight block MP times) */
    j.M = MP;
    j.W = W;
    double tg[16];
    for (int r = 0; r < (quick ? 1 : 3); r++) {
      double t0 = now();
      run_parallel(&j, threads);
      tg[r] = now() - t0;
    }
    double gemm = best(tg, quick ? 1 : 3);
    /* batched decode: 16 rows against the weights (L2/L3-resident after the first pass) */
    j.M = 16;
    for (int r = 0; r < reps; r++) {
      double t0 = now();
      run_parallel(&j, threads);
      tg[r < 16 ? r : 15] = now() - t0;
    }
    double g16 = best(tg, reps < 16 ? reps : 16);
    /* batched decode as a step runs it: 16 rows against every copy once, the
     * weights streamed from memory (where prefetching the next panel counts) */
    double s16 = streamed(&j, W, mat, copies, reps, threads);
    double gops = 2.0 * (double)MP * (double)N * (double)K / gemm / 1e9;
    double peak = t == DI_F32 || t == DI_F16 || t == DI_BF16 ? pk.f32_gflops : pk.int8_gops;
    printf("%-5s %10.1f %7.0f%% %8.0f %11.1f %5.0f%% %11.1f %13.1f\n", types[ti].name, gbs, 100 * gbs / bw, gemv * 1e6,
           gops, peak > 0 ? 100 * gops / peak : 0.0, 2.0 * 16 * (double)N * (double)K / g16 / 1e9,
           2.0 * 16 * (double)N * (double)K / s16 / 1e9);
    fflush(stdout);
    free(W);
    free(xq);
  }
  free(X);
  free(Y);
  return 0;
}
