#include "backend/cpu/membw.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/matmul_tiles.h" /* gemv_prefetch */
#include "util/mem.h"
#include "util/threadpool.h"

typedef struct bw_task {
  const uint64_t *buf;
  size_t n;
  uint64_t sink[64];
} bw_task;

static void bw_run(void *p, int ith, int nth) {
  bw_task *t = p;
  size_t per = t->n / (size_t)nth, lo = per * (size_t)ith, hi = ith == nth - 1 ? t->n : lo + per;
  /* Four independent accumulators let the loads overlap; the same two
   * prefetch sweeps as the GEMV kernels (gemv_prefetch) keep more lines in
   * flight than plain loads do (one core here: ~17.8 -> ~18.5 GB/s), so the bound that
   * generation is compared with is what this core can actually read. */
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = lo; i + 4 <= hi; i += 4) {
    if (i % 8 == 0) gemv_prefetch((const uint8_t *)(t->buf + i), 64, GEMV_PF_L1);
    a ^= t->buf[i];
    b ^= t->buf[i + 1];
    c ^= t->buf[i + 2];
    d ^= t->buf[i + 3];
  }
  t->sink[ith % 64] = a ^ b ^ c ^ d;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

double di_cpu_read_bandwidth(size_t bytes, int threads, int reps) {
  uint64_t *buf = di_alloc_aligned(bytes, true);
  if (!buf) return 0;
  memset(buf, 1, bytes);
  di_threadpool *tp = di_threadpool_create(threads);
  bw_task t = {.buf = buf, .n = bytes / 8};
  di_threadpool_run(tp, bw_run, &t); /* warm up: page tables, THP */
  double *gbs = malloc((size_t)(reps > 0 ? reps : 1) * sizeof *gbs);
  for (int r = 0; r < reps; r++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    di_threadpool_run(tp, bw_run, &t);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    gbs[r] = (double)bytes / s / 1e9;
  }
  qsort(gbs, (size_t)reps, sizeof *gbs, cmp_double);
  double med = reps > 0 ? gbs[reps / 2] : 0;
  free(gbs);
  di_threadpool_free(tp);
  di_free_aligned(buf, bytes);
  return med;
}
