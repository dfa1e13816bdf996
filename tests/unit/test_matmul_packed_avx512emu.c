/* The AVX-512 VNNI packed kernels (matmul_pack_vnni.h, whole), built against SIMDe's
 * portable AVX-512 so that they are checked on any x86-64 with AVX2, not only
 * on AVX-512 hardware: the same checks as test_matmul_packed.c (bit-identical
 * to the scalar reference for every M 1..17 and split column ranges, tail
 * groups included), calling the kernels directly. */
#define DI_AVX512_EMULATE
#define AI static inline /* not forced: see matmul_tiles.h */
#define UNROLL
#include "backend/cpu/matmul_pack_vnni.h"

#define PACKED_TEST_KERNEL di_cpu_mmp_avx512_emu
#define PACKED_TEST_NAME "test_matmul_packed_avx512emu"
#include "test_matmul_packed.c"
