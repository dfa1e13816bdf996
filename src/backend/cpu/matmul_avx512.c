/* AVX-512 kernels for F32 / F16 / BF16 weights with f32 activations (the
 * int8 ones are in matmul_pack_vnni.h; other types keep the AVX2 kernels).
 *
 * One zmm holds the 8-lane chains of two outputs, columns j and j+1, one per
 * 256-bit half: the weights of both rows are loaded (and for F16 converted by
 * one vcvtph2ps) into the halves, the activation block is broadcast to both,
 * and every FMA does on each half what the AVX2 kernel does on its ymm. Each
 * chain then ends in fl_finish (matmul_fl_x86.h) like the AVX2 one, so Y is
 * bit-identical to AVX2 (checked by tests/unit/test_matmul_avx512.c, natively
 * and built against SIMDe by test_matmul_avx512emu.c). What AVX-512 buys is
 * twice the FMA width per instruction for prefill GEMMs, and 32 registers for
 * a 4 x 8 tile.
 *
 * Built with -mavx512f/bw/vl/vnni; only AVX-512F is used here. */
#ifdef DI_AVX512_EMULATE
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#define FL512_ENTRY di_cpu_mm_avx512_emu
#else
#include <immintrin.h>
#define FL512_ENTRY di_cpu_mm_avx512
#endif

#include "backend/cpu/matmul_fl_x86.h"
#include "backend/cpu/scratch.h"
#include "backend/cpu/x86_512.h"

di_cpu_mm_fn FL512_ENTRY(di_dtype t);

#define NP_MAX 4 /* column pairs per tile */
/* rows per tile: 6 x 4 pairs = 24 accumulators, so each weight conversion
 * (2 uops per 16 values) feeds 6 FMAs instead of 4 */
#define FL_MT 6
/* F32 weights: 7-12 rows (a verification of k + 1 tokens, small batches)
 * take one tall tile of up to 12 rows x 2 pairs, again at most 24
 * accumulators, so the weights stream from memory in one pass, where two
 * 6-row tiles over L2 panels cost the second tile's pass on top (SmolLM2
 * shapes, one core: 7-10 rows cost what 1 does at K = 576, 1.3-1.5x before).
 * F16/BF16 read half the bytes and are compute-bound there, where the tall
 * tile's extra activation loads per FMA made 9-10 rows 5-10% slower: they keep
 * the 6-row tiles. Each output's chain is the same in either shape. */
#define FL_NT_TALL 4 /* columns: 2 pairs */
#ifdef DI_AVX512_EMULATE
#define UNROLL_ROWS UNROLL
#else
#define UNROLL_ROWS _Pragma("GCC unroll 12") /* UNROLL's 8 would leave a 12-row tile's accumulators in memory */
#endif

AI __m256 half_of(__m512 v, int h) {
  return h ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)) : _mm512_castps512_ps256(v);
}

/* 8 weights of row p0 to the low half, 8 of row p1 to the high half. */
AI __m512 fl_load2(di_dtype t, const uint8_t *p0, const uint8_t *p1) {
#ifndef DI_AVX512_EMULATE /* SIMDe 0.7.4 has neither conversion; the emulation joins two 256-bit loads */
  if (t != DI_F32) {
    __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p0)),
                                        _mm_loadu_si128((const __m128i *)p1), 1);
    if (t == DI_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); /* bf16: the high half of f32 */
  }
#endif
  return join_ps(fl_load(t, p0), fl_load(t, p1));
}

/* MT rows x NT columns over the blocks [b0, b1) of K; pair p holds columns 2p
 * and 2p+1 (an odd NT's last pair loads its column twice and keeps the low
 * half). The chains start at zero when b0 is 0, else from save (MT x NP zmm,
 * where the previous part left them), and end in Y when b1 is nb, else go back
 * to save: stored and reloaded unchanged, so any cut of K gives one pass's bits. */
AI void fl_tile_part(di_dtype t, int MT, int NT, const uint8_t *w, size_t wrow, const uint8_t *x, size_t xrow,
                     int64_t b0, int64_t b1, int64_t nb, int64_t K, float *Y, int64_t ldy, float *save) {
  const int64_t es = t == DI_F32 ? 4 : 2;
  const int NP = (NT + 1) / 2;
  const bool part = b1 - b0 < nb;
  __m512 acc[TALL_HI][NP_MAX];
  UNROLL_ROWS for (int i = 0; i < MT; i++) UNROLL for (int p = 0; p < NP; p++)
    acc[i][p] = b0 ? _mm512_load_ps(save + (i * NP + p) * 16) : _mm512_setzero_ps();
  for (int64_t b = b0; b < b1; b++) {
    __m512 wv[NP_MAX];
    UNROLL for (int p = 0; p < NP; p++) {
      const int j1 = 2 * p + 1 < NT ? 2 * p + 1 : 2 * p;
      wv[p] = fl_load2(t, w + 2 * p * wrow + b * 8 * es, w + j1 * wrow + b * 8 * es);
    }
    /* every row tile, not only GEMV: a small batch (below fl_mm_cv's rows, or
     * F32) streams each panel from memory in its first row tile, and later row
     * tiles find the panel in L2, where the sweep costs two prefetches per 128
     * bytes (1.1B shapes, F16, weights streamed, one core: M = 2 19-21 -> 25-30
     * GOP/s, M = 8 61-66 -> 68-75). A part (fl_tall) reads a slice of each
     * row: the next tile's rows at this block into L1, and four tiles on into L2. */
    if (!part) gemv_prefetch(w + b * NT * 8 * es, NT * 8 * es, GEMV_PF_L1);
    else if (!((b - b0) & 1))
      UNROLL for (int j = 0; j < NT; j++) {
        __builtin_prefetch(w + (NT + j) * wrow + b * 8 * es, 0, 3);
        __builtin_prefetch(w + (4 * NT + j) * wrow + b * 8 * es, 0, 2);
      }
    UNROLL_ROWS for (int i = 0; i < MT; i++) {
      __m256 x8 = _mm256_loadu_ps((const float *)(x + i * xrow) + b * 8);
      __m512 xv = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(x8)));
      UNROLL for (int p = 0; p < NP; p++) acc[i][p] = _mm512_fmadd_ps(wv[p], xv, acc[i][p]);
    }
  }
  if (b1 < nb) {
    UNROLL_ROWS for (int i = 0; i < MT; i++) UNROLL for (int p = 0; p < NP; p++)
      _mm512_store_ps(save + (i * NP + p) * 16, acc[i][p]);
    return;
  }
  UNROLL_ROWS for (int i = 0; i < MT; i++) UNROLL for (int j = 0; j < NT; j++)
    Y[i * ldy + j] = fl_finish(t, half_of(acc[i][j / 2], j & 1), w + j * wrow, (const float *)(x + i * xrow), nb, K);
}
AI void fl_tile(di_dtype t, int MT, int NT, const uint8_t *w, size_t wrow, const uint8_t *x, size_t xrow,
                int64_t nb, int64_t K, float *Y, int64_t ldy) {
  fl_tile_part(t, MT, NT, w, wrow, x, xrow, 0, nb, nb, K, Y, ldy, NULL);
}
DEFINE_DRIVER_MT(fl, 4, 8, FL_MT)

/* The tall tile's activations (MT rows x K) are read once per 4 columns; once
 * they outgrow L1 (F32 12 x 1536: 72 KB) each pass refetched them from L2 at
 * three times the weights' bytes. K is then cut into parts of at most
 * FL_TALL_X bytes of activations, each part swept over a panel of
 * FL_TALL_PANEL columns, whose chains wait in a per-thread scratch (L2). */
#define FL_TALL_X (24 * 1024)
#define FL_TALL_PANEL 256
AI void fl_tall(di_dtype t, int MT, const uint8_t *w, size_t wrow, const uint8_t *x, size_t xrow, int64_t nb,
                int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1) {
  const int64_t parts = ((int64_t)MT * nb * 32 + FL_TALL_X - 1) / FL_TALL_X;
  /* a panel's chains: its whole 4-column tiles and up to 3 single columns, MT x 2 zmm each */
  const size_t slots = FL_TALL_PANEL / FL_NT_TALL + FL_NT_TALL - 1;
  float *save = parts > 1 ? di_cpu_scratch(DI_SCRATCH_CHAINS, slots * MT * 2 * 64) : NULL;
  if (!save) {
    fl_cols(t, MT, FL_NT_TALL, w, wrow, x, xrow, nb, K, Y, ldy, n0, n1);
    return;
  }
  const int64_t kc = (nb + parts - 1) / parts;
  for (int64_t p0 = n0; p0 < n1; p0 += FL_TALL_PANEL) {
    const int64_t p1 = n1 - p0 < FL_TALL_PANEL ? n1 : p0 + FL_TALL_PANEL;
    for (int64_t b0 = 0; b0 < nb; b0 += kc) {
      const int64_t b1 = nb - b0 < kc ? nb : b0 + kc;
      int64_t n = p0;
      float *sv = save;
      for (; n + FL_NT_TALL <= p1; n += FL_NT_TALL, sv += MT * 2 * 16)
        fl_tile_part(t, MT, FL_NT_TALL, w + n * wrow, wrow, x, xrow, b0, b1, nb, K, Y + n, ldy, sv);
      for (; n < p1; n++, sv += MT * 2 * 16)
        fl_tile_part(t, MT, 1, w + n * wrow, wrow, x, xrow, b0, b1, nb, K, Y + n, ldy, sv);
    }
  }
}

/* Prefill GEMMs (M >= FL_CV_ROWS) on F16/BF16 weights convert each panel's
 * whole 8-column tiles to f32 once, in the zmm layout fl_load2 builds (tile c,
 * block b: its 4 column pairs, 16 floats each), so the row tiles' inner loop
 * is loads and FMAs: fl_load2's insert and conversion, repeated for every 6
 * rows, had kept port 5 ~1.7x as busy as the FMAs alone. The same exact
 * conversions and the same FMAs in the same order: the same bits. The
 * conversion's stores and reloads pay from about 96 rows (EPYC-512, one core,
 * F16 1536x576 / 576x1536 / 5632x2048: converting took 2.5x the time at 12 rows,
 * 1.1x at 64, 0.9-1.0x at 96, 0.9x at 128; docs/BENCHMARKS.md). */
#define FL_CV_ROWS 96

AI void fl_convert(di_dtype t, const uint8_t *w, size_t wrow, int64_t nb, int64_t ntiles, float *cw) {
  for (int64_t c = 0; c < ntiles; c++)
    for (int64_t b = 0; b < nb; b++)
      for (int p = 0; p < 4; p++) {
        const uint8_t *w0 = w + (size_t)(8 * c + 2 * p) * wrow + b * 8 * 2; /* 2-byte elements */
        _mm512_store_ps(cw + ((c * nb + b) * 4 + p) * 16, fl_load2(t, w0, w0 + wrow));
      }
}

/* fl_tile's MT x 8 tile on a converted tile cw (w: its original rows, for the
 * K % 8 tail in fl_finish). */
AI void fl_tile_cv(di_dtype t, int MT, const float *cw, const uint8_t *w, size_t wrow, const uint8_t *x,
                   size_t xrow, int64_t nb, int64_t K, float *Y, int64_t ldy) {
  __m512 acc[FL_MT][NP_MAX];
  UNROLL for (int i = 0; i < MT; i++) UNROLL for (int p = 0; p < NP_MAX; p++) acc[i][p] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    __m512 wv[NP_MAX];
    UNROLL for (int p = 0; p < NP_MAX; p++) wv[p] = _mm512_load_ps(cw + (b * NP_MAX + p) * 16);
    UNROLL for (int i = 0; i < MT; i++) {
      __m256 x8 = _mm256_loadu_ps((const float *)(x + i * xrow) + b * 8);
      __m512 xv = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(x8)));
      UNROLL for (int p = 0; p < NP_MAX; p++) acc[i][p] = _mm512_fmadd_ps(wv[p], xv, acc[i][p]);
    }
  }
  UNROLL for (int i = 0; i < MT; i++) UNROLL for (int j = 0; j < 2 * NP_MAX; j++)
    Y[i * ldy + j] = fl_finish(t, half_of(acc[i][j / 2], j & 1), w + j * wrow, (const float *)(x + i * xrow), nb, K);
}

/* One function per (type, row tile) over a panel's ntiles converted tiles, as
 * the tile sets of matmul_tiles.h. */
typedef void (*fl_cv_fn)(const float *cw, const uint8_t *w, size_t wrow, const uint8_t *x, size_t xrow,
                         int64_t nb, int64_t K, float *Y, int64_t ldy, int64_t ntiles);
#define CV_FN(NAME, T, R)                                                                                      \
  static __attribute__((noinline)) void NAME##_cv##R(const float *cw, const uint8_t *w, size_t wrow,           \
                                                     const uint8_t *x, size_t xrow, int64_t nb, int64_t K,     \
                                                     float *Y, int64_t ldy, int64_t ntiles) {                  \
    for (int64_t c = 0; c < ntiles; c++)                                                                       \
      fl_tile_cv(T, R, cw + c * nb * 64, w + (size_t)(8 * c) * wrow, wrow, x, xrow, nb, K, Y + 8 * c, ldy);    \
  }
#define DEFINE_CV_SET(NAME, T)                                                                                 \
  CV_FN(NAME, T, 1) CV_FN(NAME, T, 2) CV_FN(NAME, T, 3) CV_FN(NAME, T, 4) CV_FN(NAME, T, 5) CV_FN(NAME, T, 6)   \
  static const fl_cv_fn NAME##_cv[FL_MT + 1] = {NULL,          NAME##_cv1, NAME##_cv2, NAME##_cv3,            \
                                                NAME##_cv4,    NAME##_cv5, NAME##_cv6};

AI void fl_mm_cv(di_dtype t, const tile_set *ts, const fl_cv_fn *cv, const void *W, size_t wrow, const void *X,
                 size_t xrow, int64_t M, int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1) {
  const int64_t nb = K / fl_QK;
  int64_t panel = (int64_t)(PANEL_BYTES / (wrow ? wrow : 1)) / 8 * 8;
  if (panel < 8) panel = 8;
  float *cw = M >= FL_CV_ROWS && nb ? di_cpu_scratch(DI_SCRATCH_FL, (size_t)(panel * nb * 8) * sizeof(float)) : NULL;
  if (!cw) {
    tiles_mm(ts, W, wrow, X, xrow, M, K, Y, ldy, n0, n1);
    return;
  }
  const uint8_t *w = W, *x = X;
  for (int64_t p0 = n0; p0 < n1; p0 += panel) {
    const int64_t p1 = n1 - p0 < panel ? n1 : p0 + panel, ntiles = (p1 - p0) / 8, c1 = p0 + 8 * ntiles;
    fl_convert(t, w + (size_t)p0 * wrow, wrow, nb, ntiles, cw);
    for (int64_t m = 0; m < M; m += FL_MT) {
      const int64_t mt = M - m < FL_MT ? M - m : FL_MT;
      const uint8_t *xm = x + m * xrow;
      float *ym = Y + m * ldy;
      cv[mt](cw, w + (size_t)p0 * wrow, wrow, xm, xrow, nb, K, ym + p0, ldy, ntiles);
      if (c1 < p1) tiles_mm(ts, W, wrow, xm, xrow, mt, K, ym, ldy, c1, p1); /* columns past the whole tiles */
    }
  }
}

DEFINE_TALL_SET(f32, fl, DI_F32)
DEFINE_TILE_SET(f16, fl, DI_F16)
DEFINE_TILE_SET(bf16, fl, DI_BF16)
DEFINE_CV_SET(f16, DI_F16)
DEFINE_CV_SET(bf16, DI_BF16)
static void mm_f32(const void *W, size_t wrow, const void *x, size_t xrow, int64_t M, int64_t K, float *Y,
                   int64_t ldy, int64_t n0, int64_t n1) {
  tiles_mm(&f32_set, W, wrow, x, xrow, M, K, Y, ldy, n0, n1);
}
static void mm_f16(const void *W, size_t wrow, const void *x, size_t xrow, int64_t M, int64_t K, float *Y,
                   int64_t ldy, int64_t n0, int64_t n1) {
  fl_mm_cv(DI_F16, &f16_set, f16_cv, W, wrow, x, xrow, M, K, Y, ldy, n0, n1);
}
static void mm_bf16(const void *W, size_t wrow, const void *x, size_t xrow, int64_t M, int64_t K, float *Y,
                    int64_t ldy, int64_t n0, int64_t n1) {
  fl_mm_cv(DI_BF16, &bf16_set, bf16_cv, W, wrow, x, xrow, M, K, Y, ldy, n0, n1);
}

di_cpu_mm_fn FL512_ENTRY(di_dtype t) {
  switch (t) {
  case DI_F32: return mm_f32;
  case DI_F16: return mm_f16;
  case DI_BF16: return mm_bf16;
  default: return NULL;
  }
}
