/* Tile drivers shared by the SIMD matmul kernel files (matmul_avx2.c and the
 * NEON ones).
 *
 * A kernel family PFX provides PFX_QK (elements per block) and
 * PFX_tile(t, MT, NT, w, wrow, x, xrow, nb, K, Y, ldy) computing an MT x NT
 * tile over all K. The tile is always_inline with constant t, MT, NT, so every
 * (type, shape) becomes its own fully unrolled loop with the accumulators in
 * registers. Row invariance is the tile's duty: each output (m,n) must own one
 * accumulator chain that sees K in order with the same instructions whatever
 * MT, NT or the tile's position; the drivers only choose shapes. */
#ifndef DI_CPU_MATMUL_TILES_H
#define DI_CPU_MATMUL_TILES_H

#include <stddef.h>
#include <stdint.h>

/* The emulation tests (test_*_avx512emu.c) define AI and UNROLL first: forced
 * inlining and unrolling of SIMDe's portable code cost GCC minutes per build. */
#ifndef AI
#define AI static inline __attribute__((always_inline))
#endif
#ifndef UNROLL
#define UNROLL _Pragma("GCC unroll 8")
#endif

#define MT_MAX 4

/* Packed GEMV prefetch distance (matmul_pack_tiles.h) in whole group-blocks of
 * gbb bytes: the 32-element types' blocks (144-272 bytes) about 2 KB ahead, as
 * one block ahead is too close to cover the memory latency; the K-quants'
 * (1-2 KB) one block ahead, as two of them ahead evict lines still in use
 * (measured on the 1.1B shapes: docs/BENCHMARKS.md). */
AI size_t pk_ahead(size_t gbb) { return gbb >= 1024 ? gbb : gbb * (1 + 2048 / gbb); }
/* GEMV streams weights from memory. A tile's rows lie back to back, so its
 * walk over them (step bytes per block, rows interleaved) covers one contiguous
 * span: fetch that span as a linear sweep ahead of the walk, into L1 l1_ahead
 * bytes ahead and into L2 GEMV_PF_L2 ahead, so the memory sees one sequential
 * stream and more lines are in flight than the L1's fill buffers hold (per-row
 * prefetches of the next tile's rows leave it well short of the bandwidth).
 * p: where this block's step starts in the span. The
 * float and unpacked kernels sweep L1 GEMV_PF_L1 ahead, the packed ones
 * pk_ahead. */
#define GEMV_PF_L1 (16 * 1024)
#define GEMV_PF_L2 (64 * 1024)
AI void gemv_prefetch(const uint8_t *p, size_t step, size_t l1_ahead) {
  for (size_t o = 0; o < step; o += 64) {
    __builtin_prefetch(p + l1_ahead + o, 0, 3);
    __builtin_prefetch(p + GEMV_PF_L2 + o, 0, 2);
  }
}

/* GEMV (M == 1) takes NT_GEMV columns at a time for independent chains. GEMM
 * walks the columns in panels of about PANEL_BYTES of weights, which stay in L2
 * while every MT_MAX x NT_GEMM tile of rows passes over them, so weights are read
 * from memory once per panel rather than once per row tile. */
#define PANEL_BYTES (192 * 1024)

/* A family's column walk over [n0, n1): whole NT-column tiles, then one
 * column at a time. */
#define DEFINE_COLS(PFX)                                                                         \
  AI void PFX##_cols(di_dtype t, int MT, int NT, const uint8_t *w, size_t wrow, const uint8_t *x, \
                     size_t xrow, int64_t nb, int64_t K, float *Y, int64_t ldy, int64_t n0,      \
                     int64_t n1) {                                                               \
    int64_t n = n0;                                                                              \
    for (; n + NT <= n1; n += NT) PFX##_tile(t, MT, NT, w + n * wrow, wrow, x, xrow, nb, K, Y + n, ldy); \
    for (; n < n1; n++) PFX##_tile(t, MT, 1, w + n * wrow, wrow, x, xrow, nb, K, Y + n, ldy);     \
  }

/* Code shape (as matmul_pack_tiles.h): the tile is inlined only into one
 * ordinary function per (weight type, row tile), and tiles_mm picks that
 * function from the type's table for each row tile. Every (type, MT) body is
 * compiled on its own, so a kernel file is many small functions rather than
 * one unrolled giant per type (which took GCC minutes under the sanitizers). */
typedef void (*tile_cols_fn)(const uint8_t *w, size_t wrow, const uint8_t *x, size_t xrow, int64_t nb,
                             int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1);
/* Tall tiles: a family with registers for them may take TALL_LO..TALL_HI rows
 * (twice its 6-row GEMM tile) in one tile over fewer columns, so a small batch
 * (speculative verification: k + 1 rows) streams the weights from memory once
 * rather than once per row tile plus L2 passes for the others. */
#define TALL_LO 7
#define TALL_HI 12
typedef struct {
  tile_cols_fn gemv;           /* one activation row, the family's GEMV column tile */
  tile_cols_fn rows[9];        /* rows[r]: r activation rows (1 <= r <= mtm), the GEMM column tile */
  int64_t qk;                  /* elements per weight block */
  int mtm, nt_gemm;
  const tile_cols_fn *tall;    /* NULL, or tall[r]: r rows (TALL_LO <= r <= TALL_HI) in one tile */
} tile_set;

/* GEMV and tall tiles walk all columns at once; GEMM walks PANEL_BYTES column
 * panels and every row tile of M over each. */
static inline void tiles_mm(const tile_set *s, const void *W, size_t wrow, const void *X, size_t xrow,
                            int64_t M, int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1) {
  const uint8_t *w = W, *x = X;
  const int64_t nb = K / s->qk;
  if (M == 1) {
    s->gemv(w, wrow, x, xrow, nb, K, Y, ldy, n0, n1);
    return;
  }
  if (s->tall && M >= TALL_LO && M <= TALL_HI) {
    s->tall[M - TALL_LO](w, wrow, x, xrow, nb, K, Y, ldy, n0, n1);
    return;
  }
  int64_t panel = (int64_t)(PANEL_BYTES / (wrow ? wrow : 1)) / s->nt_gemm * s->nt_gemm;
  if (panel < s->nt_gemm) panel = s->nt_gemm;
  for (int64_t p0 = n0; p0 < n1; p0 += panel) {
    const int64_t p1 = n1 - p0 < panel ? n1 : p0 + panel;
    for (int64_t m = 0; m < M; m += s->mtm) {
      const int64_t mt = M - m < s->mtm ? M - m : s->mtm;
      s->rows[mt](w, wrow, x + m * xrow, xrow, nb, K, Y + m * ldy, ldy, p0, p1);
    }
  }
}

/* Row tiles of up to MT_MAX rows; DEFINE_DRIVER_MT takes up to MTM (<= 8)
 * rows where a family has the registers for it. */
#define DEFINE_DRIVER(PFX, NT_GEMV, NT_GEMM) DEFINE_DRIVER_MT(PFX, NT_GEMV, NT_GEMM, MT_MAX)
#define DEFINE_DRIVER_MT(PFX, NT_GEMV, NT_GEMM, MTM)                                             \
  DEFINE_COLS(PFX)                                                                               \
  enum { PFX##_NT_GEMV = (NT_GEMV), PFX##_NT_GEMM = (NT_GEMM), PFX##_MTM = (MTM) };

/* The function for R rows of type T (R past the family's MTM is never called:
 * its body folds away). */
#define TILE_FN(NAME, PFX, T, R, ROWS, NT)                                                        \
  static __attribute__((noinline)) void NAME##_##R(const uint8_t *w, size_t wrow, const uint8_t *x, \
                                                   size_t xrow, int64_t nb, int64_t K, float *Y,  \
                                                   int64_t ldy, int64_t n0, int64_t n1) {         \
    if ((ROWS) > PFX##_MTM) return;                                                              \
    PFX##_cols(T, (ROWS) > PFX##_MTM ? 1 : (ROWS), NT, w, wrow, x, xrow, nb, K, Y, ldy, n0, n1);  \
  }
/* The function for R tall rows: the family's PFX##_tall(t, R, w, wrow, x, xrow,
 * nb, K, Y, ldy, n0, n1) over the columns [n0, n1). */
#define TALL_FN(NAME, PFX, T, R)                                                                  \
  static __attribute__((noinline)) void NAME##_t##R(const uint8_t *w, size_t wrow, const uint8_t *x, \
                                                    size_t xrow, int64_t nb, int64_t K, float *Y, \
                                                    int64_t ldy, int64_t n0, int64_t n1) {        \
    PFX##_tall(T, R, w, wrow, x, xrow, nb, K, Y, ldy, n0, n1);                                    \
  }
/* Family PFX's tall tiles for type T (TALL_LO..TALL_HI rows) with its table, as NAME##_set. */
#define DEFINE_TALL_SET(NAME, PFX, T)                                                            \
  TALL_FN(NAME, PFX, T, 7) TALL_FN(NAME, PFX, T, 8) TALL_FN(NAME, PFX, T, 9)                     \
  TALL_FN(NAME, PFX, T, 10) TALL_FN(NAME, PFX, T, 11) TALL_FN(NAME, PFX, T, 12)                  \
  static const tile_cols_fn NAME##_tall[TALL_HI - TALL_LO + 1] = {                               \
      NAME##_t7, NAME##_t8, NAME##_t9, NAME##_t10, NAME##_t11, NAME##_t12};                      \
  DEFINE_TILE_SET_TALL(NAME, PFX, T, NAME##_tall)
/* Family PFX's table for type T, as NAME##_set. */
#define DEFINE_TILE_SET(NAME, PFX, T) DEFINE_TILE_SET_TALL(NAME, PFX, T, NULL)
#define DEFINE_TILE_SET_TALL(NAME, PFX, T, TALL)                                                 \
  TILE_FN(NAME, PFX, T, g, 1, PFX##_NT_GEMV)                                                     \
  TILE_FN(NAME, PFX, T, 1, 1, PFX##_NT_GEMM)                                                     \
  TILE_FN(NAME, PFX, T, 2, 2, PFX##_NT_GEMM)                                                     \
  TILE_FN(NAME, PFX, T, 3, 3, PFX##_NT_GEMM)                                                     \
  TILE_FN(NAME, PFX, T, 4, 4, PFX##_NT_GEMM)                                                     \
  TILE_FN(NAME, PFX, T, 5, 5, PFX##_NT_GEMM)                                                     \
  TILE_FN(NAME, PFX, T, 6, 6, PFX##_NT_GEMM)                                                     \
  TILE_FN(NAME, PFX, T, 7, 7, PFX##_NT_GEMM)                                                     \
  TILE_FN(NAME, PFX, T, 8, 8, PFX##_NT_GEMM)                                                     \
  static const tile_set NAME##_set = {NAME##_g,                                                  \
                                      {NULL, NAME##_1, NAME##_2, NAME##_3, NAME##_4, NAME##_5,   \
                                       NAME##_6, NAME##_7, NAME##_8},                            \
                                      PFX##_QK,                                                  \
                                      PFX##_MTM,                                                 \
                                      PFX##_NT_GEMM,                                             \
                                      TALL};

/* An exported-signature (di_cpu_mm_fn) kernel: family PFX bound to type T. */
#define DEFINE_WRAP(NAME, PFX, T)                                                                \
  DEFINE_TILE_SET(NAME##_t, PFX, T)                                                              \
  static void NAME(const void *W, size_t wrow, const void *x, size_t xrow, int64_t M, int64_t K,  \
                   float *Y, int64_t ldy, int64_t n0, int64_t n1) {                              \
    tiles_mm(&NAME##_t_set, W, wrow, x, xrow, M, K, Y, ldy, n0, n1);                             \
  }

#endif
