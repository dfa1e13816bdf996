/* Internal seam between the dispatcher (matmul.c) and the per-ISA kernel files. */
#ifndef DI_CPU_MATMUL_KERNELS_H
#define DI_CPU_MATMUL_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/quant.h"

/* Activation format a weight type pairs with: f32, int8 blocks of 32 (ggml's
 * Q8_0/Q8_1) or of 256 (Q8_K). */
typedef enum { DI_ACT_F32, DI_ACT_Q8, DI_ACT_Q8K, DI_ACT_KINDS } di_cpu_act_kind;

/* Computes Y[m*ldy+n] for m in [0,M), n in [n0,n1); x rows are xrow bytes apart. */
typedef void (*di_cpu_mm_fn)(const void *W, size_t wrow, const void *x, size_t xrow, int64_t M,
                             int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1);
/* Quantizes one activation row of k elements. */
typedef void (*di_cpu_actq_fn)(const float *x, void *y, int64_t k);

/* NULL where the ISA has no kernel for the type (the scalar one is used). */
di_cpu_mm_fn di_cpu_mm_avx2(di_dtype t);
di_cpu_actq_fn di_cpu_actq_avx2(di_cpu_act_kind kind);

#endif
