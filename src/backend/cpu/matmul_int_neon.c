/* NEON int8 kernels for baseline ARMv8.0 (no dot-product instructions). */
#define NEON_DOT 0
#define NEON_INT_ENTRY di_cpu_mm_neon_i8
#include "backend/cpu/matmul_int_neon.h"
