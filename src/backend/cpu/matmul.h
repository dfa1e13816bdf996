/* CPU matmul against weights in GGUF layout: Y = X · Wᵀ.
 *
 * Activations are prepared once per matmul input: each row on its own is
 * quantized to the weight type's partner format, value for value as ggml's CPU
 * backend does (quant.h: Q8_0/Q8_1 blocks of 32 for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0;
 * Q8_K blocks of 256 with 16-element sums for Q4_K/Q5_K/Q6_K), or kept as f32
 * (F32/F16/BF16 weights). Then any thread computes any output columns.
 *
 * Row invariance: Y[m][n] is computed by the same instruction sequence whatever
 * M, n0..n1 or thread count (threads split N, never K), so a token's result is
 * bit-identical alone or inside a batch. The ISA (isa.h) is chosen once per
 * process; scalar and SIMD results agree within float rounding, not bitwise.
 *
 * Environment: DI_CPU_ISA=scalar|neon|avx2 lowers the ISA (isa.h). DI_CPU_EXACT=1 is
 * an accuracy-debugging mode: activations stay f32 and each weight row is
 * dequantized and dotted in f32 (slow), which separates weight-quantization from
 * activation-quantization error when comparing logits with another engine. */
#ifndef DI_CPU_MATMUL_H
#define DI_CPU_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"

/* True for the weight types below: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 MXFP4 Q4_K Q5_K Q6_K
 * (MXFP4 has SIMD kernels only in the packed layout on x86, di_cpu_packable). */
bool di_cpu_dtype_supported(di_dtype t);

/* Bytes of prepared activations for M rows of K (K a multiple of the weight's
 * block size). The buffer needs only 4-byte alignment; 64 is best. */
size_t di_cpu_act_bytes(di_dtype wtype, int64_t M, int64_t K);
/* Weight types with equal values here take the same prepared activations, so one
 * di_cpu_act_prepare can feed several matmuls (Q/K/V, gate/up): 0 f32, 1 Q8 blocks
 * of 32 (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 MXFP4), 2 Q8 blocks of 256 (Q4_K Q5_K Q6_K). */
int di_cpu_act_format(di_dtype wtype);
void di_cpu_act_prepare(di_dtype wtype, const float *X, int64_t M, int64_t K, void *xq);

/* Y[m*ldy + n] = sum_k W[n][k] * X[m][k] for m in [0,M), n in [n0,n1).
 * W: rows of K elements in GGUF layout of wtype, row stride w_row_bytes (row n at
 * W + n*w_row_bytes), rows 2-byte aligned (4 for F32), as GGUF data always is;
 * xq from di_cpu_act_prepare with the same wtype, M, K. */
void di_cpu_matmul(di_dtype wtype, const void *W, size_t w_row_bytes, const void *xq,
                   int64_t M, int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1);

/* Packed weights (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K, and Q5_K and MXFP4 on x86;
 * di_cpu_packable; the model loader packs them in place): rows interleaved in groups of 8 so that one 32-byte load holds 4
 * consecutive quants of 8 rows, and the SIMD kernel's lanes are output columns.
 * Each output is then one scalar chain over the blocks in K order,
 * s = fma(isum, d_w*d_a, s) (then s = fma(m_w, s_a, s) for Q4_1: one rounding per
 * step, and one instruction less per row and block in the SIMD finish, which
 * bounds the M = 16 AMX path; the K-quants keep their mins
 * in a second chain added at the end, as di_cpu_qk_block_step), whatever M,
 * n0..n1 or the ISA: the scalar, AVX2, AVX-512 VNNI, AMX and NEON kernels give
 * bit-identical results (kernel code: matmul_pack_tiles.h). Rows must be contiguous
 * (stride = row bytes), as GGUF data is. */
bool di_cpu_packable(di_dtype t);
/* In place; false when out of memory (W is then unchanged). */
bool di_cpu_pack(di_dtype t, void *W, int64_t N, int64_t K);
/* The GGUF bytes of row n of a packed matrix; its values, as di_cpu_dequant_row
 * gives them (embedding lookup in tied token_embd/output weights). */
void di_cpu_packed_row(di_dtype t, const void *W, int64_t N, int64_t K, int64_t n, void *dst);
void di_cpu_packed_dequant_row(di_dtype t, const void *W, int64_t N, int64_t K, int64_t n, float *dst);
/* True when the packed int8 matmuls run 16-row chunks on AMX tiles. */
bool di_cpu_amx_active(void);
/* As di_cpu_matmul, W packed with N rows. */
void di_cpu_matmul_packed(di_dtype wtype, const void *W, int64_t N, const void *xq, int64_t M, int64_t K, float *Y,
                          int64_t ldy, int64_t n0, int64_t n1);

/* Dequantize n elements (a multiple of the block size) of one row: embedding
 * lookup, tests. Bit-exact with gguf-py's dequantize. */
void di_cpu_dequant_row(di_dtype t, const void *src, float *dst, int64_t n);

/* Quantize n floats into t like ggml's reference quantizers (bit-exact with
 * gguf-py's quantize): F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0. For the
 * random-weight model generator and tests. Returns false for other types. */
bool di_cpu_quantize_row(di_dtype t, const float *src, void *dst, int64_t n);

#endif
