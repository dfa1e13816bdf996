#include "backend/cpu/peak.h"

#include <time.h>

#include "backend/cpu/isa.h"
#include "util/threadpool.h"

#ifdef DI_CPU_X86 /* the only probes so far (peak.h) */
typedef struct {
  long long (*loop)(long long);
  long long iters;
  long long sink[64];
} peak_task;

static void peak_run(void *p, int ith, int nth) {
  peak_task *t = p;
  t->sink[ith % 64] += t->loop(t->iters);
  (void)nth;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Best rate (G ops/s) over 20 runs (about a millisecond each) of `iters`
 * rounds of 16 chains of `ops` each, on every thread: on a shared host a
 * thread may lose its core for a run, and 5 runs had read half the 2-thread
 * peak at times. */
static double best_rate(di_threadpool *tp, int threads, long long (*loop)(long long), double ops) {
  peak_task t = {.loop = loop, .iters = 1 << 16};
  di_threadpool_run(tp, peak_run, &t); /* warm up: clocks, the AVX-512 license */
  t.iters = 1 << 18;
  double best = 0;
  for (int r = 0; r < 20; r++) {
    double t0 = now();
    di_threadpool_run(tp, peak_run, &t);
    double s = now() - t0, rate = (double)t.iters * 16 * ops * threads / s / 1e9;
    if (rate > best) best = rate;
  }
  return best;
}

#endif

di_cpu_peak di_cpu_peak_measure(int threads) {
  di_cpu_peak pk = {0, 0, "none", "none"};
#ifdef DI_CPU_X86
  if (threads < 1) threads = 1;
  di_threadpool *tp = di_threadpool_create(threads);
  if (!tp) return pk;
  const di_cpu_features *f = di_cpu_features_get();
  if (f->avx512f && f->avx512vnni) {
    pk.int8_gops = best_rate(tp, threads, di_cpu_peak_int8_avx512, 2 * 64);
    pk.int8_how = "AVX-512 VNNI vpdpbusd";
  } else if (f->avx2) {
    pk.int8_gops = best_rate(tp, threads, di_cpu_peak_int8_avx2, 2 * 32);
    pk.int8_how = "AVX2 vpmaddubsw+vpmaddwd";
  }
  if (f->avx512f) {
    pk.f32_gflops = best_rate(tp, threads, di_cpu_peak_f32_avx512, 2 * 16);
    pk.f32_how = "AVX-512 FMA";
  } else if (f->avx2 && f->fma) {
    pk.f32_gflops = best_rate(tp, threads, di_cpu_peak_f32_avx2, 2 * 8);
    pk.f32_how = "AVX2 FMA";
  }
  di_threadpool_free(tp);
#else
  (void)threads;
#endif
  return pk;
}
