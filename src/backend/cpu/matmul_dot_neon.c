/* NEON int8 kernels using SDOT (ARMv8.2 dotprod; compiled with
 * -march=armv8.2-a+dotprod, only called where HWCAP_ASIMDDP says the CPU has it). */
#define NEON_DOT 1
#define NEON_INT_ENTRY di_cpu_mm_neon_dot
#include "backend/cpu/matmul_int_neon.h"
