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

#define DEFINE_COLS(PFX)                                                                         \
  AI void PFX##_cols(di_dtype t, int MT, int NT, const uint8_t *w, size_t wrow, const uint8_t *x, \
                     size_t xrow, int64_t nb, int64_t K, float *Y, int64_t ldy, int64_t n0,      \
                     int64_t n1) {                                                               \
    int64_t n = n0;                                                                              \
    for (; n + NT <= n1; n += NT) PFX##_tile(t, MT, NT, w + n * wrow, wrow, x, xrow, nb, K, Y + n, ldy); \
    for (; n < n1; n++) PFX##_tile(t, MT, 1, w + n * wrow, wrow, x, xrow, nb, K, Y + n, ldy);     \
  }

/* Row tiles of up to MT_MAX rows; DEFINE_DRIVER_MT takes up to MTM (<= 8)
 * rows where a family has the registers for it. */
#define DEFINE_DRIVER(PFX, NT_GEMV, NT_GEMM) DEFINE_DRIVER_MT(PFX, NT_GEMV, NT_GEMM, MT_MAX)
/* (a case past MTM never runs; it names a 1-row tile so no MT > MTM is built) */
#define DRIVER_CASE(PFX, MTM, R, NT_GEMM)                                                       \
  case R: PFX##_cols(t, MTM >= R ? R : 1, NT_GEMM, w, wrow, xm, xrow, nb, K, ym, ldy, p0, p1); break;
#define DEFINE_DRIVER_MT(PFX, NT_GEMV, NT_GEMM, MTM)                                             \
  DEFINE_COLS(PFX)                                                                               \
  AI void PFX##_mm(di_dtype t, const void *W, size_t wrow, const void *X, size_t xrow,           \
                   int64_t M, int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1) {         \
    const uint8_t *w = W, *x = X;                                                                \
    int64_t nb = K / PFX##_QK;                                                                   \
    if (M == 1) {                                                                                \
      PFX##_cols(t, 1, NT_GEMV, w, wrow, x, xrow, nb, K, Y, ldy, n0, n1);                        \
      return;                                                                                    \
    }                                                                                            \
    int64_t panel = (int64_t)(PANEL_BYTES / (wrow ? wrow : 1)) / NT_GEMM * NT_GEMM;              \
    if (panel < NT_GEMM) panel = NT_GEMM;                                                        \
    for (int64_t p0 = n0; p0 < n1; p0 += panel) {                                                \
      int64_t p1 = n1 - p0 < panel ? n1 : p0 + panel;                                            \
      for (int64_t m = 0; m < M; m += MTM) {                                                     \
        int64_t mt = M - m < MTM ? M - m : MTM;                                                  \
        const uint8_t *xm = x + m * xrow;                                                        \
        float *ym = Y + m * ldy;                                                                 \
        switch (mt) {                                                                            \
          DRIVER_CASE(PFX, MTM, 8, NT_GEMM)                                                      \
          DRIVER_CASE(PFX, MTM, 7, NT_GEMM)                                                      \
          DRIVER_CASE(PFX, MTM, 6, NT_GEMM)                                                      \
          DRIVER_CASE(PFX, MTM, 5, NT_GEMM)                                                      \
          DRIVER_CASE(PFX, MTM, 4, NT_GEMM)                                                      \
          DRIVER_CASE(PFX, MTM, 3, NT_GEMM)                                                      \
          DRIVER_CASE(PFX, MTM, 2, NT_GEMM)                                                      \
        default: PFX##_cols(t, 1, NT_GEMM, w, wrow, xm, xrow, nb, K, ym, ldy, p0, p1); break;    \
        }                                                                                        \
      }                                                                                          \
    }                                                                                            \
  }

/* An exported-signature (di_cpu_mm_fn) wrapper binding a family to one type. */
#define DEFINE_WRAP(NAME, PFX, T)                                                                \
  static void NAME(const void *W, size_t wrow, const void *x, size_t xrow, int64_t M, int64_t K,  \
                   float *Y, int64_t ldy, int64_t n0, int64_t n1) {                              \
    PFX##_mm(T, W, wrow, x, xrow, M, K, Y, ldy, n0, n1);                                         \
  }

#endif
