/* The driver shared by the packed-layout kernel files (matmul_pack_avx2.c,
 * matmul_pack_vnni.h and the NEON builds of matmul_pack_neon.h): the group
 * loop, the tail rows, row tiles, L2 panels and the per-type selector. Only the
 * per-block arithmetic differs between ISAs.
 *
 * Code shape (llamafile sgemm / ggml style): the per-block step of the
 * including file is the only thing inlined. It is instantiated in one ordinary
 * function per (weight type, row tile), pk_<type>_<MT>, which walks a range of
 * groups for MT activation rows; pk_mm picks the function for each row tile
 * from the type's table (pk_kernel) at run time. So every (type, MT) body is
 * compiled once, on its own, and a file builds in seconds rather than as a few
 * functions of hundreds of unrolled bodies.
 *
 * The including file defines, before including this header:
 *   pk_acc                 the float chains of one activation row: .s (the
 *                          output's chain, 8 column lanes) and .m (the K-quant
 *                          mins' chain; it stays +0 for Q6_K)
 *   pk_acc_zero(pk_acc *)
 *   q32_block(t, MT, gp, const di_act_q8 *const *a, pk_acc *acc)   Q4_0/Q4_1/Q5_0/Q5_1/Q8_0
 *                          (and MXFP4, defining PK_MXFP4; x86 only)
 *   q4k_block(MT, gp, const di_act_q8k *const *a, pk_acc *acc)
 *   q6k_block(MT, gp, const di_act_q8k *const *a, pk_acc *acc)
 *                          one group-block gp of 8 columns into MT rows' chains
 *   and, defining PK_Q5K, q5k_block (the same for Q5_K; x86 only)
 *   pk_store(t, const pk_acc *acc, float *y)   y[0..8) = s (+ m for K-quants)
 *   PK_ENTRY               the name of the exported selector (di_cpu_mmp_fn (di_dtype))
 * and optionally:
 *   PK_MT_CAP, PK_MT_Q32, PK_MT_Q4K, PK_MT_Q5K, PK_MT_Q6K: the largest row tile
 *                          overall and per type family (default MT_MAX)
 *   PK_GROUP2 with pk_group2_ok(t) and pk_group2(t, MT, pf, j, gw, g, x, Y): two
 *                          full groups g, g+1 (at gw) at once (AVX-512)
 *   PK_ROWS16              Q6_K's rows in whole 16-row tiles go to di_cpu_q6k_rows16
 *                          (AVX-512 VNNI), the rest to the row tiles
 *   PK_MM                  the name of a function (pk_mm's signature) that each
 *                          per-type entry calls instead of pk_mm (AVX-512: AMX)
 *   PK_PART_KQUANT or PK_PART_REST: build one of two parts of the driver in this
 *                          translation unit (a file too slow to compile as one):
 *                          the K-quants' tile functions and tables, or the other
 *                          types', pk_mm and the selector (the K-quant tables
 *                          then come from the other part)
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
#include "backend/cpu/scratch.h"

#ifndef PK_MT_CAP
#define PK_MT_CAP MT_MAX
#endif
#ifndef PK_MT_Q32
#define PK_MT_Q32 MT_MAX
#endif
#ifndef PK_MT_Q4K
#define PK_MT_Q4K MT_MAX
#endif
#ifndef PK_MT_Q5K
#define PK_MT_Q5K MT_MAX
#endif
#ifndef PK_MT_Q6K
#define PK_MT_Q6K MT_MAX
#endif

/* Outputs [8g, 8g+8) of MT rows, stored where they fall inside [n0, n1). */
AI void pk_store_group(di_dtype t, int MT, const di_pk_job *j, int64_t g, const pk_acc *acc, float *Y) {
  int64_t c0 = g * DI_PK_G, lo = j->n0 > c0 ? j->n0 : c0, hi = j->n1 < c0 + DI_PK_G ? j->n1 : c0 + DI_PK_G;
  UNROLL for (int i = 0; i < MT; i++) {
    if (lo == c0 && hi == c0 + DI_PK_G) {
      pk_store(t, &acc[i], Y + i * j->ldy + c0);
    } else {
      float out[DI_PK_G];
      pk_store(t, &acc[i], out);
      for (int64_t n = lo; n < hi; n++) Y[i * j->ldy + n] = out[n - c0];
    }
  }
}

/* Group g (at gw) x MT rows (x) over all nb blocks. */
AI void pk_group(di_dtype t, int MT, bool pf, const di_pk_job *j, const uint8_t *gw, int64_t g, const uint8_t *x,
                 float *Y) {
  const size_t gbb = DI_PK_G * di_pk_block_bytes(t); /* a constant here, as the prefetch distance */
  pk_acc acc[PK_MT_CAP];
  UNROLL for (int i = 0; i < MT; i++) pk_acc_zero(&acc[i]);
  for (int64_t b = 0; b < j->nb; b++) {
    const uint8_t *gp = gw + (size_t)b * gbb;
    /* Fetch a group-block ahead (pk_ahead; past the last, the next group's)
     * while this one computes: the hardware prefetcher restarts at every
     * matrix and Q6_K reads inside a block with jumps, so alone it leaves GEMV
     * short of the memory bandwidth; gemv_prefetch adds the L2 sweep. pf:
     * GEMV, and a batch's first row tile of a panel, which streams the panel
     * from memory; later row tiles find it in L2. */
    if (pf) gemv_prefetch(gp, gbb, pk_ahead(gbb));
    if (di_pk_kquant(t)) {
      const di_act_q8k *a[PK_MT_CAP];
      UNROLL for (int i = 0; i < MT; i++) a[i] = (const di_act_q8k *)(x + i * j->xrow) + b;
      if (t == DI_Q4_K) q4k_block(MT, gp, a, acc);
#ifdef PK_Q5K
      else if (t == DI_Q5_K) q5k_block(MT, gp, a, acc);
#endif
      else q6k_block(MT, gp, a, acc);
    } else {
      const di_act_q8 *a[PK_MT_CAP];
      UNROLL for (int i = 0; i < MT; i++) a[i] = (const di_act_q8 *)(x + i * j->xrow) + b;
      q32_block(t, MT, gp, a, acc);
    }
  }
  pk_store_group(t, MT, j, g, acc, Y);
}

/* Groups [g0, g1) (g0's at w) for MT rows. With PK_GROUP2, pairs of groups
 * go through pk_group2 and a group left over (a range of odd length) through
 * the one-row function `one`, row by row: it comes at most once per range and
 * row tile, and so no MT-row copy of the single-group body is built for those
 * types (each output's chain is the same whatever the tile, so are its bits). */
typedef void (*pk_tile_fn)(const di_pk_job *j, const uint8_t *w, int64_t g0, int64_t g1, const uint8_t *x, float *Y,
                           bool pf);
AI void pk_groups(di_dtype t, int MT, const di_pk_job *j, const uint8_t *w, int64_t g0, int64_t g1, const uint8_t *x,
                  float *Y, bool pf, pk_tile_fn one) {
  int64_t g = g0;
#ifdef PK_GROUP2
  if (pk_group2_ok(t)) {
    for (; g + 1 < g1; g += 2, w += 2 * j->gstride) pk_group2(t, MT, pf, j, w, g, x, Y);
    if (g < g1) {
      if (MT == 1) pk_group(t, 1, pf, j, w, g, x, Y);
      else
        for (int i = 0; i < MT; i++) one(j, w, g, g + 1, x + i * j->xrow, Y + i * j->ldy, pf);
    }
    return;
  }
#else
  (void)one;
#endif
  for (; g < g1; g++, w += j->gstride) pk_group(t, MT, pf, j, w, g, x, Y);
}

/* One type's tile functions: fn[MT] for MT = 1..mt. */
typedef struct {
  di_dtype t;
  int mt;
  pk_tile_fn fn[PK_MT_CAP + 1];
} pk_kernel;

#define PK_TILE(NAME, T, MT)                                                                                   \
  __attribute__((noinline)) static void pk_##NAME##_##MT(const di_pk_job *j, const uint8_t *w, int64_t g0,     \
                                                           int64_t g1, const uint8_t *x, float *Y, bool pf);  \
  __attribute__((noinline)) static void pk_##NAME##_##MT(const di_pk_job *j, const uint8_t *w, int64_t g0,     \
                                                           int64_t g1, const uint8_t *x, float *Y, bool pf) { \
    pk_groups(T, MT, j, w, g0, g1, x, Y, pf, pk_##NAME##_1);                                                   \
  }
#define PK_TILES_4(NAME, T) PK_TILE(NAME, T, 1) PK_TILE(NAME, T, 2) PK_TILE(NAME, T, 3) PK_TILE(NAME, T, 4)
#define PK_TILES_8(NAME, T)                                                                                    \
  PK_TILES_4(NAME, T) PK_TILE(NAME, T, 5) PK_TILE(NAME, T, 6) PK_TILE(NAME, T, 7) PK_TILE(NAME, T, 8)
#define PK_FNS_4(NAME) pk_##NAME##_1, pk_##NAME##_2, pk_##NAME##_3, pk_##NAME##_4
#define PK_FNS_8(NAME) PK_FNS_4(NAME), pk_##NAME##_5, pk_##NAME##_6, pk_##NAME##_7, pk_##NAME##_8
#define PK_KERNEL_(NAME, T, CAP, LINK, TAB)                                                                    \
  PK_TILES_##CAP(NAME, T) LINK const pk_kernel TAB = {T, CAP, {NULL, PK_FNS_##CAP(NAME)}};
#define PK_KERNEL(NAME, T, CAP) PK_KERNEL_(NAME, T, CAP, static, pk_##NAME)

/* The K-quant tables: file-local, or shared between the two parts under
 * PK_ENTRY's name (di_cpu_mmp_avx512_q4_K, ...). */
#if defined(PK_PART_KQUANT) || defined(PK_PART_REST)
#define PK_CAT_(a, b) a##b
#define PK_CAT(a, b) PK_CAT_(a, b)
#define PK_KTAB(NAME) PK_CAT(PK_ENTRY, _##NAME)
extern const pk_kernel PK_KTAB(q4_K), PK_KTAB(q6_K);
#ifdef PK_Q5K
extern const pk_kernel PK_KTAB(q5_K);
#endif
#define PK_KKERNEL(NAME, T, CAP) PK_KERNEL_(NAME, T, CAP, , PK_KTAB(NAME))
#else
#define PK_KTAB(NAME) pk_##NAME
#define PK_KKERNEL(NAME, T, CAP) PK_KERNEL(NAME, T, CAP)
#endif

#ifndef PK_PART_KQUANT
PK_KERNEL(q4_0, DI_Q4_0, PK_MT_Q32)
PK_KERNEL(q4_1, DI_Q4_1, PK_MT_Q32)
PK_KERNEL(q5_0, DI_Q5_0, PK_MT_Q32)
PK_KERNEL(q5_1, DI_Q5_1, PK_MT_Q32)
PK_KERNEL(q8_0, DI_Q8_0, PK_MT_Q32)
#ifdef PK_MXFP4
PK_KERNEL(mxfp4, DI_MXFP4, PK_MT_Q32)
#endif
#endif
#ifndef PK_PART_REST
PK_KKERNEL(q4_K, DI_Q4_K, PK_MT_Q4K)
PK_KKERNEL(q6_K, DI_Q6_K, PK_MT_Q6K)
#ifdef PK_Q5K
PK_KKERNEL(q5_K, DI_Q5_K, PK_MT_Q5K)
#endif
#endif

#ifndef PK_PART_KQUANT
static const pk_kernel *pk_kernel_of(di_dtype t) {
  switch (t) {
  case DI_Q4_0: return &pk_q4_0;
  case DI_Q4_1: return &pk_q4_1;
  case DI_Q5_0: return &pk_q5_0;
  case DI_Q5_1: return &pk_q5_1;
  case DI_Q8_0: return &pk_q8_0;
#ifdef PK_MXFP4
  case DI_MXFP4: return &pk_mxfp4;
#endif
  case DI_Q4_K: return &PK_KTAB(q4_K);
  case DI_Q6_K: return &PK_KTAB(q6_K);
#ifdef PK_Q5K
  case DI_Q5_K: return &PK_KTAB(q5_K);
#endif
  default: return NULL;
  }
}

/* Columns [n0, n1) of a matrix of N packed rows. GEMV walks the groups once;
 * GEMM walks them in panels of about PANEL_BYTES, which stay in L2 while every
 * row tile of activations passes over them. The group of the N % 8 last rows
 * (the tail) is packed once per call, zero-padded (same arithmetic, lanes past
 * N dropped), and walked as the panel's last group. */
static void pk_mm(di_dtype t, const void *W, size_t wrow, int64_t N, const void *X, size_t xrow, int64_t M,
                  int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1) {
  const pk_kernel *k = pk_kernel_of(t);
  const uint8_t *w = W, *x = X;
  const int64_t nb = K / (di_pk_kquant(t) ? DI_QKK : DI_QK32), full = N / DI_PK_G;
  const int64_t g0 = n0 / DI_PK_G, g1 = (n1 + DI_PK_G - 1) / DI_PK_G;
  const size_t gbb = DI_PK_G * di_pk_block_bytes(t);
  const uint8_t *tail = NULL;
  if (g1 > full) {
    uint8_t *buf = di_cpu_scratch(DI_SCRATCH_TAIL, (size_t)nb * gbb);
    if (!buf) { /* out of memory: the scalar kernel gives the same bits */
      int64_t c = full * DI_PK_G > n0 ? full * DI_PK_G : n0;
      di_cpu_mmp_scalar(t, W, wrow, N, X, xrow, M, K, Y, ldy, c, n1);
      n1 = c;
    } else {
      di_cpu_pack_tail(t, W, wrow, N, 0, nb, buf);
      tail = buf;
    }
  }
  const di_pk_job j = {DI_PK_G * wrow, gbb, xrow, nb, ldy, n0, n1};
  const int64_t gf = g1 < full ? g1 : full; /* full groups [g0, gf) */
  if (M == 1) {
    if (g0 < gf) k->fn[1](&j, w + (size_t)g0 * j.gstride, g0, gf, x, Y, true);
    if (tail) k->fn[1](&j, tail, full, full + 1, x, Y, false);
    return;
  }
  int64_t m0 = 0; /* rows [0, m0) done */
#ifdef PK_ROWS16
  if (t == DI_Q6_K) m0 = di_cpu_q6k_rows16(&j, w, g0, gf, tail, full, x, M, Y);
#endif
  int64_t panel = (int64_t)(PANEL_BYTES / j.gstride);
#ifdef PK_GROUP2
  if (pk_group2_ok(t)) panel -= panel % 2; /* whole pairs per panel */
#endif
  if (panel < 1) panel = 1;
  for (int64_t p0 = g0; p0 < g1; p0 += panel) {
    const int64_t p1 = g1 - p0 < panel ? g1 : p0 + panel, pf1 = p1 < gf ? p1 : gf;
    for (int64_t m = m0; m < M; m += k->mt) {
      const pk_tile_fn fn = k->fn[M - m < k->mt ? M - m : k->mt];
      const uint8_t *xm = x + m * xrow;
      float *ym = Y + m * ldy;
      /* the first row tile streams the panel from memory */
      if (p0 < pf1) fn(&j, w + (size_t)p0 * j.gstride, p0, pf1, xm, ym, m == m0);
      if (tail && p1 > full) fn(&j, tail, full, full + 1, xm, ym, false);
    }
  }
}

#ifndef PK_MM
#define PK_MM pk_mm
#endif
#define PK_WRAP(NAME, T)                                                                                       \
  static void mmp_##NAME(const void *W, size_t wrow, int64_t N, const void *x, size_t xrow, int64_t M,         \
                         int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1) {                           \
    PK_MM(T, W, wrow, N, x, xrow, M, K, Y, ldy, n0, n1);                                                       \
  }
PK_WRAP(q4_0, DI_Q4_0)
PK_WRAP(q4_1, DI_Q4_1)
PK_WRAP(q5_0, DI_Q5_0)
PK_WRAP(q5_1, DI_Q5_1)
PK_WRAP(q8_0, DI_Q8_0)
#ifdef PK_MXFP4
PK_WRAP(mxfp4, DI_MXFP4)
#endif
PK_WRAP(q4_K, DI_Q4_K)
PK_WRAP(q6_K, DI_Q6_K)
#ifdef PK_Q5K
PK_WRAP(q5_K, DI_Q5_K)
#endif
#undef PK_WRAP

di_cpu_mmp_fn PK_ENTRY(di_dtype t) {
  switch (t) {
  case DI_Q4_0: return mmp_q4_0;
  case DI_Q4_1: return mmp_q4_1;
  case DI_Q5_0: return mmp_q5_0;
  case DI_Q5_1: return mmp_q5_1;
  case DI_Q8_0: return mmp_q8_0;
#ifdef PK_MXFP4
  case DI_MXFP4: return mmp_mxfp4;
#endif
  case DI_Q4_K: return mmp_q4_K;
  case DI_Q6_K: return mmp_q6_K;
#ifdef PK_Q5K
  case DI_Q5_K: return mmp_q5_K;
#endif
  default: return NULL;
  }
}

#endif /* !PK_PART_KQUANT */

#endif
