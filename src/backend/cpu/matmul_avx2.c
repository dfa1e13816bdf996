/* AVX2 + FMA + F16C kernels. */
#include <immintrin.h>

#include "backend/cpu/matmul_kernels.h"

di_cpu_mm_fn di_cpu_mm_avx2(di_dtype t) {
  (void)t;
  return NULL;
}

di_cpu_actq_fn di_cpu_actq_avx2(di_cpu_act_kind kind) {
  (void)kind;
  return NULL;
}
