/* The AVX-512 F32/F16/BF16 kernels (matmul_avx512.c) built against SIMDe's
 * portable AVX-512, so test_matmul_avx512.c's checks (bit-identical to AVX2)
 * run on any x86-64 with AVX2, not only on AVX-512 hardware. */
#define DI_AVX512_EMULATE
#define AI static inline /* not forced: see matmul_tiles.h */
#define UNROLL
#include "backend/cpu/matmul_avx512.c"

#define FL512_TEST_KERNEL di_cpu_mm_avx512_emu
#define FL512_TEST_NAME "test_matmul_avx512emu"
#include "test_matmul_avx512.c"
