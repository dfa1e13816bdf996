/* The driver shared by the packed-layout kernel files (matmul_pack_avx2.c, matmul_pack_avx512.c and
 * the NEON builds of matmul_pack_neon.h): group loop, on-the-fly packing of
 * the tail rows, MT-row tiles, L2 panels, the di_cpu_mmp_fn wrappers and the
 * per-type selector. Only the per-block arithmetic differs between ISAs.
 *
 * The including file defines, before including this header:
 *   pk_acc                 the float chains of one activation row: .s (the
 *                          output's chain, 8 column lanes) and .m (the K-quant
 *                          mins' chain; it stays +0 for Q6_K)
 *   pk_acc_zero(pk_acc *)
 *   q32_block(t, MT, gp, const di_act_q8 *const *a, pk_acc *acc)   Q4_0/Q4_1/Q5_0/Q8_0
 *   q4k_block(MT, gp, const di_act_q8k *const *a, pk_acc *acc)
 *   q6k_block(MT, gp, const di_act_q8k *const *a, pk_acc *acc)
 *                          one group-block gp of 8 columns into MT rows' chains
 *   and, defining PK_Q5K, q5k_block (the same for Q5_K; x86 only)
 *   pk_store(t, const pk_acc *acc, float *y)   y[0..8) = s (+ m for K-quants)
 *   PK_ENTRY               the name of the exported selector (di_cpu_mmp_fn (di_dtype))
 * and optionally PK_GROUP2 with pk_group2_ok(t) and pk_group2(t, MT, pf, W, wrow, g,
 * x, xrow, nb, Y, ldy, n0, n1): two full groups g, g+1 at once (AVX-512; pf: prefetch
 * as pk_group does).
 * The block functions own row invariance: each output's chain sees the blocks
 * in K order with the same instructions whatever MT, the tile or the column
 * range, so Y[m][n] has the same bits as the scalar reference. */
#ifndef DI_CPU_MATMUL_PACK_TILES_H
#define DI_CPU_MATMUL_PACK_TILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/matmul_tiles.h" /* AI, UNROLL, MT_MAX, PANEL_BYTES */

/* Rows per tile: pk_mt(t) <= PK_MT_CAP; an including file with more registers
 * (AVX-512) raises both for the types where it pays. */
#ifndef PK_MT_CAP
#define PK_MT_CAP MT_MAX
AI int pk_mt(di_dtype t) {
  (void)t;
  return MT_MAX;
}
#endif

/* Tail rows are packed on the fly this many bytes of group-blocks at a time. */
#define TAIL_BYTES (16 * DI_PK_G * sizeof(di_block_q4_K))

/* Outputs [8g, 8g+8) x MT rows over all nb blocks, stored where they fall inside
 * [n0, n1). TAIL: g is the zero-padded group of the N % 8 last rows, packed on
 * the fly a few blocks at a time (same arithmetic, lanes past N dropped). */
AI void pk_group(di_dtype t, int MT, bool TAIL, bool pf, const uint8_t *W, size_t wrow, int64_t N, int64_t g,
                 const uint8_t *x, size_t xrow, int64_t nb, float *Y, int64_t ldy, int64_t n0, int64_t n1) {
  const size_t gbb = DI_PK_G * di_pk_block_bytes(t);
  const int64_t tail_blocks = (int64_t)(TAIL_BYTES / gbb);
  _Alignas(32) uint8_t tmp[TAIL_BYTES];
  const uint8_t *gw = W + (size_t)g * DI_PK_G * wrow;
  pk_acc acc[PK_MT_CAP];
  UNROLL for (int i = 0; i < MT; i++) pk_acc_zero(&acc[i]);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *gp = gw + (size_t)b * gbb;
    if (TAIL) {
      if (b % tail_blocks == 0) di_cpu_pack_tail(t, W, wrow, N, b, nb - b < tail_blocks ? nb : b + tail_blocks, tmp);
      gp = tmp + (size_t)(b % tail_blocks) * gbb;
    }
    /* Fetch a group-block ahead (pk_ahead; past the last, the next group's)
     * while this one computes. The hardware prefetcher alone lost 5-15% of tg
     * on the 1.1B Q4_K_M model on x86 (it restarts at every matrix and Q6_K
     * reads inside a block with jumps); gemv_prefetch adds the L2 sweep. pf:
     * GEMV, and a batch's first row tile of a panel, which streams the panel
     * from memory (1.1B shapes, streamed, one core, Q4_K M = 2 / 4 / 8: 76 /
     * 126 / 171 -> 116 / 174 / 225 GOP/s); later row tiles find it in L2. */
    if (pf && !TAIL) gemv_prefetch(gp, gbb, pk_ahead(gbb));
    if (di_pk_kquant(t)) {
      const di_act_q8k *a[PK_MT_CAP];
      UNROLL for (int i = 0; i < MT; i++) a[i] = (const di_act_q8k *)(x + i * xrow) + b;
      if (t == DI_Q4_K) q4k_block(MT, gp, a, acc);
#ifdef PK_Q5K
      else if (t == DI_Q5_K) q5k_block(MT, gp, a, acc);
#endif
      else q6k_block(MT, gp, a, acc);
    } else {
      const di_act_q8 *a[PK_MT_CAP];
      UNROLL for (int i = 0; i < MT; i++) a[i] = (const di_act_q8 *)(x + i * xrow) + b;
      q32_block(t, MT, gp, a, acc);
    }
  }
  int64_t c0 = g * DI_PK_G, lo = n0 > c0 ? n0 : c0, hi = n1 < c0 + DI_PK_G ? n1 : c0 + DI_PK_G;
  UNROLL for (int i = 0; i < MT; i++) {
    if (lo == c0 && hi == c0 + DI_PK_G) {
      pk_store(t, &acc[i], Y + i * ldy + c0);
    } else {
      float out[DI_PK_G];
      pk_store(t, &acc[i], out);
      for (int64_t n = lo; n < hi; n++) Y[i * ldy + n] = out[n - c0];
    }
  }
}

/* Groups [g0, g1) for MT rows; the last group of a matrix with N % 8 rows is the tail. */
AI void pk_groups(di_dtype t, int MT, bool pf, const uint8_t *W, size_t wrow, int64_t N, int64_t g0, int64_t g1,
                  const uint8_t *x, size_t xrow, int64_t nb, float *Y, int64_t ldy, int64_t n0, int64_t n1) {
  int64_t full = N / DI_PK_G, g = g0;
#ifdef PK_GROUP2
  if (pk_group2_ok(t))
    for (; g + 1 < g1 && g + 1 < full; g += 2) pk_group2(t, MT, pf, W, wrow, g, x, xrow, nb, Y, ldy, n0, n1);
#endif
  for (; g < g1 && g < full; g++) pk_group(t, MT, false, pf, W, wrow, N, g, x, xrow, nb, Y, ldy, n0, n1);
  if (g < g1) pk_group(t, MT, true, pf, W, wrow, N, g, x, xrow, nb, Y, ldy, n0, n1);
}

/* GEMV walks the groups once; GEMM walks them in panels of about PANEL_BYTES,
 * which stay in L2 while every pk_mt(t)-row tile of activations passes over them. */
AI void pk_mm(di_dtype t, const void *W, size_t wrow, int64_t N, const void *X, size_t xrow, int64_t M,
              int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1) {
  const uint8_t *w = W, *x = X;
  int64_t nb = K / (di_pk_kquant(t) ? DI_QKK : DI_QK32), g0 = n0 / DI_PK_G, g1 = (n1 + DI_PK_G - 1) / DI_PK_G;
  if (M == 1) {
    pk_groups(t, 1, true, w, wrow, N, g0, g1, x, xrow, nb, Y, ldy, n0, n1);
    return;
  }
  const int mt_max = pk_mt(t);
  int64_t panel = (int64_t)(PANEL_BYTES / (DI_PK_G * wrow));
  if (panel < 1) panel = 1;
  for (int64_t p0 = g0; p0 < g1; p0 += panel) {
    int64_t p1 = g1 - p0 < panel ? g1 : p0 + panel;
    for (int64_t m = 0; m < M; m += mt_max) {
      const uint8_t *xm = x + m * xrow;
      float *ym = Y + m * ldy;
      const bool pf = m == 0; /* the first row tile streams the panel from memory */
      switch (M - m < mt_max ? M - m : mt_max) {
#if PK_MT_CAP > 4
      case 8: pk_groups(t, 8, pf, w, wrow, N, p0, p1, xm, xrow, nb, ym, ldy, n0, n1); break;
      case 7: pk_groups(t, 7, pf, w, wrow, N, p0, p1, xm, xrow, nb, ym, ldy, n0, n1); break;
      case 6: pk_groups(t, 6, pf, w, wrow, N, p0, p1, xm, xrow, nb, ym, ldy, n0, n1); break;
      case 5: pk_groups(t, 5, pf, w, wrow, N, p0, p1, xm, xrow, nb, ym, ldy, n0, n1); break;
#endif
      case 4: pk_groups(t, 4, pf, w, wrow, N, p0, p1, xm, xrow, nb, ym, ldy, n0, n1); break;
      case 3: pk_groups(t, 3, pf, w, wrow, N, p0, p1, xm, xrow, nb, ym, ldy, n0, n1); break;
      case 2: pk_groups(t, 2, pf, w, wrow, N, p0, p1, xm, xrow, nb, ym, ldy, n0, n1); break;
      default: pk_groups(t, 1, pf, w, wrow, N, p0, p1, xm, xrow, nb, ym, ldy, n0, n1); break;
      }
    }
  }
}

/* An including file may route whole matmuls elsewhere first (AVX-512: AMX). */
#ifndef PK_MM
#define PK_MM pk_mm
#endif
#define PK_WRAP(NAME, T)                                                                                       \
  static void NAME(const void *W, size_t wrow, int64_t N, const void *x, size_t xrow, int64_t M, int64_t K,    \
                   float *Y, int64_t ldy, int64_t n0, int64_t n1) {                                            \
    PK_MM(T, W, wrow, N, x, xrow, M, K, Y, ldy, n0, n1);                                                       \
  }
PK_WRAP(mmp_q4_0, DI_Q4_0)
PK_WRAP(mmp_q4_1, DI_Q4_1)
PK_WRAP(mmp_q5_0, DI_Q5_0)
PK_WRAP(mmp_q5_1, DI_Q5_1)
PK_WRAP(mmp_q8_0, DI_Q8_0)
PK_WRAP(mmp_q4_K, DI_Q4_K)
PK_WRAP(mmp_q6_K, DI_Q6_K)
#ifdef PK_Q5K
PK_WRAP(mmp_q5_K, DI_Q5_K)
#endif
#undef PK_WRAP

di_cpu_mmp_fn PK_ENTRY(di_dtype t) {
  switch (t) {
  case DI_Q4_0: return mmp_q4_0;
  case DI_Q4_1: return mmp_q4_1;
  case DI_Q5_0: return mmp_q5_0;
  case DI_Q5_1: return mmp_q5_1;
  case DI_Q8_0: return mmp_q8_0;
  case DI_Q4_K: return mmp_q4_K;
  case DI_Q6_K: return mmp_q6_K;
#ifdef PK_Q5K
  case DI_Q5_K: return mmp_q5_K;
#endif
  default: return NULL;
  }
}

#endif
