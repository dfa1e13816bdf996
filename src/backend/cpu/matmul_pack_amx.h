/* The AMX path of the AVX-512 packed kernels (included once, by
 * matmul_pack_avx512.c after matmul_pack_tiles.h): Q4_0 / Q4_1 / Q5_0 / Q8_0 /
 * Q4_K / Q6_K GEMMs, 16 activation rows x 16 columns (a pair of groups) per tile.
 *
 * One tdpbssd per 32-element block gives the 16 x 16 exact int32 sums
 * sum(q * a) of two groups against 16 rows: the A tile is the rows' qs (stride
 * xrow, 32 bytes each), the B tile is the two groups' words side by side (8
 * rows of 64 bytes: K-quads x 16 columns, the packed layout's own order) with
 * Q4 nibbles widened to bytes (Q4_0 minus 8, so no offset correction; Q5_0
 * with its fifth bits, minus 16). Those
 * are the integers pk_group2 forms, and the float finish below is q32_block2's,
 * instruction for instruction, so Y keeps its bits (test_matmul_packed). Q4_K
 * takes one tile step per 32-element sub-block (its nibbles are 0..15 as
 * they are) and adds sum * 6-bit scale into the super-block's int32 sums, the
 * integers q4k_block forms; then q4k_finish's float operations, 16 lanes wide.
 * Q6_K takes a step per 16-element group (quants staged minus 32, so the sum
 * needs no offset term) times its int8 scale, then q6k_finish's operations.
 *
 * Why it is shaped this way (measured, bench_matmul M=512, one core):
 *  - The B tiles of a panel of group pairs are staged once, before any tile
 *    multiply reads them, and reused by every 16-row chunk. Staging each
 *    block right before its tileloadd made the load wait for the stores to
 *    reach L1 and held the whole path to the VNNI kernel's speed.
 *  - Two C tiles alternate: block b+1 multiplies while block b's sums are
 *    stored and finished, so the finish (16 rows x cvt, 2 mul, add per block),
 *    which bounds this path, overlaps the tile unit.
 *  - Q4_0/Q4_1/Q5_0/Q8_0: each 16-row chunk's quants are copied once per call
 *    into contiguous A tiles, with its scales block-major (amx_rows). Tile
 *    loads of 16 rows 2-3 KB apart, and the finish's 16 scattered scale
 *    loads, had cost a third of the time: 440 -> 600 GOP/s (Q8_0, M=512,
 *    N=1024, K=2048); the 1.1B Q4_0 prefill went 153 -> 209 tok/s.
 * Rows past the last multiple of 16 and columns outside whole group pairs take
 * pk_mm. Used where the CPU has AMX-INT8 and Linux grants the tile state
 * (arch_prctl); DI_CPU_AMX=0 turns it off. */
#ifndef DI_CPU_MATMUL_PACK_AMX_H
#define DI_CPU_MATMUL_PACK_AMX_H

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backend/cpu/isa.h"

/* Staged B tiles per panel (per thread): stays in L2 while the row chunks pass. */
#define AMX_PANEL_BYTES (256 * 1024)
#define AMX_BLOCK_BYTES 512 /* one block's B tile: 8 K-quads x 16 columns x 4 bytes */
#define AMX_Q6K_STEP_BYTES 256 /* Q6_K: a 16-element group, 4 K-quads */

static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;
static bool g_amx;
/* Each thread's staging buffer, kept between calls and grown as needed (freed
 * at thread exit): a fresh multi-megabyte allocation per call came back from
 * mmap as zero pages every time, and clearing them cost ~10% of a prefill. */
static pthread_key_t g_amx_key;
static bool g_amx_key_ok;
typedef struct {
  int8_t *p;
  size_t cap;
} amx_buf;
static void amx_buf_free(void *v) {
  amx_buf *b = v;
  free(b->p);
  free(b);
}
static int8_t *amx_scratch(size_t bytes) {
  if (!g_amx_key_ok) return NULL;
  amx_buf *b = pthread_getspecific(g_amx_key);
  if (!b) {
    if (!(b = calloc(1, sizeof *b))) return NULL;
    if (pthread_setspecific(g_amx_key, b)) {
      free(b);
      return NULL;
    }
  }
  if (b->cap < bytes) {
    free(b->p);
    b->cap = (bytes + 4095) / 4096 * 4096;
    if (!(b->p = aligned_alloc(64, b->cap))) b->cap = 0;
  }
  return b->p;
}

static void amx_init(void) {
  const char *e = getenv("DI_CPU_AMX");
  if (e && !strcmp(e, "0")) return;
  g_amx_key_ok = pthread_key_create(&g_amx_key, amx_buf_free) == 0;
  /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18) */
  g_amx = di_cpu_features_get()->amx_int8 && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

bool di_cpu_amx_granted(void) {
  pthread_once(&g_amx_once, amx_init);
  return g_amx;
}

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_cfg;

/* One block's B tile: the two groups' words side by side, Q4 nibbles widened
 * to bytes (low nibbles are K-quads 0-3, high ones 4-7; Q4_0 minus 8; Q5_0 its
 * fifth bits or-ed in, minus 16). */
AI void amx_stage(di_dtype t, const uint8_t *q0, const uint8_t *q1, int8_t *stage) {
  if (t == DI_Q6_K) { /* 16 group tiles of 4 K-quads: word w of chunk r of half h is quad w % 4 of group 8h + 2r + w / 4 */
    const __m512i k32 = _mm512_set1_epi8(32);
    for (int h = 0; h < 2; h++)
      for (int r = 0; r < 4; r++)
        for (int w = 0; w < 8; w++) {
          __m512i l = join_words(q0 + 32 * di_pk_q6k_ql(h, r & 1, w), q1 + 32 * di_pk_q6k_ql(h, r & 1, w));
          __m512i hb = join_words(q0 + 32 * di_pk_q6k_qh(h, w), q1 + 32 * di_pk_q6k_qh(h, w));
          __m512i v = _mm512_sub_epi8(q6k_quants(l, hb, r), k32);
          _mm512_store_si512(stage + AMX_Q6K_STEP_BYTES * (8 * h + 2 * r + w / 4) + 64 * (w % 4), v);
        }
    return;
  }
  if (t == DI_Q4_K) { /* 8 sub-block tiles: chunk p's low nibbles are sub-block 2p, high ones 2p+1 */
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    q0 += 96, q1 += 96; /* past the 3 scale words */
    for (int p = 0; p < 4; p++)
      for (int w = 0; w < 8; w++) {
        __m512i v = join_words(q0 + 256 * p + 32 * w, q1 + 256 * p + 32 * w);
        _mm512_store_si512(stage + AMX_BLOCK_BYTES * (2 * p) + 64 * w, _mm512_and_si512(v, m4));
        _mm512_store_si512(stage + AMX_BLOCK_BYTES * (2 * p + 1) + 64 * w,
                           _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
      }
    return;
  }
  if (t == DI_Q8_0) {
    for (int w = 0; w < 8; w++) _mm512_store_si512(stage + 64 * w, join_words(q0 + 32 * w, q1 + 32 * w));
    return;
  }
  if (t == DI_Q5_0) {
    const __m512i qh = join_words(q0, q1), k16 = _mm512_set1_epi8(16);
    for (int w = 0; w < 4; w++) {
      __m512i lo, hi;
      q5_pair_word(q0, q1, qh, w, &lo, &hi);
      _mm512_store_si512(stage + 64 * w, _mm512_sub_epi8(lo, k16));
      _mm512_store_si512(stage + 64 * (4 + w), _mm512_sub_epi8(hi, k16));
    }
    return;
  }
  const __m512i m4 = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
  for (int w = 0; w < 4; w++) {
    __m512i v = join_words(q0 + 32 * w, q1 + 32 * w);
    __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    if (t == DI_Q4_0) lo = _mm512_sub_epi8(lo, eight), hi = _mm512_sub_epi8(hi, eight);
    _mm512_store_si512(stage + 64 * w, lo);
    _mm512_store_si512(stage + 64 * (4 + w), hi);
  }
}

/* q32_finish16 for the 16 rows of a tile, their scales d and s of block b
 * read side by side from ds/ss (amx_rows). */
#define AMX_UNROLL _Pragma("GCC unroll 16")
AI void amx_finish(di_dtype t, const uint8_t *gp0, const uint8_t *gp1, const float *ds, const float *ss,
                   const int32_t *c, __m512 *acc) {
  __m512i isum[16];
  AMX_UNROLL for (int i = 0; i < 16; i++) isum[i] = _mm512_load_si512(c + 16 * i);
  q32_finish16(t, 16, gp0, gp1, ds, ss, 1, isum, acc);
}

/* The tile steps: one per block (Q4_0/Q4_1/Q8_0) or per 32-element sub-block
 * (Q4_K, 8 per super-block) or per 16-element group (Q6_K, 16); the A tile of
 * step k is its activation bytes. */
AI int amx_steps(di_dtype t) { return t == DI_Q6_K ? 16 : t == DI_Q4_K ? 8 : 1; }
AI size_t amx_step_bytes(di_dtype t) { return t == DI_Q6_K ? AMX_Q6K_STEP_BYTES : AMX_BLOCK_BYTES; }
AI const uint8_t *amx_a(di_dtype t, const uint8_t *x, int64_t k) {
  if (t == DI_Q6_K) return x + (size_t)(k / 16) * sizeof(di_act_q8k) + offsetof(di_act_q8k, qs) + 16 * (k % 16);
  if (t == DI_Q4_K) return x + (size_t)(k / 8) * sizeof(di_act_q8k) + offsetof(di_act_q8k, qs) + 32 * (k % 8);
  return x + (size_t)k * sizeof(di_act_q8) + offsetof(di_act_q8, qs);
}

/* Activation bytes per row of a step's A tile. */
AI size_t amx_a_bytes(di_dtype t) { return t == DI_Q6_K ? 16 : 32; }

/* A 16-row chunk, made once per call: every step's A tile contiguous (step k
 * at xs + 16 k amx_a_bytes, row stride amx_a_bytes) and, for Q4_0/Q4_1/Q5_0/
 * Q8_0, the rows' d and s block-major (ds[16 b + i] is row i's), so the tile
 * loads and the finish stream contiguous memory instead of 16 rows a row
 * stride apart. */
AI void amx_rows(di_dtype t, const uint8_t *x, size_t xrow, int64_t nb, float *ds, float *ss, int8_t *xs) {
  const int64_t n = nb * amx_steps(t);
  const size_t ab = amx_a_bytes(t);
  for (int i = 0; i < 16; i++) {
    const uint8_t *xi = x + (size_t)i * xrow;
    for (int64_t k = 0; k < n; k++) memcpy(xs + (size_t)(16 * k + i) * ab, amx_a(t, xi, k), ab);
    if (!di_pk_kquant(t))
      for (int64_t b = 0; b < nb; b++) {
        const di_act_q8 *a = (const di_act_q8 *)xi + b;
        ds[16 * b + i] = a->d, ss[16 * b + i] = a->s;
      }
  }
}

/* 16 rows' float chains (m: Q4_K's mins chain) and Q4_K's super-block state:
 * the integer sums so far, the pair's scales (int32 lanes) and min pairs
 * (int16 pairs, as q4k_finish feeds madd). */
typedef struct {
  __m512 s[16], m[16];
  __m512i isum[16], sc[8], mn[4];
} amx_acc;

AI __m512i join_i(__m256i a, __m256i b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }

/* q4k_finish, 16 lanes (the two groups) at a time: same integers, same float operations. */
AI void amx_q4k_finish(const uint8_t *gp0, const uint8_t *gp1, const uint8_t *x, size_t xrow, int64_t b,
                       amx_acc *A) {
  __m512 dw = join_ph(gp0, gp1), dmw = join_ph(gp0 + 16, gp1 + 16);
  for (int i = 0; i < 16; i++) {
    const di_act_q8k *a = (const di_act_q8k *)(x + (size_t)i * xrow) + b;
    __m256i bs = _mm256_loadu_si256((const __m256i *)a->bsums);
    __m128i b32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    __m512i imin = _mm512_madd_epi16(A->mn[0], _mm512_set1_epi32(_mm_extract_epi32(b32, 0)));
    imin = _mm512_add_epi32(imin, _mm512_madd_epi16(A->mn[1], _mm512_set1_epi32(_mm_extract_epi32(b32, 1))));
    imin = _mm512_add_epi32(imin, _mm512_madd_epi16(A->mn[2], _mm512_set1_epi32(_mm_extract_epi32(b32, 2))));
    imin = _mm512_add_epi32(imin, _mm512_madd_epi16(A->mn[3], _mm512_set1_epi32(_mm_extract_epi32(b32, 3))));
    __m512 da = _mm512_set1_ps(a->d); /* -d by flipping the sign bit, as q4k_finish (no AVX512DQ xor_ps) */
    __m512 nda = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(da), _mm512_set1_epi32((int)0x80000000u)));
    A->s[i] = _mm512_add_ps(A->s[i], _mm512_mul_ps(cvt16(A->isum[i]), _mm512_mul_ps(dw, da)));
    A->m[i] = _mm512_add_ps(A->m[i], _mm512_mul_ps(cvt16(imin), _mm512_mul_ps(dmw, nda)));
  }
}

/* Step k's sums c (16 rows x 16 columns) into the chains, in K order. */
AI void amx_consume(di_dtype t, const uint8_t *w0, const uint8_t *w1, size_t gbb, const uint8_t *x, size_t xrow,
                    const float *ds, const float *ss, int64_t k, const int32_t *c, amx_acc *A) {
  if (!di_pk_kquant(t)) {
    amx_finish(t, w0 + (size_t)k * gbb, w1 + (size_t)k * gbb, ds + 16 * k, ss + 16 * k, c, A->s);
    return;
  }
  if (t == DI_Q6_K) { /* isum = sum_g sc_g * dot_g(q - 32), then q6k_finish's float operations */
    const int64_t b = k / 16;
    const int g = (int)(k % 16);
    const uint8_t *gp0 = w0 + (size_t)b * gbb, *gp1 = w1 + (size_t)b * gbb;
    if (g == 0)
      for (int i = 0; i < 16; i++) A->isum[i] = _mm512_setzero_si512();
    __m512i sw = join_words(gp0 + 16 + 32 * di_pk_q6k_sc(g / 4), gp1 + 16 + 32 * di_pk_q6k_sc(g / 4));
    __m512i sc = _mm512_srai_epi32(_mm512_slli_epi32(sw, 24 - 8 * (g % 4)), 24);
    for (int i = 0; i < 16; i++)
      A->isum[i] = _mm512_add_epi32(A->isum[i], _mm512_mullo_epi32(sc, _mm512_load_si512(c + 16 * i)));
    if (g == 15) {
      __m512 dw = join_ph(gp0, gp1);
      for (int i = 0; i < 16; i++) {
        const di_act_q8k *a = (const di_act_q8k *)(x + (size_t)i * xrow) + b;
        A->s[i] = _mm512_add_ps(A->s[i], _mm512_mul_ps(cvt16(A->isum[i]), _mm512_mul_ps(dw, _mm512_set1_ps(a->d))));
      }
    }
    return;
  }
  const int64_t b = k / 8;
  const int s = (int)(k % 8);
  const uint8_t *gp0 = w0 + (size_t)b * gbb, *gp1 = w1 + (size_t)b * gbb;
  if (s == 0) { /* the pair's 6-bit scales and mins of this super-block */
    const q4k_sc d0 = q4k_decode(gp0), d1 = q4k_decode(gp1);
    for (int r = 0; r < 8; r++)
      A->sc[r] = _mm512_and_si512(_mm512_srli_epi32(join_i(d0.sc[r / 4], d1.sc[r / 4]), 8 * (r % 4)),
                                  _mm512_set1_epi32(0xff));
    for (int j = 0; j < 4; j++) {
      __m256i ctl = sc_ctl(2 * (j % 2), 2 * (j % 2) + 1, false);
      A->mn[j] = join_i(_mm256_shuffle_epi8(d0.mn[j / 2], ctl), _mm256_shuffle_epi8(d1.mn[j / 2], ctl));
    }
    for (int i = 0; i < 16; i++) A->isum[i] = _mm512_setzero_si512();
  }
  /* sub-block sums (|dot| <= 32 * 15 * 127) times 6-bit scales: exact in int32 */
  for (int i = 0; i < 16; i++)
    A->isum[i] = _mm512_add_epi32(A->isum[i], _mm512_mullo_epi32(A->sc[s], _mm512_load_si512(c + 16 * i)));
  if (s == 7) amx_q4k_finish(gp0, gp1, x, xrow, b, A);
}

/* Step k's sums into C tile TC (A tile TA, B tile TB); tile numbers are immediates. */
#define AMX_MUL(TC, TA, TB, k)                                     \
  do {                                                             \
    _tile_zero(TC);                                                \
    _tile_loadd(TA, xs + (size_t)(k) * 16 * amx_a_bytes(t), (long)amx_a_bytes(t)); \
    _tile_loadd(TB, st + (size_t)(k) * amx_step_bytes(t), 64);    \
    _tile_dpbssd(TC, TA, TB);                                      \
  } while (0)

/* 16 rows x the 16 columns of a group pair (packed blocks w0, w1; staged B
 * tiles st) over all nb blocks, in K order. */
AI void amx_tile16(di_dtype t, const uint8_t *w0, const uint8_t *w1, size_t gbb, const int8_t *st,
                   const uint8_t *x, size_t xrow, const float *ds, const float *ss, const int8_t *xs, int64_t nb,
                   float *Y, int64_t ldy) {
  _Alignas(64) int32_t c[2][16 * 16];
  amx_acc A;
  AMX_UNROLL for (int i = 0; i < 16; i++) A.s[i] = A.m[i] = _mm512_setzero_ps();
  const int64_t n = nb * amx_steps(t);
#define CONSUME(k, cb) amx_consume(t, w0, w1, gbb, x, xrow, ds, ss, (k), (cb), &A)
  /* Step k's sums are read back one step after their tile store, so the
   * loads do not wait on it; the chains still see the steps in K order. */
  AMX_MUL(0, 4, 6, 0);
  for (int64_t k = 0; k < n; k += 2) { /* C tile 0 holds step k on entry */
    if (k + 1 < n) AMX_MUL(2, 5, 7, k + 1);
    _tile_stored(0, c[0], 64);
    if (k > 0) CONSUME(k - 1, c[1]);
    if (k + 2 < n) AMX_MUL(0, 4, 6, k + 2);
    if (k + 1 < n) _tile_stored(2, c[1], 64);
    CONSUME(k, c[0]);
  }
  if (n % 2 == 0) CONSUME(n - 1, c[1]);
#undef CONSUME
  AMX_UNROLL for (int i = 0; i < 16; i++)
    _mm512_storeu_ps(Y + i * ldy, di_pk_kquant(t) ? _mm512_add_ps(A.s[i], A.m[i]) : A.s[i]);
}
#undef AMX_MUL

AI void pk_mm_amx(di_dtype t, const void *W, size_t wrow, int64_t N, const void *X, size_t xrow, int64_t M,
                  int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1) {
  pthread_once(&g_amx_once, amx_init);
  /* whole group pairs inside [n0, n1) */
  int64_t ga = (n0 + DI_PK_G - 1) / DI_PK_G, gb = n1 / DI_PK_G < N / DI_PK_G ? n1 / DI_PK_G : N / DI_PK_G;
  int64_t pairs = gb > ga ? (gb - ga) / 2 : 0, M16 = M / 16 * 16, nb = K / (di_pk_kquant(t) ? DI_QKK : DI_QK32);
  size_t pair_bytes = (size_t)nb * amx_steps(t) * amx_step_bytes(t);
  int64_t ppp = (int64_t)(AMX_PANEL_BYTES / (pair_bytes ? pair_bytes : 1));
  if (ppp < 1) ppp = 1;
  if (ppp > pairs) ppp = pairs;
  const bool q32 = !di_pk_kquant(t);
  /* every 16-row chunk's amx_rows, made once per call */
  const size_t xs_bytes = (size_t)nb * amx_steps(t) * 16 * amx_a_bytes(t);
  const size_t chunk_bytes = xs_bytes + (q32 ? (size_t)nb * 2 * 16 * sizeof(float) : 0);
  int8_t *stage = g_amx && M16 && pairs ? amx_scratch((size_t)ppp * pair_bytes + (size_t)(M16 / 16) * chunk_bytes) : NULL;
  if (!stage) {
    pk_mm(t, W, wrow, N, X, xrow, M, K, Y, ldy, n0, n1);
    return;
  }
  const uint8_t *w = W, *x = X;
  const size_t gbb = DI_PK_G * di_pk_block_bytes(t), head = DI_PK_G * di_pk_head_bytes(t);
  amx_cfg cfg = {.palette = 1};
  const int quads = t == DI_Q6_K ? 4 : 8; /* K-quads per step */
  for (int k = 0; k < 4; k++) cfg.rows[k] = 16, cfg.colsb[k] = 64; /* C: 16 x 16 int32 */
  for (int k = 4; k < 6; k++) cfg.rows[k] = 16, cfg.colsb[k] = (uint16_t)(4 * quads); /* A: 16 rows x the step's activation bytes */
  for (int k = 6; k < 8; k++) cfg.rows[k] = (uint8_t)quads, cfg.colsb[k] = 64;        /* B: K-quads x 16 columns */
  int8_t *rows = stage + (size_t)ppp * pair_bytes;
  for (int64_t m = 0; m < M16; m += 16) {
    int8_t *r = rows + (size_t)(m / 16) * chunk_bytes;
    float *ds = (float *)(r + xs_bytes);
    amx_rows(t, (const uint8_t *)X + m * xrow, xrow, nb, ds, ds + (q32 ? nb * 16 : 0), r);
  }
  _tile_loadconfig(&cfg);
  for (int64_t p0 = 0; p0 < pairs; p0 += ppp) {
    int64_t p1 = pairs - p0 < ppp ? pairs : p0 + ppp;
    for (int64_t p = p0; p < p1; p++) {
      const uint8_t *w0 = w + (size_t)(ga + 2 * p) * DI_PK_G * wrow, *w1 = w0 + DI_PK_G * wrow;
      int8_t *sp = stage + (size_t)(p - p0) * pair_bytes;
      for (int64_t b = 0; b < nb; b++)
        amx_stage(t, w0 + (size_t)b * gbb + head, w1 + (size_t)b * gbb + head,
                  sp + (size_t)b * amx_steps(t) * amx_step_bytes(t));
    }
    for (int64_t m = 0; m < M16; m += 16) {
      const int8_t *xs = rows + (size_t)(m / 16) * chunk_bytes;
      const float *ds = (const float *)(xs + xs_bytes), *ss = ds + (q32 ? nb * 16 : 0);
      for (int64_t p = p0; p < p1; p++) {
        const uint8_t *w0 = w + (size_t)(ga + 2 * p) * DI_PK_G * wrow;
        amx_tile16(t, w0, w0 + DI_PK_G * wrow, gbb, stage + (size_t)(p - p0) * pair_bytes, x + m * xrow, xrow,
                   ds, ss, xs, nb, Y + m * ldy + (ga + 2 * p) * DI_PK_G, ldy);
      }
    }
  }
  _tile_release();
  const int64_t c0 = ga * DI_PK_G, c1 = (ga + 2 * pairs) * DI_PK_G;
  if (n0 < c0) pk_mm(t, W, wrow, N, X, xrow, M16, K, Y, ldy, n0, c0);
  if (c1 < n1) pk_mm(t, W, wrow, N, X, xrow, M16, K, Y, ldy, c1, n1);
  if (M16 < M) pk_mm(t, W, wrow, N, x + M16 * xrow, xrow, M - M16, K, Y + M16 * ldy, ldy, n0, n1);
}

#endif
