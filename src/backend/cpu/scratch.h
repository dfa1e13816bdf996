/* Per-thread scratch buffers for the GEMM kernels (the AMX B-tile staging, the
 * F16/BF16 weight panels converted to f32): kept between calls and grown as
 * needed, freed at thread exit. A fresh multi-megabyte allocation per call came
 * back from mmap as zero pages every time, and clearing them cost ~10% of a
 * prefill. */
#ifndef DI_CPU_SCRATCH_H
#define DI_CPU_SCRATCH_H

#include <stddef.h>

/* AMX: B-tile staging; FL: float weight panels; TAIL: the packed tail group (matmul_pack_tiles.h);
 * ROWS16: 16 activation rows transposed (matmul_q6k16_avx512.c); CHAINS: the F32 tall tile's
 * accumulators between its parts of K (matmul_avx512.c). */
typedef enum {
  DI_SCRATCH_AMX,
  DI_SCRATCH_FL,
  DI_SCRATCH_TAIL,
  DI_SCRATCH_ROWS16,
  DI_SCRATCH_CHAINS,
  DI_SCRATCH_SLOTS
} di_scratch_slot;

/* At least bytes of 64-byte aligned memory owned by the calling thread (the
 * same buffer as its previous call for this slot when large enough); NULL if
 * memory runs out. */
void *di_cpu_scratch(di_scratch_slot slot, size_t bytes);

#endif
