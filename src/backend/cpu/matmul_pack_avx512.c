/* AVX-512 VNNI packed kernels, part one: Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0,
 * pk_mm and the per-type selector (the kernels themselves: matmul_pack_vnni.h;
 * the K-quants' tile functions: matmul_pack_kq_avx512.c). */
#define PK_PART_REST
#include "backend/cpu/matmul_pack_vnni.h"
