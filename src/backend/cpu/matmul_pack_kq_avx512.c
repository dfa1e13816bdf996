/* AVX-512 VNNI packed kernels, part two: the Q4_K / Q5_K / Q6_K tile functions
 * (matmul_pack_vnni.h), compiled apart from the other types because their 4-
 * and 8-row tiles are most of the file's code. */
#define PK_PART_KQUANT
#include "backend/cpu/matmul_pack_vnni.h"
