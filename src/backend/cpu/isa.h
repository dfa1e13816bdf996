/* Runtime ISA detection for the CPU kernels. Kernels are compiled per ISA
 * (files *_avx2.c carry their own target flags and exist only in x86-64 builds;
 * *_neon.c only in aarch64 builds) and picked once through function pointers;
 * DI_CPU_ISA=scalar|avx2|avx512|neon lowers the choice (never raises it above
 * what the CPU has), so tests can force the reference. */
#ifndef DI_CPU_ISA_H
#define DI_CPU_ISA_H

#include <stdbool.h>

#if defined(__x86_64__)
#define DI_CPU_X86 1
#elif defined(__aarch64__)
#define DI_CPU_ARM64 1
#endif

typedef enum di_cpu_isa_level {
  DI_ISA_SCALAR = 0,
  DI_ISA_NEON = 1,
  DI_ISA_AVX2 = 2,   /* AVX2 + FMA + F16C */
  DI_ISA_AVX512 = 3, /* AVX-512 F/BW/VL (+ VNNI, BF16 reported separately) */
} di_cpu_isa_level;

typedef struct di_cpu_features {
  bool avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16, amx_int8;
  bool neon, neon_dotprod; /* aarch64: Advanced SIMD (baseline), ARMv8.2 SDOT/UDOT */
} di_cpu_features;

/* What the CPU supports, detected once. */
const di_cpu_features *di_cpu_features_get(void);
/* The level in use: detected, lowered by DI_CPU_ISA, or set by di_cpu_isa_set. */
di_cpu_isa_level di_cpu_isa(void);
/* Force a level (tests, benchmarks). Returns false and changes nothing when the
 * CPU lacks it. Not thread-safe against kernels running at the same moment. */
bool di_cpu_isa_set(di_cpu_isa_level level);
const char *di_cpu_isa_name(di_cpu_isa_level level);

#endif
