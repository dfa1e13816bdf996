/* NEON kernels for packed weights (matmul_pack_neon.h) for baseline ARMv8.0 (no
 * dot-product instructions), and the selector between them and the SDOT build. */
#define NEON_DOT 0
#define PK_ENTRY di_cpu_mmp_neon_i8
#include "backend/cpu/matmul_pack_neon.h"

di_cpu_mmp_fn di_cpu_mmp_neon(di_dtype t, bool dotprod) {
  return dotprod ? di_cpu_mmp_neon_dot(t) : di_cpu_mmp_neon_i8(t);
}
