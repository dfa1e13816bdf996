/* Measures the machine's compute limits the kernels are judged against: the
 * int8 dot-product rate (AVX-512 VNNI vpdpbusd where the CPU has it, else AVX2
 * vpmaddubsw + vpmaddwd; no probe on other CPUs yet, which report 0) and the
 * f32 FMA rate, on `threads` threads at once. Ops count a multiply and an add
 * each, like the GEMM figures (2*M*N*K). */
#ifndef DI_BACKEND_CPU_PEAK_H
#define DI_BACKEND_CPU_PEAK_H

typedef struct {
  double int8_gops;  /* 0 where no probe exists for this CPU */
  double f32_gflops; /* 0 likewise */
  const char *int8_how, *f32_how;
} di_cpu_peak;

/* Best of a few short runs (a peak, not a median): about 0.1 s in all. */
di_cpu_peak di_cpu_peak_measure(int threads);

/* The inner loops (peak_avx2.c, peak_avx512.c): `iters` rounds of 16
 * independent chains; the return value only keeps the work alive. */
long long di_cpu_peak_int8_avx512(long long iters);
long long di_cpu_peak_f32_avx512(long long iters);
long long di_cpu_peak_int8_avx2(long long iters);
long long di_cpu_peak_f32_avx2(long long iters);

#endif
