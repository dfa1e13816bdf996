/* The packed weight layout (matmul_kernels.h, DI_PK_G) and its scalar kernel.
 *
 * Why pack: with rows interleaved 8 at a time, a 32-byte register holds 4
 * consecutive quants of 8 rows, so _mm256_maddubs_epi16 + _mm256_madd_epi16 put
 * one output column's partial dot in each int32 lane. Every output then reduces
 * in its own lane, one block at a time, with no horizontal sums, and the same
 * chain serves GEMV and GEMM (row invariance). The layout has exactly the bytes
 * of the GGUF rows it replaces, so packing is in place and costs no memory; the
 * N % 8 rows after the last full group stay as they are and are packed on the fly,
 * zero-padded, by the kernels (di_cpu_pack_tail).
 *
 * Q5_0 packs like Q4_0 with one more word, its high bits, whose bits are
 * permuted (di_pk_q5_bits) so that kernels pick each word's bits with a shift;
 * Q5_1 the same with Q4_1's head (d, m).
 *
 * The K-quants pack the same way per 256-element super-block (Q4_K: d and dmin
 * as the head, then 35 words: 3 of 6-bit scales, 32 of quants; Q5_K the same
 * with its 8 words of fifth bits between the scales and the quants; Q6_K: d, then 32
 * words of low nibbles, 16 of high bits, 4 of int8 scales), so one register
 * load gives 4 consecutive quants of 8 rows and another the 8 rows' scales,
 * decoded for all 8 columns at once. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/isa.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_kernels.h"

/* Q5_K and MXFP4 have packed kernels on x86 only (AVX2, AVX-512 VNNI); elsewhere Q5_K's rows
 * stay as they are for the unpacked kernels rather than fall to the scalar
 * packed reference, and MXFP4's become Q8_0 (prepare.c). */
bool di_cpu_packable(di_dtype t) {
#ifdef DI_CPU_X86
  if (t == DI_Q5_K || t == DI_MXFP4) return true;
#endif
  return t == DI_Q4_0 || t == DI_Q4_1 || t == DI_Q5_0 || t == DI_Q5_1 || t == DI_Q8_0 || t == DI_Q4_K || t == DI_Q6_K;
}

/* Blocks per row; the largest packable block (a row's block copied out). */
static int64_t row_blocks(di_dtype t, int64_t K) { return K / di_dtype_block(t); }
#define MAX_BLOCK sizeof(di_block_q6_K)

/* GGUF block of row c (0..7) <-> its bytes in a packed group-block gb. */
static void scatter_block(di_dtype t, const uint8_t *src, int c, uint8_t *gb) {
  size_t hb = di_pk_head_bytes(t), qb = di_dtype_block_bytes(t) - hb, ha = di_pk_head_at(t), wa = di_pk_words_at(t);
  if (hb == 1) gb[c] = src[ha]; /* MXFP4's e */
  for (size_t h = 0; h < hb / 2; h++) memcpy(gb + 16 * h + 2 * c, src + ha + 2 * h, 2);
  for (size_t w = 0; w < qb / 4; w++) memcpy(gb + 8 * hb + 32 * di_pk_word_pos(t, w) + 4 * c, src + wa + 4 * w, 4);
  if (di_pk_q5(t)) {
    uint32_t qh;
    memcpy(&qh, gb + 8 * hb + 4 * c, 4);
    qh = di_pk_q5_bits(qh);
    memcpy(gb + 8 * hb + 4 * c, &qh, 4);
  }
}

static void gather_block(di_dtype t, const uint8_t *gb, int c, uint8_t *dst) {
  size_t hb = di_pk_head_bytes(t), qb = di_dtype_block_bytes(t) - hb, ha = di_pk_head_at(t), wa = di_pk_words_at(t);
  if (hb == 1) dst[ha] = gb[c];
  for (size_t h = 0; h < hb / 2; h++) memcpy(dst + ha + 2 * h, gb + 16 * h + 2 * c, 2);
  for (size_t w = 0; w < qb / 4; w++) memcpy(dst + wa + 4 * w, gb + 8 * hb + 32 * di_pk_word_pos(t, w) + 4 * c, 4);
  if (di_pk_q5(t)) {
    uint32_t qh;
    memcpy(&qh, dst + wa, 4);
    qh = di_pk_q5_unbits(qh);
    memcpy(dst + wa, &qh, 4);
  }
}

bool di_cpu_pack(di_dtype t, void *W, int64_t N, int64_t K) {
  size_t rb = di_dtype_row_bytes(t, K), bb = di_dtype_block_bytes(t);
  int64_t nb = row_blocks(t, K);
  uint8_t *tmp = malloc(DI_PK_G * rb);
  if (!tmp) return false;
  for (int64_t g = 0; g < N / DI_PK_G; g++) {
    uint8_t *grp = (uint8_t *)W + (size_t)g * DI_PK_G * rb;
    memcpy(tmp, grp, DI_PK_G * rb);
    for (int64_t b = 0; b < nb; b++)
      for (int c = 0; c < DI_PK_G; c++) scatter_block(t, tmp + c * rb + b * bb, c, grp + b * DI_PK_G * bb);
  }
  free(tmp);
  return true;
}

void di_cpu_packed_row(di_dtype t, const void *W, int64_t N, int64_t K, int64_t n, void *dst) {
  size_t rb = di_dtype_row_bytes(t, K), bb = di_dtype_block_bytes(t);
  const uint8_t *w = W;
  if (n >= N / DI_PK_G * DI_PK_G) {
    memcpy(dst, w + (size_t)n * rb, rb);
    return;
  }
  const uint8_t *grp = w + (size_t)(n / DI_PK_G) * DI_PK_G * rb;
  for (int64_t b = 0; b < row_blocks(t, K); b++)
    gather_block(t, grp + b * DI_PK_G * bb, (int)(n % DI_PK_G), (uint8_t *)dst + b * bb);
}

void di_cpu_packed_dequant_row(di_dtype t, const void *W, int64_t N, int64_t K, int64_t n, float *dst) {
  size_t rb = di_dtype_row_bytes(t, K), bb = di_dtype_block_bytes(t);
  const uint8_t *w = W;
  if (n >= N / DI_PK_G * DI_PK_G) {
    di_cpu_dequant_row(t, w + (size_t)n * rb, dst, K);
    return;
  }
  const uint8_t *grp = w + (size_t)(n / DI_PK_G) * DI_PK_G * rb;
  int be = di_dtype_block(t);
  for (int64_t b = 0; b < row_blocks(t, K); b++) {
    uint8_t blk[MAX_BLOCK];
    gather_block(t, grp + b * DI_PK_G * bb, (int)(n % DI_PK_G), blk);
    di_cpu_dequant_row(t, blk, dst + b * be, be);
  }
}

void di_cpu_pack_tail(di_dtype t, const void *W, size_t wrow, int64_t N, int64_t b0, int64_t b1, uint8_t *dst) {
  size_t bb = di_dtype_block_bytes(t);
  int64_t first = N / DI_PK_G * DI_PK_G;
  memset(dst, 0, (size_t)(b1 - b0) * DI_PK_G * bb);
  for (int64_t c = 0; first + c < N; c++)
    for (int64_t b = b0; b < b1; b++)
      scatter_block(t, (const uint8_t *)W + (size_t)(first + c) * wrow + b * bb, (int)c,
                    dst + (b - b0) * DI_PK_G * bb);
}

void di_cpu_mmp_scalar(di_dtype t, const void *W, size_t wrow, int64_t N, const void *x, size_t xrow, int64_t M,
                       int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1) {
  size_t bb = di_dtype_block_bytes(t);
  int64_t first_tail = N / DI_PK_G * DI_PK_G;
  for (int64_t m = 0; m < M; m++) {
    const uint8_t *a = (const uint8_t *)x + (size_t)m * xrow;
    for (int64_t n = n0; n < n1; n++) {
      const uint8_t *grp = (const uint8_t *)W + (size_t)(n / DI_PK_G) * DI_PK_G * wrow;
      float s = 0, sm = 0;
      for (int64_t b = 0; b < row_blocks(t, K); b++) {
        uint8_t blk[MAX_BLOCK];
        const void *p = blk;
        if (n >= first_tail) p = (const uint8_t *)W + (size_t)n * wrow + b * bb;
        else gather_block(t, grp + b * DI_PK_G * bb, (int)(n % DI_PK_G), blk);
        if (di_pk_kquant(t)) di_cpu_qk_block_step(t, p, (const di_act_q8k *)a + b, &s, &sm);
        else s = di_cpu_q32_block_step(t, p, (const di_act_q8 *)a + b, s);
      }
      Y[m * ldy + n] = di_pk_kquant(t) ? s + sm : s;
    }
  }
}
