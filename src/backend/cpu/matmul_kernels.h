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
/* F32/F16/BF16 with AVX-512F (matmul_avx512.c); NULL for other types. */
di_cpu_mm_fn di_cpu_mm_avx512(di_dtype t);
/* Packed layout with AVX-512 F/BW/VL + VNNI (matmul_pack_vnni.h). */
di_cpu_mmp_fn di_cpu_mmp_avx512(di_dtype t);
/* Whether those kernels take the AMX tile path (CPU has AMX-INT8, Linux grants it, DI_CPU_AMX is not 0). */
bool di_cpu_amx_granted(void);
/* A packed matmul for any packable type t (the VNNI kernels' driver). */
typedef void (*di_cpu_mmp_rest_fn)(di_dtype t, const void *W, size_t wrow, int64_t N, const void *x, size_t xrow,
                                   int64_t M, int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1);
/* The AMX path (matmul_pack_amx.c): the whole 16-row chunks x group pairs of
 * [n0, n1) on the tile unit, the rest (and everything where AMX is not
 * granted) through rest. */
void di_cpu_mmp_amx(di_dtype t, di_cpu_mmp_rest_fn rest, const void *W, size_t wrow, int64_t N, const void *x,
                    size_t xrow, int64_t M, int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1);
di_cpu_actq_fn di_cpu_actq_avx2(di_cpu_act_kind kind);
di_cpu_actq_fn di_cpu_actq_avx512(di_cpu_act_kind kind); /* Q8 only (actq_avx512.c) */
/* NEON: float kernels plus the int8 kernels in their dotprod (SDOT) or ARMv8.0 build. */
di_cpu_mm_fn di_cpu_mm_neon(di_dtype t, bool dotprod);
di_cpu_mm_fn di_cpu_mm_neon_i8(di_dtype t);
di_cpu_mm_fn di_cpu_mm_neon_dot(di_dtype t);
di_cpu_actq_fn di_cpu_actq_neon(di_cpu_act_kind kind);
/* Packed layout: the SDOT (dotprod) or ARMv8.0 build (matmul_pack_neon.h). */
di_cpu_mmp_fn di_cpu_mmp_neon(di_dtype t, bool dotprod);
di_cpu_mmp_fn di_cpu_mmp_neon_i8(di_dtype t);
di_cpu_mmp_fn di_cpu_mmp_neon_dot(di_dtype t);

/* The scalar reference, shared by both layouts: one 32-element GGUF block of
 * row w against activation block x; returns fma(isum, d_w * d_a, s), then
 * fma(m_w, s_a, .) for Q4_1/Q5_1 (each one rounding). An output is the chain over its blocks in K order
 * from s = 0. */
float di_cpu_q32_block_step(di_dtype t, const void *w, const di_act_q8 *x, float s);
/* The same for one 256-element K-quant block: *s = fma(isum, d_a * d_w, *s) and
 * *sm = fma(imin, -d_a * dmin, *sm), both integer sums exact; an output is s + sm. */
void di_cpu_qk_block_step(di_dtype t, const void *w, const di_act_q8k *x, float *s, float *sm);
void di_cpu_mmp_scalar(di_dtype t, const void *W, size_t wrow, int64_t N, const void *x, size_t xrow, int64_t M,
                       int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1);

/* Packed layout (matmul_pack.c): rows in groups of DI_PK_G; group g's block b
 * (DI_PK_G * block bytes) starts at W + g * DI_PK_G * wrow + b * DI_PK_G * bb.
 * Inside, the block's head as 2-byte fields of the 8 rows (field f of row c at
 * 16f + 2c): d, then m / dmin for Q4_1, Q5_1 and Q4_K (MXFP4: one byte per row, e). Then the rest of the block as
 * 32-byte words: word w holds bytes 4w..4w+3 of each row's remaining bytes, row
 * c at 4c (Q4_K: the 12 scale bytes, then qs; Q5_K: the scale bytes, qh, qs; Q6_K, whose d is at the block's
 * end: ql, qh, scales, reordered by di_pk_word_pos). The N % 8 rows after the last full group keep the GGUF
 * layout. */
#define DI_PK_G 8
static inline size_t di_pk_head_bytes(di_dtype t) {
  return t == DI_MXFP4 ? 1 : t == DI_Q4_1 || t == DI_Q5_1 || t == DI_Q4_K || t == DI_Q5_K ? 4 : 2;
}
/* MXFP4's head is one E8M0 byte per row (row c's at byte c), then the 4 words
 * of codes. Its kernels map codes through di_mxfp4_kv; where the int8 dot
 * wants unsigned weights (VNNI) through the table + DI_PK_MXFP4_BIAS, taking
 * DI_PK_MXFP4_BIAS * sum(a) off, as Q4_0's offset. */
#define DI_PK_MXFP4_BIAS 12
/* Q5_0 / Q5_1: a word of high bits (permuted, di_pk_q5_bits) before the nibble words. */
static inline bool di_pk_q5(di_dtype t) { return t == DI_Q5_0 || t == DI_Q5_1; }
/* The offset of the stored quants (value = d * (q - offset)): Q4_0 8, Q5_0 16;
 * kernels take it off as offset * sum(a) or from the staged bytes. */
static inline int di_pk_offset(di_dtype t) { return t == DI_Q4_0 ? 8 : t == DI_Q5_0 ? 16 : 0; }
/* Q4_1 / Q5_1: a min m (head field 1) and the chain's second fma(m_w, s_a, .). */
static inline bool di_pk_min(di_dtype t) { return t == DI_Q4_1 || t == DI_Q5_1; }
/* Byte offsets of the fields inside one packed group-block (8 rows):
 *   every type: DI_PK_D, the rows' fp16 d; Q4_1 / Q5_1: DI_PK_M, their fp16 m;
 *     quant words from DI_PK_G * di_pk_head_bytes(t) (Q5_0 / Q5_1: the high-bit word first);
 *   Q4_K: DI_PK_M (dmin), DI_PK_QK_SC (3 words of 6-bit scales and mins: the
 *     12 scale bytes of GGUF as words A, B, C), DI_PK_Q4K_QS (32 quant words;
 *     chunk c, 64 elements = sub-blocks 2c and 2c+1 as low and high nibbles,
 *     at + 256c; word w of a chunk holds elements 4w..4w+3);
 *   Q5_K: as Q4_K, with 8 words of fifth bits at DI_PK_Q5K_QH (word w: elements
 *     4w..4w+3 of every sub-block, bit s for sub-block s), the quants at DI_PK_Q5K_QS;
 *   Q6_K: DI_PK_D, then its words from DI_PK_Q6K_WORDS in the order of
 *     di_pk_q6k_sc / _ql / _qh below. */
#define DI_PK_D 0
#define DI_PK_M 16
#define DI_PK_QK_SC 32
#define DI_PK_Q4K_QS 128
#define DI_PK_Q5K_QH 128
#define DI_PK_Q5K_QS 384
#define DI_PK_Q6K_WORDS 16
#define DI_PK_WORD 32 /* bytes of a word: 4 bytes of each of the 8 rows */
_Static_assert(DI_PK_QK_SC == DI_PK_G * 4 && DI_PK_Q4K_QS == DI_PK_QK_SC + 3 * DI_PK_WORD &&
                   DI_PK_Q5K_QS == DI_PK_Q5K_QH + 8 * DI_PK_WORD && DI_PK_Q6K_WORDS == DI_PK_G * 2,
               "packed K-quant layout");

/* What every tile of one packed matmul shares (matmul_pack_tiles.h): group g
 * of the weights starts gstride bytes after group g - 1, its block b gbb bytes
 * after block b - 1; activation rows are xrow bytes apart, nb blocks each;
 * outputs [n0, n1) of rows ldy floats apart. */
typedef struct {
  size_t gstride, gbb, xrow;
  int64_t nb, ldy, n0, n1;
} di_pk_job;

/* AVX-512 VNNI: packed Q6_K for the leading rows of a matmul, 16 rows at a time
 * (matmul_q6k16_avx512.c; a last tile of 10-15 rows too): full groups [g0, gf)
 * at w (group g0's), then the packed tail group `full` (when tail is not NULL).
 * Returns the rows done (0 when M < 10 or out of memory); the same bits as the
 * row-tile kernels. */
int64_t di_cpu_q6k_rows16(const di_pk_job *j, const uint8_t *w, int64_t g0, int64_t gf, const uint8_t *tail,
                          int64_t full, const uint8_t *x, int64_t M, float *Y);

/* Where the head sits in a GGUF block, and where the words start. */
static inline size_t di_pk_head_at(di_dtype t) { return t == DI_Q6_K ? 208 : 0; }
static inline size_t di_pk_words_at(di_dtype t) { return t == DI_Q6_K ? 0 : di_pk_head_bytes(t); }
static inline bool di_pk_kquant(di_dtype t) { return t == DI_Q4_K || t == DI_Q5_K || t == DI_Q6_K; }
/* GGUF block bytes of a packable type (inline, so kernels fold it per type). */
static inline size_t di_pk_block_bytes(di_dtype t) {
  switch (t) {
  case DI_Q4_0: return sizeof(di_block_q4_0);
  case DI_Q4_1: return sizeof(di_block_q4_1);
  case DI_Q5_0: return sizeof(di_block_q5_0);
  case DI_Q5_1: return sizeof(di_block_q5_1);
  case DI_Q4_K: return sizeof(di_block_q4_K);
  case DI_Q5_K: return sizeof(di_block_q5_K);
  case DI_Q6_K: return sizeof(di_block_q6_K);
  case DI_MXFP4: return sizeof(di_block_mxfp4);
  default: return sizeof(di_block_q8_0);
  }
}
/* Packed position of source word w. Identity but for Q6_K, whose words are put
 * in the order its kernel first reads them, so a GEMV streams forward: the 4
 * scale words, then per 128-element half h: ql words 0-7, qh words 0-7, ql
 * words 8-15 of h. */
/* Q6_K's packed word positions, as the kernels address them: scale word k; ql
 * word 8 * second + w of half h; qh word w of half h. */
static inline size_t di_pk_q6k_sc(size_t k) { return k; }
static inline size_t di_pk_q6k_ql(size_t h, size_t second, size_t w) { return 4 + 24 * h + 16 * second + w; }
static inline size_t di_pk_q6k_qh(size_t h, size_t w) { return 4 + 24 * h + 8 + w; }
static inline size_t di_pk_word_pos(di_dtype t, size_t w) {
  if (t != DI_Q6_K) return w;
  if (w >= 48) return di_pk_q6k_sc(w - 48);
  if (w >= 32) return di_pk_q6k_qh((w - 32) / 8, (w - 32) % 8);
  return di_pk_q6k_ql(w / 16, w % 16 / 8, w % 8);
}
/* Q5_0's high bits (its word 0, GGUF's qh: bit j for element j) are stored
 * permuted so that a kernel gets the bits of one nibble word's elements with one
 * shift and one mask: element j = 16h + 4w + e (half h, word w, byte e) goes to
 * bit 8e + 2w + h, so bit k = 2w + h of every byte belongs to word w, half h, and
 * rotating it to bit 4 (0x10, the value's fifth bit) puts it in that byte. */
static inline int di_pk_q5_pos(int j) { return 8 * (j % 4) + 2 * (j % 16 / 4) + j / 16; }
static inline uint32_t di_pk_q5_bits(uint32_t qh) {
  uint32_t r = 0;
  for (int j = 0; j < 32; j++) r |= ((qh >> j) & 1u) << di_pk_q5_pos(j);
  return r;
}
static inline uint32_t di_pk_q5_unbits(uint32_t r) {
  uint32_t qh = 0;
  for (int j = 0; j < 32; j++) qh |= ((r >> di_pk_q5_pos(j)) & 1u) << j;
  return qh;
}
/* Left rotation that brings bit 2w + h of each byte to bit 4. */
static inline int di_pk_q5_rot(int w, int h) { return (4 - (2 * w + h)) & 31; }

/* Group-blocks b0..b1 of the tail rows, packed and zero-padded to 8 rows. */
void di_cpu_pack_tail(di_dtype t, const void *W, size_t wrow, int64_t N, int64_t b0, int64_t b1, uint8_t *dst);

bool di_cpu_exact_mode(void);
size_t di_cpu_act_row_bytes(di_dtype t, int64_t K);
void di_cpu_mm_exact(const void *W, size_t wrow, const void *x, int64_t M, int64_t K, float *Y, int64_t ldy,
                     int64_t n0, int64_t n1, di_dtype t);

#endif
