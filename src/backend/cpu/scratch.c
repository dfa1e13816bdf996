#include "backend/cpu/scratch.h"

#include "util/tscratch.h"

_Static_assert(DI_SCRATCH_SLOTS <= DI_TSCRATCH_SLOTS, "the CPU kernels' scratch slots fit one set");

static di_tscratch g_kernels = DI_TSCRATCH_INIT;

void *di_cpu_scratch(di_scratch_slot slot, size_t bytes) { return di_tscratch_get(&g_kernels, (int)slot, bytes); }
