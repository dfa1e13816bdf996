#include "backend/cpu/isa.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define DI_X86 1
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)
#endif
#endif

static di_cpu_features g_feat;
static di_cpu_isa_level g_level;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#ifdef DI_X86
static unsigned long long di_xgetbv0(void) {
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((unsigned long long)hi << 32) | lo;
}
#endif

static void di_detect(void) {
  memset(&g_feat, 0, sizeof g_feat);
#ifdef DI_X86
  unsigned a, b, c, d;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    bool osxsave = c & (1u << 27), avx = c & (1u << 28);
    g_feat.fma = c & (1u << 12);
    g_feat.f16c = c & (1u << 29);
    /* The OS must save YMM (and ZMM/opmask) state, or the instructions fault. */
    unsigned long long xcr0 = osxsave ? di_xgetbv0() : 0;
    bool ymm = avx && (xcr0 & 6) == 6, zmm = ymm && (xcr0 & 0xe0) == 0xe0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
      g_feat.avx2 = ymm && (b & (1u << 5));
      g_feat.avx512f = zmm && (b & (1u << 16));
      g_feat.avx512bw = zmm && (b & (1u << 30));
      g_feat.avx512vl = zmm && (b & (1u << 31));
      g_feat.avx512vnni = zmm && (c & (1u << 11));
      /* AMX-TILE and AMX-INT8, with the OS managing XTILECFG and XTILEDATA (the
       * process must still ask Linux for the tile data: matmul_pack_amx.c) */
      g_feat.amx_int8 = (d & (1u << 24)) && (d & (1u << 25)) && (xcr0 & 0x60000) == 0x60000;
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) g_feat.avx512bf16 = zmm && (a & (1u << 5));
    g_feat.fma &= ymm;
    g_feat.f16c &= ymm;
  }
#elif defined(__aarch64__)
  g_feat.neon = true; /* Advanced SIMD is mandatory on AArch64 */
#if defined(__linux__)
  /* SDOT is optional before ARMv8.4; the kernel reports it in AT_HWCAP. */
  g_feat.neon_dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#endif
#endif
  di_cpu_isa_level best = DI_ISA_SCALAR;
  if (g_feat.neon) best = DI_ISA_NEON;
  if (g_feat.avx2 && g_feat.fma && g_feat.f16c) best = DI_ISA_AVX2;
  if (best == DI_ISA_AVX2 && g_feat.avx512f && g_feat.avx512bw && g_feat.avx512vl)
    best = DI_ISA_AVX512;
  const char *env = getenv("DI_CPU_ISA");
  if (env) {
    static const char *names[] = {"scalar", "neon", "avx2", "avx512"};
    for (int i = 0; i < 4; i++)
      if (strcmp(env, names[i]) == 0 && (di_cpu_isa_level)i < best) best = (di_cpu_isa_level)i;
  }
  g_level = best;
}

const di_cpu_features *di_cpu_features_get(void) {
  pthread_once(&g_once, di_detect);
  return &g_feat;
}

di_cpu_isa_level di_cpu_isa(void) {
  pthread_once(&g_once, di_detect);
  return g_level;
}

bool di_cpu_isa_set(di_cpu_isa_level level) {
  const di_cpu_features *f = di_cpu_features_get();
  bool ok;
  switch (level) {
  case DI_ISA_SCALAR: ok = true; break;
  case DI_ISA_NEON: ok = f->neon; break;
  case DI_ISA_AVX2: ok = f->avx2 && f->fma && f->f16c; break;
  case DI_ISA_AVX512: ok = f->avx2 && f->fma && f->f16c && f->avx512f && f->avx512bw && f->avx512vl; break;
  default: ok = false;
  }
  if (ok) g_level = level;
  return ok;
}

const char *di_cpu_isa_name(di_cpu_isa_level level) {
  switch (level) {
  case DI_ISA_SCALAR: return "scalar";
  case DI_ISA_NEON: return "neon";
  case DI_ISA_AVX2: return "avx2";
  case DI_ISA_AVX512: return "avx512";
  }
  return "?";
}
