/* One packed (or F32/F16/BF16) matmul shape timed at several activation row counts M, one thread:
 * how much more an M-row matmul costs than a one-row one (batched decode: the
 * rows of 16 streams share every weight byte). Thread CPU time, best of the
 * repetitions, so other processes on a shared host count as little as they can.
 *
 *   bench_mm_rows TYPE N K [--stream] [--reps R] [--rows 1,2,4,8,16]
 *
 * TYPE q4_k, q6_k, q8_0, ..., or f32, f16, bf16 (unpacked rows); N output columns, K the inner size. Default: one
 * weight copy (in L2/L3 after the first pass: the kernel's compute); --stream
 * cycles through copies of >= 256 MB so the weights come from DRAM, as in a
 * decode step. Prints us per matmul and the ratio to M = 1. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/matmul.h"
#include "model/gguf.h"
#include "bench_weights.h"

static double thread_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const struct { const char *name; di_dtype t; } types[] = {
    {"q8_0", DI_Q8_0}, {"q4_0", DI_Q4_0}, {"q4_1", DI_Q4_1}, {"q5_0", DI_Q5_0},
    {"q5_1", DI_Q5_1}, {"q4_k", DI_Q4_K}, {"q5_k", DI_Q5_K}, {"q6_k", DI_Q6_K},
    {"f32", DI_F32},   {"f16", DI_F16},   {"bf16", DI_BF16}};

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: bench_mm_rows TYPE N K [--stream] [--reps R] [--rows 1,2,4,8,16]\n");
    return 2;
  }
  di_dtype t = DI_F32;
  int found = 0;
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (!strcmp(argv[1], types[i].name)) t = types[i].t, found = 1;
  const int64_t N = atoll(argv[2]), K = atoll(argv[3]);
  int stream = 0, reps = 20;
  const char *rows = "1,2,4,8,16";
  for (int i = 4; i < argc; i++) {
    if (!strcmp(argv[i], "--stream")) stream = 1;
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = argv[++i];
  }
  const bool packed = di_cpu_packable(t);
  const int64_t qk = di_dtype_block(t);
  if (!found || N < 1 || K < qk || K % qk || (packed && K % 256) || reps < 1) {
    fprintf(stderr, "bench_mm_rows: need a known TYPE, N >= 1 and K a multiple of its block (256 if packed)\n");
    return 2;
  }
  const size_t mat = di_dtype_row_bytes(t, K) * (size_t)N;
  const size_t copies = stream ? ((size_t)256 << 20) / mat + 1 : 1;
  uint8_t *W = aligned_alloc(64, (mat * copies + 63) / 64 * 64);
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  fill_weights(t, W, N, K, &seed);
  if (packed && !di_cpu_pack(t, W, N, K)) return 1;
  for (size_t c = 1; c < copies; c++) memcpy(W + c * mat, W, mat);
  int64_t MX = 1; /* the most rows asked for */
  for (const char *p = rows; *p;) {
    int64_t M = strtoll(p, (char **)&p, 10);
    if (M > MX && M <= 4096) MX = M;
    if (*p && *p != ',') break;
    if (*p == ',') p++;
  }
  float *X = malloc((size_t)(MX * K) * 4), *Y = malloc((size_t)(MX * N) * 4);
  for (int64_t i = 0; i < MX * K; i++) X[i] = rndf(&seed);
  void *xq = aligned_alloc(64, (di_cpu_act_bytes(t, MX, K) + 63) / 64 * 64);
  di_cpu_act_prepare(t, X, MX, K, xq);
  printf("%s N=%ld K=%ld, %s, best of %d, us per matmul (one thread, thread CPU time)\n", argv[1], (long)N, (long)K,
         stream ? "weights streamed from DRAM" : "weights in cache", reps);
  double one = 0;
  for (const char *p = rows; *p;) {
    int64_t M = strtoll(p, (char **)&p, 10);
    if (*p == ',') p++;
    if (M < 1 || M > MX) continue; /* (over 4096) */
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) { /* the first pass warms the cache (not counted) */
      double t0 = thread_now();
      for (size_t c = 0; c < copies; c++) {
        if (packed) di_cpu_matmul_packed(t, W + c * mat, N, xq, M, K, Y, N, 0, N);
        else di_cpu_matmul(t, W + c * mat, di_dtype_row_bytes(t, K), xq, M, K, Y, N, 0, N);
      }
      double dt = (thread_now() - t0) / (double)copies;
      if (r > 0 && dt < best) best = dt;
    }
    if (M == 1) one = best;
    printf("M=%-3ld %9.1f us  %5.2fx M=1\n", (long)M, best * 1e6, one > 0 ? best / one : 0.0);
  }
  free(W);
  free(X);
  free(Y);
  free(xq);
  return 0;
}
