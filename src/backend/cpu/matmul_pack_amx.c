/* The AMX path of the AVX-512 packed kernels: Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0
 * / Q4_K / Q5_K / Q6_K GEMMs, 16 activation rows x 16 columns (a pair of
 * groups) per tile. The VNNI kernels (matmul_pack_vnni.h) route every packed matmul here where
 * the CPU has AMX-INT8 and Linux grants the tile state (arch_prctl;
 * DI_CPU_AMX=0 turns it off); rows past the last multiple of 16 and columns
 * outside whole group pairs go back to the VNNI driver it is handed (rest).
 *
 * One tdpbssd per 32-element block gives the 16 x 16 exact int32 sums
 * sum(q * a) of two groups against 16 rows: the A tile is the rows' qs (stride
 * xrow, 32 bytes each), the B tile is the two groups' words side by side (8
 * rows of 64 bytes: K-quads x 16 columns, the packed layout's own order) with
 * Q4 nibbles widened to bytes (Q4_0 minus 8, so no offset correction; Q5_0
 * with its fifth bits, minus 16). Those are the integers pk_group2 forms, and
 * the float finish is q32_finish16 (matmul_pack_avx512.h), instruction for
 * instruction, so Y keeps its bits.
 * Q4_K takes one tile step per two 32-element sub-blocks against its nibbles
 * staged twice, times each column's 6-bit scale & 7 and times scale >> 3 (both
 * fit int8), summed over the super-block in two C tiles: L + 8 H are the
 * integers q4k_block forms (sum_s scale_s * dot_s), then q4k_finish's float
 * operations, 16 lanes wide. So the scales ride on the tile unit instead of a
 * vector multiply per sub-block, which would bound the path.
 * Q5_K stages Q4_K's quants with their fifth bits (0..31) three times, times
 * the base-4 digits of the 6-bit scale, in three C tiles: C0 + 4 (C1 + 4 C2).
 * Q6_K (from 32 rows) takes one step per four 16-element groups, its quants
 * minus 32 staged four times, times the balanced base-5 digits (-2..2) of
 * each column's int8 group scales, in four C tiles: C0 + 5 (C1 + 5 (C2 + 5 C3))
 * are q6k_block's integers, then q6k_finish's operations (again no per-group
 * vector multiply, and K = 64 per step rather than 16).
 *
 * Why it is shaped this way:
 *  - The B tiles of a panel of group pairs are staged once, before any tile
 *    multiply reads them, and reused by every 16-row chunk: a tile load right
 *    after the stores that staged it waits for them to reach L1.
 *  - Two C tiles alternate: block b+1 multiplies while block b's sums are
 *    stored and finished, so the finish (16 rows x cvt, mul, fma per block),
 *    which bounds this path, overlaps the tile unit.
 *  - Q4_0/Q4_1/Q5_0/Q8_0: each 16-row chunk's quants are copied once per call
 *    into contiguous A tiles, with its scales block-major (amx_rows), so tile
 *    loads and the finish's scale loads stream contiguous memory instead of
 *    16 rows a row stride (KBs) apart.
 *
 * Not covered by the emulation tests (SIMDe has no AMX): on a CPU with AMX,
 * test_matmul_packed checks this path against the scalar reference. */
#include <immintrin.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backend/cpu/isa.h"
#include "backend/cpu/matmul_pack_avx512.h"
#include "backend/cpu/scratch.h"

/* Staged B tiles per panel (per thread): stays in L2 while the row chunks pass. */
#define AMX_PANEL_BYTES (256 * 1024)
#define AMX_BLOCK_BYTES 512 /* one block's B tile: 8 K-quads x 16 columns x 4 bytes */
#define AMX_K_TILE_BYTES 1024 /* Q4_K / Q6_K: a 64-element step, 16 K-quads */

static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;
static bool g_amx;
static void amx_init(void) {
  const char *e = getenv("DI_CPU_AMX");
  if (e && !strcmp(e, "0")) return;
  /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18) */
  g_amx = di_cpu_features_get()->amx_int8 && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

bool di_cpu_amx_granted(void) {
  pthread_once(&g_amx_once, amx_init);
  return g_amx;
}

AI __m512i join_i(__m256i a, __m256i b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_cfg;

/* Byte r of each dword (a column's 4 scale bytes) copied to all 4 of its bytes. */
AI __m512i amx_rep_ctl(int r) {
  const int v = (r | r << 8 | r << 16 | r << 24);
  const int c = 0x04040404;
  return _mm512_setr_epi32(v, v + c, v + 2 * c, v + 3 * c, v, v + c, v + 2 * c, v + 3 * c, v, v + c, v + 2 * c,
                           v + 3 * c, v, v + c, v + 2 * c, v + 3 * c);
}
/* q * s per byte for q in 0..15 and s in 0..7 given as the masks of its bits
 * (<= 105: an int8). */
AI __m512i amx_mul3(__m512i q, const __mmask64 *k) {
  const __m512i q2 = _mm512_add_epi8(q, q), q4 = _mm512_add_epi8(q2, q2);
  __m512i r = _mm512_maskz_mov_epi8(k[0], q);
  r = _mm512_mask_add_epi8(r, k[1], r, q2);
  return _mm512_mask_add_epi8(r, k[2], r, q4);
}

/* The staged B tiles of one block of a group pair (group blocks gp0, gp1):
 * the two groups' words side by side, Q4 nibbles widened to bytes (low
 * nibbles are K-quads 0-3, high ones 4-7; Q4_0 minus 8; Q5_0 its fifth bits
 * or-ed in, minus 16); the K-quants as below. */
AI void amx_stage(di_dtype t, const uint8_t *gp0, const uint8_t *gp1, size_t head, int8_t *stage) {
  const uint8_t *q0 = gp0 + head, *q1 = gp1 + head;
  if (t == DI_Q4_K) {
    /* 4 steps of two sub-blocks: tile rows 0-7 are sub-block 2p's K-quads (the
     * low nibbles of chunk p), rows 8-15 sub-block 2p+1's (the high ones),
     * staged twice: times the column's 6-bit scale & 7, and times scale >> 3 */
    const __m512i m4 = _mm512_set1_epi8(0x0f), m3 = _mm512_set1_epi8(7);
    const q4k_sc d0 = q4k_decode(gp0), d1 = q4k_decode(gp1);
    q0 = gp0 + DI_PK_Q4K_QS, q1 = gp1 + DI_PK_Q4K_QS;
    for (int p = 0; p < 4; p++) {
      __mmask64 k[2][2][3]; /* [sub-block 2p + h][scale & 7, scale >> 3][bit] */
      for (int h = 0; h < 2; h++) {
        const int r = 2 * p + h;
        __m512i sc = _mm512_shuffle_epi8(join_i(d0.sc[r / 4], d1.sc[r / 4]), amx_rep_ctl(r % 4));
        __m512i lo = _mm512_and_si512(sc, m3), hi = _mm512_and_si512(_mm512_srli_epi16(sc, 3), m3);
        for (int bit = 0; bit < 3; bit++) {
          k[h][0][bit] = _mm512_test_epi8_mask(lo, _mm512_set1_epi8((char)(1 << bit)));
          k[h][1][bit] = _mm512_test_epi8_mask(hi, _mm512_set1_epi8((char)(1 << bit)));
        }
      }
      int8_t *sp = stage + (size_t)p * 2 * AMX_K_TILE_BYTES;
      for (int w = 0; w < 8; w++) {
        __m512i v = join_words(q0 + 256 * p + 32 * w, q1 + 256 * p + 32 * w);
        __m512i qa = _mm512_and_si512(v, m4), qb = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        _mm512_store_si512(sp + 64 * w, amx_mul3(qa, k[0][0]));
        _mm512_store_si512(sp + 64 * (8 + w), amx_mul3(qb, k[1][0]));
        _mm512_store_si512(sp + AMX_K_TILE_BYTES + 64 * w, amx_mul3(qa, k[0][1]));
        _mm512_store_si512(sp + AMX_K_TILE_BYTES + 64 * (8 + w), amx_mul3(qb, k[1][1]));
      }
    }
    return;
  }
  if (t == DI_Q5_K) {
    /* Q4_K's 4 steps of two sub-blocks with the fifth bits or-ed in (0..31),
     * staged three times: times the base-4 digits of the column's 6-bit
     * scale (bits 0-1, 2-3, 4-5; each product <= 93 fits int8) */
    const __m512i m4 = _mm512_set1_epi8(0x0f), m3 = _mm512_set1_epi8(3);
    const q4k_sc d0 = q4k_decode(gp0), d1 = q4k_decode(gp1);
    const uint8_t *h0 = gp0 + DI_PK_Q5K_QH, *h1 = gp1 + DI_PK_Q5K_QH;
    q0 = gp0 + DI_PK_Q5K_QS, q1 = gp1 + DI_PK_Q5K_QS;
    for (int p = 0; p < 4; p++) {
      __mmask64 k[2][3][3]; /* [sub-block 2p + h][digit][bit] (bit 2 never set) */
      for (int h = 0; h < 2; h++) {
        const int r = 2 * p + h;
        const __m512i sc = _mm512_shuffle_epi8(join_i(d0.sc[r / 4], d1.sc[r / 4]), amx_rep_ctl(r % 4));
        for (int i = 0; i < 3; i++) {
          const __m512i dg = _mm512_and_si512(_mm512_srli_epi16(sc, 2 * i), m3);
          k[h][i][0] = _mm512_test_epi8_mask(dg, _mm512_set1_epi8(1));
          k[h][i][1] = _mm512_test_epi8_mask(dg, _mm512_set1_epi8(2));
          k[h][i][2] = 0;
        }
      }
      int8_t *sp = stage + (size_t)p * 3 * AMX_K_TILE_BYTES;
      for (int w = 0; w < 8; w++) {
        const __m512i v = join_words(q0 + 256 * p + 32 * w, q1 + 256 * p + 32 * w), qh = join_words(h0 + 32 * w, h1 + 32 * w);
        const __m512i qa = _mm512_or_si512(_mm512_and_si512(v, m4), q5k_fifth(qh, 2 * p));
        const __m512i qb = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), q5k_fifth(qh, 2 * p + 1));
        for (int i = 0; i < 3; i++) {
          _mm512_store_si512(sp + (size_t)i * AMX_K_TILE_BYTES + 64 * w, amx_mul3(qa, k[0][i]));
          _mm512_store_si512(sp + (size_t)i * AMX_K_TILE_BYTES + 64 * (8 + w), amx_mul3(qb, k[1][i]));
        }
      }
    }
    return;
  }
  if (t == DI_Q6_K) {
    /* 4 steps of four 16-element groups: tile rows 4 (g % 4) + quad are group
     * g's K-quads (quad w % 4 of group 8h + 2r + w / 4 is word w of chunk r of
     * half h), quants minus 32, staged four times: times the balanced base-5
     * digits d_i (-2..2) of each column's int8 group scale, sc = d0 + 5 d1 +
     * 25 d2 + 125 d3, so every product fits int8 */
    const __m512i k32 = _mm512_set1_epi8(32);
    __mmask64 k[16][4][3]; /* [group][digit][nonzero, |d| = 2, negative] */
    for (int g = 0; g < 16; g++) {
      __m512i sw = join_words(gp0 + DI_PK_Q6K_WORDS + DI_PK_WORD * di_pk_q6k_sc(g / 4),
                               gp1 + DI_PK_Q6K_WORDS + DI_PK_WORD * di_pk_q6k_sc(g / 4));
      __m512i t = _mm512_srai_epi32(_mm512_slli_epi32(sw, 24 - 8 * (g % 4)), 24);
      for (int i = 0; i < 4; i++) {
        /* q = round(t / 5) = floor((t + 132) / 5) - 26, the floor by multiply-shift (t + 132 < 2^9) */
        __m512i u = _mm512_add_epi32(t, _mm512_set1_epi32(132));
        __m512i q = _mm512_sub_epi32(_mm512_srli_epi32(_mm512_mullo_epi32(u, _mm512_set1_epi32(52429)), 18),
                                     _mm512_set1_epi32(26));
        __m512i d = _mm512_sub_epi32(t, _mm512_add_epi32(q, _mm512_slli_epi32(q, 2)));
        __m512i db = _mm512_shuffle_epi8(d, amx_rep_ctl(0));
        k[g][i][0] = _mm512_test_epi8_mask(db, db);
        k[g][i][1] = _mm512_cmpeq_epi8_mask(_mm512_abs_epi8(db), _mm512_set1_epi8(2));
        k[g][i][2] = _mm512_movepi8_mask(db);
        t = q;
      }
    }
    const __m512i zero = _mm512_setzero_si512();
    for (int h = 0; h < 2; h++)
      for (int r = 0; r < 4; r++)
        for (int w = 0; w < 8; w++) {
          __m512i l = join_words(q0 + 32 * di_pk_q6k_ql(h, r & 1, w), q1 + 32 * di_pk_q6k_ql(h, r & 1, w));
          __m512i hb = join_words(q0 + 32 * di_pk_q6k_qh(h, w), q1 + 32 * di_pk_q6k_qh(h, w));
          __m512i v = _mm512_sub_epi8(q6k_quants(l, hb, r), k32);
          const int g = 8 * h + 2 * r + w / 4;
          int8_t *sp = stage + (size_t)(g / 4) * 4 * AMX_K_TILE_BYTES + 64 * (4 * (g % 4) + w % 4);
          for (int i = 0; i < 4; i++) {
            __m512i x = _mm512_maskz_mov_epi8(k[g][i][0], v);
            x = _mm512_mask_add_epi8(x, k[g][i][1], x, x);
            x = _mm512_mask_sub_epi8(x, k[g][i][2], zero, x);
            _mm512_store_si512(sp + (size_t)i * AMX_K_TILE_BYTES, x);
          }
        }
    return;
  }
  if (t == DI_Q8_0) {
    for (int w = 0; w < 8; w++) _mm512_store_si512(stage + 64 * w, join_words(q0 + 32 * w, q1 + 32 * w));
    return;
  }
  /* the quants minus their offset (Q4_0 8, Q5_0 16; Q4_1 / Q5_1 as they are, their m is the finish's) */
  const __m512i off = _mm512_set1_epi8((char)di_pk_offset(t));
  if (di_pk_q5(t)) {
    const __m512i qh = join_words(q0, q1);
    for (int w = 0; w < 4; w++) {
      __m512i lo, hi;
      q5_pair_word(q0, q1, qh, w, &lo, &hi);
      _mm512_store_si512(stage + 64 * w, _mm512_sub_epi8(lo, off));
      _mm512_store_si512(stage + 64 * (4 + w), _mm512_sub_epi8(hi, off));
    }
    return;
  }
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  for (int w = 0; w < 4; w++) {
    __m512i v = join_words(q0 + 32 * w, q1 + 32 * w);
    __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    lo = _mm512_sub_epi8(lo, off), hi = _mm512_sub_epi8(hi, off);
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
AI int amx_steps(di_dtype t) { return di_pk_kquant(t) ? 4 : 1; }
/* Staged bytes per step (Q4_K: its two B tiles, Q6_K its four). */
AI size_t amx_step_bytes(di_dtype t) {
  return t == DI_Q6_K ? 4 * AMX_K_TILE_BYTES : t == DI_Q5_K ? 3 * AMX_K_TILE_BYTES : t == DI_Q4_K ? 2 * AMX_K_TILE_BYTES
                                                                                        : AMX_BLOCK_BYTES;
}
/* K-quads per step. */
AI int amx_quads(di_dtype t) { return di_pk_kquant(t) ? 16 : 8; }
AI const uint8_t *amx_a(di_dtype t, const uint8_t *x, int64_t k) {
  if (di_pk_kquant(t)) return x + (size_t)(k / 4) * sizeof(di_act_q8k) + offsetof(di_act_q8k, qs) + 64 * (k % 4);
  return x + (size_t)k * sizeof(di_act_q8) + offsetof(di_act_q8, qs);
}

/* Activation bytes per row of a step's A tile. */
AI size_t amx_a_bytes(di_dtype t) { return (size_t)amx_quads(t) * 4; }

/* Q4_K's finish inputs of one row and super-block: its 32-element sums as
 * int16 pairs (sub-blocks 2j, 2j+1 in pair[j], as q4k_finish's hadd forms
 * them) and d, -d, so the finish broadcasts them straight from memory. */
typedef struct {
  int32_t pair[4];
  float d, nd, pad[2];
} amx_q4k_row;

/* A 16-row chunk, made once per call: every step's A tile contiguous (step k
 * at xs + 16 k amx_a_bytes, row stride amx_a_bytes) and, block-major, for
 * Q4_0/Q4_1/Q5_0/Q8_0 the rows' d and s (ds[16 b + i] is row i's), for Q4_K
 * their amx_q4k_row (kr[16 b + i]), so the tile loads and the finish stream
 * contiguous memory instead of 16 rows a row stride apart (Q4_K: and its
 * finish lost the per-row hadd and extracts, ~10 of ~27 vector uops). */
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
    else if (t == DI_Q4_K || t == DI_Q5_K)
      for (int64_t b = 0; b < nb; b++) {
        const di_act_q8k *a = (const di_act_q8k *)xi + b;
        amx_q4k_row *r = (amx_q4k_row *)ds + 16 * b + i;
        for (int j = 0; j < 4; j++)
          r->pair[j] = (int32_t)((uint32_t)(uint16_t)(a->bsums[4 * j] + a->bsums[4 * j + 1]) |
                                 (uint32_t)(uint16_t)(a->bsums[4 * j + 2] + a->bsums[4 * j + 3]) << 16);
        r->d = a->d, r->nd = -a->d;
      }
  }
}
/* Bytes amx_rows writes after the A tiles, per super-block or block. */
AI size_t amx_rows_extra(di_dtype t) {
  return t == DI_Q4_K || t == DI_Q5_K ? 16 * sizeof(amx_q4k_row) : di_pk_kquant(t) ? 0 : 2 * 16 * sizeof(float);
}

/* 16 rows' float chains (m: Q4_K's mins chain) and Q4_K's super-block state:
 * the integer sums so far, the pair's scales (int32 lanes) and min pairs
 * (int16 pairs, as q4k_finish feeds madd). */
typedef struct {
  __m512 s[16], m[16];
  __m512i isum[16], mn[4];
} amx_acc;


/* q4k_finish, 16 lanes (the two groups) at a time: same integers, same float
 * operations (kr: super-block b's amx_q4k_row of the 16 rows). */
AI void amx_q4k_finish(const uint8_t *gp0, const uint8_t *gp1, const amx_q4k_row *kr, amx_acc *A) {
  __m512 dw = join_ph(gp0, gp1), dmw = join_ph(gp0 + DI_PK_M, gp1 + DI_PK_M);
  for (int i = 0; i < 16; i++) {
    const amx_q4k_row *r = kr + i;
    __m512i imin = _mm512_madd_epi16(A->mn[0], _mm512_set1_epi32(r->pair[0]));
    imin = _mm512_add_epi32(imin, _mm512_madd_epi16(A->mn[1], _mm512_set1_epi32(r->pair[1])));
    imin = _mm512_add_epi32(imin, _mm512_madd_epi16(A->mn[2], _mm512_set1_epi32(r->pair[2])));
    imin = _mm512_add_epi32(imin, _mm512_madd_epi16(A->mn[3], _mm512_set1_epi32(r->pair[3])));
    A->s[i] = _mm512_fmadd_ps(cvt16(A->isum[i]), _mm512_mul_ps(dw, _mm512_set1_ps(r->d)), A->s[i]);
    A->m[i] = _mm512_fmadd_ps(cvt16(imin), _mm512_mul_ps(dmw, _mm512_set1_ps(r->nd)), A->m[i]);
  }
}

/* Step k's sums c (16 rows x 16 columns) into the chains, in K order. */
AI void amx_consume(di_dtype t, const uint8_t *w0, const uint8_t *w1, size_t gbb, const uint8_t *x, size_t xrow,
                    const float *ds, const float *ss, int64_t k, const int32_t *c, amx_acc *A) {
  (void)x, (void)xrow; /* the K-quants run amx_tile16_q4k / _q6k */
  amx_finish(t, w0 + (size_t)k * gbb, w1 + (size_t)k * gbb, ds + 16 * k, ss + 16 * k, c, A->s);
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
                   float *Y, int64_t ldy, const uint8_t *pf0, const uint8_t *pf1) {
  _Alignas(64) int32_t c[2][16 * 16];
  amx_acc A;
  AMX_UNROLL for (int i = 0; i < 16; i++) A.s[i] = A.m[i] = _mm512_setzero_ps();
  const int64_t n = nb * amx_steps(t);
#define CONSUME(k, cb) amx_consume(t, w0, w1, gbb, x, xrow, ds, ss, (k), (cb), &A)
  /* Step k's sums are read back one step after their tile store, so the
   * loads do not wait on it; the chains still see the steps in K order. */
  AMX_MUL(0, 4, 6, 0);
  for (int64_t k = 0; k < n; k += 2) { /* C tile 0 holds step k on entry */
    if (pf0)
      for (size_t o = (size_t)k * gbb; o < (size_t)(k + 2 < n ? k + 2 : n) * gbb; o += 64) {
        _mm_prefetch((const char *)pf0 + o, _MM_HINT_T0);
        _mm_prefetch((const char *)pf1 + o, _MM_HINT_T0);
      }
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

/* Q4_K, per super-block: C tiles L and H sum its 4 steps' products with
 * q * (scale & 7) and q * (scale >> 3) (amx_stage), so L + 8 H is q4k_block's
 * sum_s scale_s * dot_s, the same integers, and no per-sub-block multiply is
 * left to the vector unit (16 vpmulld per sub-block would bound this path). */
#define AMX_Q4K_MUL(TL, TH, b)                                                                 \
  do {                                                                                         \
    _tile_zero(TL);                                                                            \
    _tile_zero(TH);                                                                            \
    for (int p_ = 0; p_ < 4; p_++) {                                                           \
      const size_t k_ = (size_t)(4 * (b) + p_);                                                \
      _tile_loadd(4, xs + k_ * 16 * 64, 64);                                                   \
      _tile_loadd(6, st + k_ * 2 * AMX_K_TILE_BYTES, 64);                                    \
      _tile_loadd(7, st + k_ * 2 * AMX_K_TILE_BYTES + AMX_K_TILE_BYTES, 64);               \
      _tile_dpbssd(TL, 4, 6);                                                                  \
      _tile_dpbssd(TH, 4, 7);                                                                  \
    }                                                                                          \
  } while (0)

/* Super-block b's sums (L in cl, H in ch) into the chains: q4k_finish's operations. */
AI void amx_q4k_super(const uint8_t *gp0, const uint8_t *gp1, const amx_q4k_row *kr, const int32_t *cl,
                      const int32_t *ch, amx_acc *A) {
  const q4k_sc d0 = q4k_decode(gp0), d1 = q4k_decode(gp1);
  for (int j = 0; j < 4; j++) {
    __m256i ctl = sc_ctl(2 * (j % 2), 2 * (j % 2) + 1, false);
    A->mn[j] = join_i(_mm256_shuffle_epi8(d0.mn[j / 2], ctl), _mm256_shuffle_epi8(d1.mn[j / 2], ctl));
  }
  AMX_UNROLL for (int i = 0; i < 16; i++)
    A->isum[i] = _mm512_add_epi32(_mm512_load_si512(cl + 16 * i), _mm512_slli_epi32(_mm512_load_si512(ch + 16 * i), 3));
  amx_q4k_finish(gp0, gp1, kr, A);
}

AI void amx_tile16_q4k(const uint8_t *w0, const uint8_t *w1, size_t gbb, const int8_t *st, const amx_q4k_row *kr,
                       const int8_t *xs, int64_t nb, float *Y, int64_t ldy) {
  _Alignas(64) int32_t c[2][2][16 * 16];
  amx_acc A;
  AMX_UNROLL for (int i = 0; i < 16; i++) A.s[i] = A.m[i] = _mm512_setzero_ps();
#define SUPER(b, cb) amx_q4k_super(w0 + (size_t)(b) * gbb, w1 + (size_t)(b) * gbb, kr + 16 * (b), (cb)[0], (cb)[1], &A)
  /* as amx_tile16: a super-block's sums are read back one multiply after their store */
  AMX_Q4K_MUL(0, 1, 0);
  for (int64_t b = 0; b < nb; b += 2) { /* C tiles 0, 1 hold super-block b on entry */
    if (b + 1 < nb) AMX_Q4K_MUL(2, 3, b + 1);
    _tile_stored(0, c[0][0], 64);
    _tile_stored(1, c[0][1], 64);
    if (b > 0) SUPER(b - 1, c[1]);
    if (b + 2 < nb) AMX_Q4K_MUL(0, 1, b + 2);
    if (b + 1 < nb) {
      _tile_stored(2, c[1][0], 64);
      _tile_stored(3, c[1][1], 64);
    }
    SUPER(b, c[0]);
  }
  if (nb % 2 == 0) SUPER(nb - 1, c[1]);
#undef SUPER
  AMX_UNROLL for (int i = 0; i < 16; i++) _mm512_storeu_ps(Y + i * ldy, _mm512_add_ps(A.s[i], A.m[i]));
}
#undef AMX_Q4K_MUL

/* Q6_K, per super-block: C tile i sums its 4 steps' products with the
 * quants times digit i of the group scales (amx_stage), so C0 + 5 (C1 + 5 (C2
 * + 5 C3)) is sum_g sc_g * dot_g(q - 32), the integers of q6k_block (|C_i| <=
 * 256 * 64 * 127: exact), and no per-group multiply is left to the vector
 * unit (16 vpmulld per group would bound this path).
 * Tile 5 serves as a third B tile. */
#define AMX_Q6K_MUL(b)                                                                         \
  do {                                                                                         \
    _tile_zero(0);                                                                             \
    _tile_zero(1);                                                                             \
    _tile_zero(2);                                                                             \
    _tile_zero(3);                                                                             \
    for (int p_ = 0; p_ < 4; p_++) {                                                           \
      const size_t k_ = (size_t)(4 * (b) + p_);                                                \
      const int8_t *s_ = st + k_ * 4 * AMX_K_TILE_BYTES;                                       \
      _tile_loadd(4, xs + k_ * 16 * 64, 64);                                                   \
      _tile_loadd(5, s_, 64);                                                                  \
      _tile_loadd(6, s_ + AMX_K_TILE_BYTES, 64);                                               \
      _tile_loadd(7, s_ + 2 * AMX_K_TILE_BYTES, 64);                                           \
      _tile_dpbssd(0, 4, 5);                                                                   \
      _tile_dpbssd(1, 4, 6);                                                                   \
      _tile_dpbssd(2, 4, 7);                                                                   \
      _tile_loadd(5, s_ + 3 * AMX_K_TILE_BYTES, 64);                                           \
      _tile_dpbssd(3, 4, 5);                                                                   \
    }                                                                                          \
  } while (0)

AI void amx_tile16_q6k(const uint8_t *w0, const uint8_t *w1, size_t gbb, const int8_t *st, const uint8_t *x,
                       size_t xrow, const int8_t *xs, int64_t nb, float *Y, int64_t ldy) {
  _Alignas(64) int32_t c[4][16 * 16];
  __m512 acc[16];
  AMX_UNROLL for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
  AMX_Q6K_MUL(0);
  for (int64_t b = 0; b < nb; b++) {
    _tile_stored(0, c[0], 64);
    _tile_stored(1, c[1], 64);
    _tile_stored(2, c[2], 64);
    _tile_stored(3, c[3], 64);
    if (b + 1 < nb) AMX_Q6K_MUL(b + 1); /* runs on while super-block b is finished */
    const uint8_t *gp0 = w0 + (size_t)b * gbb, *gp1 = w1 + (size_t)b * gbb;
    const __m512 dw = join_ph(gp0, gp1);
    AMX_UNROLL for (int i = 0; i < 16; i++) {
      __m512i v = _mm512_load_si512(c[3] + 16 * i);
      for (int j = 2; j >= 0; j--)
        v = _mm512_add_epi32(_mm512_load_si512(c[j] + 16 * i), _mm512_add_epi32(v, _mm512_slli_epi32(v, 2)));
      const di_act_q8k *a = (const di_act_q8k *)(x + (size_t)i * xrow) + b;
      acc[i] = _mm512_fmadd_ps(cvt16(v), _mm512_mul_ps(dw, _mm512_set1_ps(a->d)), acc[i]);
    }
  }
  /* + 0, as the K-quants' s + m (Q6_K has no mins) */
  AMX_UNROLL for (int i = 0; i < 16; i++) _mm512_storeu_ps(Y + i * ldy, _mm512_add_ps(acc[i], _mm512_setzero_ps()));
}
#undef AMX_Q6K_MUL

/* Q5_K, per super-block: C tiles 0-2 sum its 4 steps' products with the
 * quants times the scale digits (amx_stage), so C0 + 4 (C1 + 4 C2) is
 * q5k_block's sum_s sc_s * dot_s, then Q4_K's finish (amx_q4k_finish). */
#define AMX_Q5K_MUL(b)                                                                         \
  do {                                                                                         \
    _tile_zero(0);                                                                             \
    _tile_zero(1);                                                                             \
    _tile_zero(2);                                                                             \
    for (int p_ = 0; p_ < 4; p_++) {                                                           \
      const size_t k_ = (size_t)(4 * (b) + p_);                                                \
      const int8_t *s_ = st + k_ * 3 * AMX_K_TILE_BYTES;                                       \
      _tile_loadd(4, xs + k_ * 16 * 64, 64);                                                   \
      _tile_loadd(5, s_, 64);                                                                  \
      _tile_loadd(6, s_ + AMX_K_TILE_BYTES, 64);                                               \
      _tile_loadd(7, s_ + 2 * AMX_K_TILE_BYTES, 64);                                           \
      _tile_dpbssd(0, 4, 5);                                                                   \
      _tile_dpbssd(1, 4, 6);                                                                   \
      _tile_dpbssd(2, 4, 7);                                                                   \
    }                                                                                          \
  } while (0)

AI void amx_tile16_q5k(const uint8_t *w0, const uint8_t *w1, size_t gbb, const int8_t *st, const amx_q4k_row *kr,
                       const int8_t *xs, int64_t nb, float *Y, int64_t ldy) {
  _Alignas(64) int32_t c[3][16 * 16];
  amx_acc A;
  AMX_UNROLL for (int i = 0; i < 16; i++) A.s[i] = A.m[i] = _mm512_setzero_ps();
  AMX_Q5K_MUL(0);
  for (int64_t b = 0; b < nb; b++) {
    _tile_stored(0, c[0], 64);
    _tile_stored(1, c[1], 64);
    _tile_stored(2, c[2], 64);
    if (b + 1 < nb) AMX_Q5K_MUL(b + 1); /* runs on while super-block b is finished */
    const uint8_t *gp0 = w0 + (size_t)b * gbb, *gp1 = w1 + (size_t)b * gbb;
    const q4k_sc d0 = q4k_decode(gp0), d1 = q4k_decode(gp1);
    for (int j = 0; j < 4; j++) {
      __m256i ctl = sc_ctl(2 * (j % 2), 2 * (j % 2) + 1, false);
      A.mn[j] = join_i(_mm256_shuffle_epi8(d0.mn[j / 2], ctl), _mm256_shuffle_epi8(d1.mn[j / 2], ctl));
    }
    AMX_UNROLL for (int i = 0; i < 16; i++) {
      __m512i v = _mm512_load_si512(c[2] + 16 * i);
      v = _mm512_add_epi32(_mm512_load_si512(c[1] + 16 * i), _mm512_slli_epi32(v, 2));
      A.isum[i] = _mm512_add_epi32(_mm512_load_si512(c[0] + 16 * i), _mm512_slli_epi32(v, 2));
    }
    amx_q4k_finish(gp0, gp1, kr + 16 * b, &A);
  }
  AMX_UNROLL for (int i = 0; i < 16; i++) _mm512_storeu_ps(Y + i * ldy, _mm512_add_ps(A.s[i], A.m[i]));
}
#undef AMX_Q5K_MUL

/* One 16-row chunk (batched decode, Q4_0/Q4_1/Q5_0/Q8_0) over the group pairs
 * at w: the weights are used once, so staging a whole panel before any tile
 * multiply buys no reuse, and the staging pass's loads from memory would then
 * run by themselves. Here pair p + 1 is staged (into the other of two slots)
 * while pair p multiplies. Staging a pair is more uops than the reorder buffer
 * holds, so its loads from memory would stall the core unless issued earlier:
 * pair p + 1's lines are prefetched inside pair p - 1's block loop, spread over
 * its steps (a burst of prefetches at staging time arrives too late). */
AI void amx_pipe16(di_dtype t, const uint8_t *w, size_t wrow, int64_t pairs, int64_t nb, int8_t *stage,
                   size_t pair_bytes, const int8_t *xs, size_t xs_bytes, const uint8_t *x, size_t xrow, float *Y,
                   int64_t ldy) {
  const size_t gbb = DI_PK_G * di_pk_block_bytes(t), head = DI_PK_G * di_pk_head_bytes(t), pb = 2 * DI_PK_G * wrow;
  const float *ds = (const float *)(xs + xs_bytes), *ss = ds + nb * 16;
  for (int64_t p = 0; p <= pairs; p++) {
    if (p < pairs) {
      const uint8_t *w0 = w + (size_t)p * pb, *w1 = w0 + DI_PK_G * wrow;
      int8_t *sp = stage + (size_t)(p & 1) * pair_bytes;
      for (int64_t b = 0; b < nb; b++)
        amx_stage(t, w0 + (size_t)b * gbb, w1 + (size_t)b * gbb, head, sp + (size_t)b * AMX_BLOCK_BYTES);
    }
    if (p > 0) {
      const uint8_t *w0 = w + (size_t)(p - 1) * pb;
      /* pair p + 1, staged next, is prefetched while pair p - 1 multiplies */
      const uint8_t *f0 = p + 1 < pairs ? w + (size_t)(p + 1) * pb : NULL, *f1 = f0 ? f0 + DI_PK_G * wrow : NULL;
      amx_tile16(t, w0, w0 + DI_PK_G * wrow, gbb, stage + (size_t)((p - 1) & 1) * pair_bytes, x, xrow, ds, ss, xs,
                 nb, Y + (p - 1) * 2 * DI_PK_G, ldy, f0, f1);
    }
  }
}

AI void amx_mm(di_dtype t, di_cpu_mmp_rest_fn rest, const void *W, size_t wrow, int64_t N, const void *X,
               size_t xrow, int64_t M, int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1) {
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
  const size_t chunk_bytes = xs_bytes + (size_t)nb * amx_rows_extra(t);
  /* Q6_K stages four digit tiles per step: for a single 16-row chunk that
   * staging outweighs the tile work, and the VNNI kernel is faster. */
  const bool few = t == DI_Q6_K && M16 < 32;
  const size_t stage_bytes = (size_t)ppp * pair_bytes + (size_t)(M16 / 16) * chunk_bytes;
  int8_t *stage = g_amx && M16 && pairs && !few ? (int8_t *)di_cpu_scratch(DI_SCRATCH_AMX, stage_bytes) : NULL;
  if (!stage) {
    rest(t, W, wrow, N, X, xrow, M, K, Y, ldy, n0, n1);
    return;
  }
  const uint8_t *w = W, *x = X;
  const size_t gbb = DI_PK_G * di_pk_block_bytes(t), head = DI_PK_G * di_pk_head_bytes(t);
  amx_cfg cfg = {.palette = 1};
  const int quads = amx_quads(t);
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
  const bool piped = M16 == 16 && ppp >= 2 && q32;
  if (piped)
    amx_pipe16(t, w + (size_t)ga * DI_PK_G * wrow, wrow, pairs, nb, stage, pair_bytes, rows, xs_bytes, x, xrow,
               Y + ga * DI_PK_G, ldy);
  for (int64_t p0 = 0; !piped && p0 < pairs; p0 += ppp) {
    int64_t p1 = pairs - p0 < ppp ? pairs : p0 + ppp;
    for (int64_t p = p0; p < p1; p++) {
      const uint8_t *w0 = w + (size_t)(ga + 2 * p) * DI_PK_G * wrow, *w1 = w0 + DI_PK_G * wrow;
      int8_t *sp = stage + (size_t)(p - p0) * pair_bytes;
      for (int64_t b = 0; b < nb; b++)
        amx_stage(t, w0 + (size_t)b * gbb, w1 + (size_t)b * gbb, head, sp + (size_t)b * amx_steps(t) * amx_step_bytes(t));
    }
    for (int64_t m = 0; m < M16; m += 16) {
      const int8_t *xs = rows + (size_t)(m / 16) * chunk_bytes;
      const float *ds = (const float *)(xs + xs_bytes), *ss = ds + (q32 ? nb * 16 : 0);
      for (int64_t p = p0; p < p1; p++) {
        const uint8_t *w0 = w + (size_t)(ga + 2 * p) * DI_PK_G * wrow;
        const int8_t *sp = stage + (size_t)(p - p0) * pair_bytes;
        float *y = Y + m * ldy + (ga + 2 * p) * DI_PK_G;
        if (t == DI_Q4_K) amx_tile16_q4k(w0, w0 + DI_PK_G * wrow, gbb, sp, (const amx_q4k_row *)ds, xs, nb, y, ldy);
        else if (t == DI_Q5_K) amx_tile16_q5k(w0, w0 + DI_PK_G * wrow, gbb, sp, (const amx_q4k_row *)ds, xs, nb, y, ldy);
        else if (t == DI_Q6_K) amx_tile16_q6k(w0, w0 + DI_PK_G * wrow, gbb, sp, x + m * xrow, xrow, xs, nb, y, ldy);
        else amx_tile16(t, w0, w0 + DI_PK_G * wrow, gbb, sp, x + m * xrow, xrow, ds, ss, xs, nb, y, ldy, NULL, NULL);
      }
    }
  }
  _tile_release();
  const int64_t c0 = ga * DI_PK_G, c1 = (ga + 2 * pairs) * DI_PK_G;
  if (n0 < c0) rest(t, W, wrow, N, X, xrow, M16, K, Y, ldy, n0, c0);
  if (c1 < n1) rest(t, W, wrow, N, X, xrow, M16, K, Y, ldy, c1, n1);
  if (M16 < M) rest(t, W, wrow, N, x + M16 * xrow, xrow, M - M16, K, Y + M16 * ldy, ldy, n0, n1);
}

/* One function per type, so each is compiled with its type constant (the
 * staging and the finish branch on it per block). */
#define AMX_WRAP(NAME, T)                                                                                      \
  static void amx_##NAME(di_cpu_mmp_rest_fn rest, const void *W, size_t wrow, int64_t N, const void *X,        \
                         size_t xrow, int64_t M, int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1) {   \
    amx_mm(T, rest, W, wrow, N, X, xrow, M, K, Y, ldy, n0, n1);                                                \
  }
AMX_WRAP(q4_0, DI_Q4_0)
AMX_WRAP(q4_1, DI_Q4_1)
AMX_WRAP(q5_0, DI_Q5_0)
AMX_WRAP(q5_1, DI_Q5_1)
AMX_WRAP(q8_0, DI_Q8_0)
AMX_WRAP(q4_K, DI_Q4_K)
AMX_WRAP(q5_K, DI_Q5_K)
AMX_WRAP(q6_K, DI_Q6_K)
#undef AMX_WRAP

void di_cpu_mmp_amx(di_dtype t, di_cpu_mmp_rest_fn rest, const void *W, size_t wrow, int64_t N, const void *X,
                    size_t xrow, int64_t M, int64_t K, float *Y, int64_t ldy, int64_t n0, int64_t n1) {
  switch (t) {
  case DI_Q4_0: amx_q4_0(rest, W, wrow, N, X, xrow, M, K, Y, ldy, n0, n1); break;
  case DI_Q4_1: amx_q4_1(rest, W, wrow, N, X, xrow, M, K, Y, ldy, n0, n1); break;
  case DI_Q5_0: amx_q5_0(rest, W, wrow, N, X, xrow, M, K, Y, ldy, n0, n1); break;
  case DI_Q5_1: amx_q5_1(rest, W, wrow, N, X, xrow, M, K, Y, ldy, n0, n1); break;
  case DI_Q8_0: amx_q8_0(rest, W, wrow, N, X, xrow, M, K, Y, ldy, n0, n1); break;
  case DI_Q4_K: amx_q4_K(rest, W, wrow, N, X, xrow, M, K, Y, ldy, n0, n1); break;
  case DI_Q5_K: amx_q5_K(rest, W, wrow, N, X, xrow, M, K, Y, ldy, n0, n1); break;
  case DI_Q6_K: amx_q6_K(rest, W, wrow, N, X, xrow, M, K, Y, ldy, n0, n1); break;
  default: rest(t, W, wrow, N, X, xrow, M, K, Y, ldy, n0, n1); break;
  }
}
