/* NEON kernels for packed weights (matmul_pack_neon.h) using SDOT (ARMv8.2 dotprod;
 * compiled with -march=armv8.2-a+dotprod, only called where HWCAP_ASIMDDP says
 * the CPU has it). */
#define NEON_DOT 1
#define PK_ENTRY di_cpu_mmp_neon_dot
#include "backend/cpu/matmul_pack_neon.h"
