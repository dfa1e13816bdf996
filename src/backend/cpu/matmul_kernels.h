/* Internal seam between the dispatcher (matmul.c) and the per-ISA kernel files. */
#ifndef DI_CPU_MATMUL_KERNELS_H
#define DI_CPU_MATMUL_KERNELS_H

#include <stdbool.h>
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

/* As di_cpu_mm_fn, for weights in the packed layout of N rows (matmul.h). */
typedef void (*di_cpu_mmp_fn)(const void *W, size_t wrow, int64_t N, const void *x, size_t xrow, int64_t M,
                              int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1);

/* NULL where the ISA has no kernel for the type (the scalar one is used). Each
 * family exists only in builds for its architecture (isa.h DI_CPU_X86/DI_CPU_ARM64). */
di_cpu_mm_fn di_cpu_mm_avx2(di_dtype t);
di_cpu_mmp_fn di_cpu_mmp_avx2(di_dtype t);
di_cpu_actq_fn di_cpu_actq_avx2(di_cpu_act_kind kind);
/* NEON: float kernels plus the int8 kernels in their dotprod (SDOT) or ARMv8.0 build. */
di_cpu_mm_fn di_cpu_mm_neon(di_dtype t, bool dotprod);
di_cpu_mm_fn di_cpu_mm_neon_i8(di_dtype t);
di_cpu_mm_fn di_cpu_mm_neon_dot(di_dtype t);
di_cpu_actq_fn di_cpu_actq_neon(di_cpu_act_kind kind);

/* The scalar reference, shared by both layouts: one 32-element GGUF block of
 * row w against activation block x; returns s + (d_w * d_a) * isum, then
 * + m_w * s_a for Q4_1/Q5_1. An output is the chain over its blocks in K order
 * from s = 0. */
float di_cpu_q32_block_step(di_dtype t, const void *w, const di_act_q8 *x, float s);
void di_cpu_mmp_scalar(di_dtype t, const void *W, size_t wrow, int64_t N, const void *x, size_t xrow, int64_t M,
                       int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1);

/* Packed layout (matmul_pack.c): rows in groups of DI_PK_G; group g's block b
 * (DI_PK_G * block bytes) starts at W + g * DI_PK_G * wrow + b * DI_PK_G * bb.
 * Inside, the fp16 d of the 8 rows, then (Q4_1) their fp16 m, then the quant
 * bytes as 32-byte words: word w holds bytes 4w..4w+3 of each row's qs, row c at
 * 4c. The N % 8 rows after the last full group keep the GGUF layout. */
#define DI_PK_G 8
static inline size_t di_pk_head_bytes(di_dtype t) { return t == DI_Q4_1 ? 4 : 2; }
/* Group-blocks b0..b1 of the tail rows, packed and zero-padded to 8 rows. */
void di_cpu_pack_tail(di_dtype t, const void *W, size_t wrow, int64_t N, int64_t b0, int64_t b1, uint8_t *dst);

bool di_cpu_exact_mode(void);
size_t di_cpu_act_row_bytes(di_dtype t, int64_t K);
void di_cpu_mm_exact(const void *W, size_t wrow, const void *x, int64_t M, int64_t K, float *Y, int64_t ldy,
                     int64_t n0, int64_t n1, di_dtype t);

#endif
