/* AVX2 + FMA + F16C kernels.
 *
 * Each kernel computes a tile of MT activation rows x NT weight rows. Every
 * output (m,n) owns one accumulator chain that sees the weight blocks in K
 * order with the same instructions whatever the tile shape, and ends with the
 * same horizontal sum, so Y[m][n] does not depend on M, on n0..n1 or on which
 * tile it fell in (row invariance). Tiles only share loads: a weight block is
 * unpacked once for MT rows, an activation block loaded once for NT columns.
 * Integer dot products: _mm256_maddubs_epi16 (unsigned weight x signed
 * activation, exact: |pair sum| <= 2*63*127 < 2^15), then _mm256_madd_epi16. */
#include <immintrin.h>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/matmul_fl_x86.h"   /* F32/F16/BF16 pieces shared with matmul_avx512.c */
#include "backend/cpu/matmul_tiles.h" /* tile drivers shared with the NEON kernels */

AI __m256 fp16x1(di_fp16 h) { return _mm256_set1_ps(_cvtsh_ss(h)); }

/* ---------------- F32 / F16 / BF16 weights, f32 activations ---------------- */

AI void fl_tile(di_dtype t, int MT, int NT, const uint8_t *w, size_t wrow, const uint8_t *x,
                size_t xrow, int64_t nb, int64_t K, float *Y, int64_t ldy) {
  const int64_t es = t == DI_F32 ? 4 : 2;
  __m256 acc[MT_MAX][4];
  UNROLL for (int i = 0; i < MT; i++) UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    __m256 wv[4];
    UNROLL for (int j = 0; j < NT; j++) wv[j] = fl_load(t, w + j * wrow + b * 8 * es);
    gemv_prefetch(w + b * NT * 8 * es, NT * 8 * es, GEMV_PF_L1); /* every row tile, as the AVX-512 fl_tile */
    UNROLL for (int i = 0; i < MT; i++) {
      __m256 xv = _mm256_loadu_ps((const float *)(x + i * xrow) + b * 8);
      UNROLL for (int j = 0; j < NT; j++) acc[i][j] = _mm256_fmadd_ps(wv[j], xv, acc[i][j]);
    }
  }
  UNROLL for (int i = 0; i < MT; i++) UNROLL for (int j = 0; j < NT; j++)
    Y[i * ldy + j] = fl_finish(t, acc[i][j], w + j * wrow, (const float *)(x + i * xrow), nb, K);
}
#ifndef FL_NT_GEMV
#define FL_NT_GEMV 4
#endif
DEFINE_DRIVER(fl, FL_NT_GEMV, 3)

/* ---------------- 32-element blocks with Q8 activations ---------------- */

#define q32_QK 32

typedef struct {
  __m256i q;  /* 32 weights as bytes: unsigned (Q4_1/Q5_1), or |q| of signed ones */
  __m256i sq; /* signed types (Q4_0/Q5_0/Q8_0): q itself, to sign the activations */
  __m256 d;   /* weight scale, broadcast */
  float m;    /* Q4_1/Q5_1 min */
} q32_w;

/* Low nibbles of 16 bytes to bytes 0-15, high nibbles to 16-31: one broadcast load,
 * one variable shift (0 for the low half, 4 for the high), one mask. */
AI __m256i nibbles16(const uint8_t *qs) {
  __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
  v = _mm256_srlv_epi64(v, _mm256_set_epi64x(4, 4, 0, 0));
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* 0xff in byte i where bit i of the 32-bit qh is set, else 0. */
AI __m256i bit_mask32(const uint8_t *qh) {
  uint32_t h;
  memcpy(&h, qh, 4);
  __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                  _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                    0x0101010101010101, 0x0000000000000000));
  const __m256i bm = _mm256_set1_epi64x((long long)0x8040201008040201ull);
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, bm), bm);
}

AI bool q32_signed(di_dtype t) { return t == DI_Q4_0 || t == DI_Q5_0 || t == DI_Q8_0; }

/* Q4_0/Q5_0 take their offset in the bytes (q - 8; q - 16 as nibble | 0xf0 where the
 * fifth bit is clear) and Q8_0 is signed: all three then multiply |q| by sign(q) * x,
 * so each int32 lane holds sum (q - off) * x over its 4 elements exactly as in ggml,
 * and the float accumulation sees the same lane values. */
AI void q32_load(di_dtype t, const uint8_t *p, q32_w *w) {
  di_fp16 d, m;
  memcpy(&d, p, 2);
  w->d = fp16x1(d);
  w->m = 0;
  switch (t) {
  case DI_Q4_0: w->q = _mm256_sub_epi8(nibbles16(p + 2), _mm256_set1_epi8(8)); break;
  case DI_Q4_1: w->q = nibbles16(p + 4); break;
  case DI_Q5_0:
    w->q = _mm256_or_si256(nibbles16(p + 6), _mm256_andnot_si256(bit_mask32(p + 2), _mm256_set1_epi8((char)0xf0)));
    break;
  case DI_Q5_1:
    w->q = _mm256_or_si256(nibbles16(p + 8), _mm256_and_si256(bit_mask32(p + 4), _mm256_set1_epi8(0x10)));
    break;
  default: w->q = _mm256_loadu_si256((const __m256i *)(p + 2)); break; /* Q8_0 */
  }
  if (q32_signed(t)) {
    w->sq = w->q;
    w->q = _mm256_abs_epi8(w->q);
  }
  if (t == DI_Q4_1 || t == DI_Q5_1) {
    memcpy(&m, p + 2, 2);
    w->m = _cvtsh_ss(m);
  }
}

typedef struct { __m256 v; float m; } q32_acc;

AI void q32_step(di_dtype t, const q32_w *w, const di_act_q8 *a, q32_acc *acc) {
  __m256i xv = _mm256_loadu_si256((const __m256i *)a->qs);
  if (q32_signed(t)) xv = _mm256_sign_epi8(xv, w->sq);
  __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(w->q, xv), _mm256_set1_epi16(1));
  __m256 dd = _mm256_mul_ps(w->d, _mm256_broadcast_ss(&a->d));
  acc->v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), dd, acc->v);
  if (t == DI_Q4_1 || t == DI_Q5_1) acc->m += w->m * a->s;
}

AI size_t block_bytes(di_dtype t) {
  switch (t) {
  case DI_Q4_0: return sizeof(di_block_q4_0);
  case DI_Q4_1: return sizeof(di_block_q4_1);
  case DI_Q5_0: return sizeof(di_block_q5_0);
  case DI_Q5_1: return sizeof(di_block_q5_1);
  case DI_Q8_0: return sizeof(di_block_q8_0);
  case DI_Q4_K: return sizeof(di_block_q4_K);
  case DI_Q5_K: return sizeof(di_block_q5_K);
  default: return sizeof(di_block_q6_K);
  }
}

AI void q32_tile(di_dtype t, int MT, int NT, const uint8_t *w, size_t wrow, const uint8_t *x,
                 size_t xrow, int64_t nb, int64_t K, float *Y, int64_t ldy) {
  const size_t bb = block_bytes(t);
  q32_acc acc[MT_MAX][4];
  UNROLL for (int i = 0; i < MT; i++) UNROLL for (int j = 0; j < NT; j++) {
    acc[i][j].v = _mm256_setzero_ps();
    acc[i][j].m = 0;
  }
  for (int64_t b = 0; b < nb; b++) {
    q32_w wv[4];
    UNROLL for (int j = 0; j < NT; j++) q32_load(t, w + j * wrow + b * bb, &wv[j]);
    if (MT == 1) gemv_prefetch(w + b * NT * bb, NT * bb, GEMV_PF_L1);
    UNROLL for (int i = 0; i < MT; i++) {
      const di_act_q8 *a = (const di_act_q8 *)(x + i * xrow) + b;
      UNROLL for (int j = 0; j < NT; j++) q32_step(t, &wv[j], a, &acc[i][j]);
    }
  }
  UNROLL for (int i = 0; i < MT; i++) UNROLL for (int j = 0; j < NT; j++)
    Y[i * ldy + j] = hsum8(acc[i][j].v) + acc[i][j].m;
}
#ifndef Q32_NT_GEMV
#define Q32_NT_GEMV 2
#endif
DEFINE_DRIVER(q32, Q32_NT_GEMV, 2)

/* ---------------- K-quants (256-element super-blocks) with Q8_K activations ----------------
 * Per super-block and (m,n): isum = sum over 32-element chunks of
 * madd(maddubs(q, x), scale), imin = madd(bsums, mins) in int32 lanes, then two
 * fused multiply-adds into the chain. An unpacked super-block is 8 registers,
 * so it is unpacked chunk by chunk and reused across MT rows; GEMV takes one
 * column at a time, GEMM tiles two (Q5_K/Q6_K GEMM +7%). */

#define qk_QK 256
#ifndef QK_NT_GEMV
#define QK_NT_GEMV 1
#endif

typedef struct {
  const uint8_t *p;
  __m256 d, dmin;
  __m128i mins; /* Q4_K/Q5_K: the 8 mins as int16 */
  __m128i sc8;  /* Q6_K: the 16 int8 scales */
  int16_t sc[8];
} qk_w;

AI void qk_load(di_dtype t, const uint8_t *p, qk_w *w) {
  w->p = p;
  if (t == DI_Q6_K) {
    di_fp16 d;
    memcpy(&d, p + 208, 2);
    w->d = fp16x1(d);
    w->sc8 = _mm_loadu_si128((const __m128i *)(p + 192));
    return;
  }
  di_fp16 d, dmin;
  memcpy(&d, p, 2);
  memcpy(&dmin, p + 2, 2);
  w->d = fp16x1(d);
  w->dmin = fp16x1(dmin);
  /* 6-bit scales/mins: bytes 0-3 hold sc0-3 (+ top bits of sc4-7), 4-7 m0-3 (+ top of m4-7),
   * 8-11 the low nibbles of sc4-7 and m4-7. */
  uint32_t a, b, c;
  memcpy(&a, p + 4, 4);
  memcpy(&b, p + 8, 4);
  memcpy(&c, p + 12, 4);
  uint32_t sc_lo = a & 0x3f3f3f3f, m_lo = b & 0x3f3f3f3f;
  uint32_t sc_hi = (c & 0x0f0f0f0f) | ((a >> 2) & 0x30303030);
  uint32_t m_hi = ((c >> 4) & 0x0f0f0f0f) | ((b >> 2) & 0x30303030);
  uint8_t sc[8], mn[8];
  memcpy(sc, &sc_lo, 4);
  memcpy(sc + 4, &sc_hi, 4);
  memcpy(mn, &m_lo, 4);
  memcpy(mn + 4, &m_hi, 4);
  for (int j = 0; j < 8; j++) w->sc[j] = sc[j];
  w->mins = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)mn));
}

/* Chunk c (0..7) of 32 unsigned weights. */
AI __m256i qk_chunk(di_dtype t, const qk_w *w, int c) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  if (t == DI_Q6_K) {
    int half = c / 4, r = c % 4;
    __m256i l = _mm256_loadu_si256((const __m256i *)(w->p + 64 * half + 32 * (r & 1)));
    __m256i h = _mm256_loadu_si256((const __m256i *)(w->p + 128 + 32 * half));
    l = r < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
    /* bits 2r, 2r+1 of qh to bits 4, 5 */
    h = r == 0 ? _mm256_slli_epi16(h, 4) : r == 1 ? _mm256_slli_epi16(h, 2) : r == 2 ? h : _mm256_srli_epi16(h, 2);
    return _mm256_or_si256(l, _mm256_and_si256(h, _mm256_set1_epi8(0x30)));
  }
  const uint8_t *qs = w->p + (t == DI_Q5_K ? 48 : 16);
  __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * (c / 2)));
  q = c & 1 ? _mm256_and_si256(_mm256_srli_epi16(q, 4), m4) : _mm256_and_si256(q, m4);
  if (t == DI_Q5_K) {
    __m256i h = _mm256_loadu_si256((const __m256i *)(w->p + 16));
    h = c <= 4 ? _mm256_slli_epi16(h, 4 - c) : _mm256_srli_epi16(h, c - 4); /* bit c -> bit 4 */
    q = _mm256_or_si256(q, _mm256_and_si256(h, _mm256_set1_epi8(0x10)));
  }
  return q;
}

/* int16 multipliers for chunk c's 16 maddubs lanes. */
AI __m256i qk_scale(di_dtype t, const qk_w *w, int c) {
  if (t == DI_Q6_K) {
    /* lanes 0-7 cover group 2c, lanes 8-15 group 2c+1 */
    __m128i ctl = _mm_set_epi8(2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1,
                               2 * c + 1, 2 * c + 1, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c);
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(w->sc8, ctl));
  }
  return _mm256_set1_epi16(w->sc[c]);
}

AI float hsum4(__m128 v) {
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

/* Chunk c of every column's super-block against MT activation rows. */
AI void qk_chunk_rows(di_dtype t, int MT, int NT, const qk_w *wv, int c, const uint8_t *x, size_t xrow, int64_t b,
                      __m256i isum[][2]) {
  UNROLL for (int j = 0; j < NT; j++) {
    __m256i q = qk_chunk(t, &wv[j], c), s = qk_scale(t, &wv[j], c);
    UNROLL for (int i = 0; i < MT; i++) {
      const di_act_q8k *a = (const di_act_q8k *)(x + i * xrow) + b;
      __m256i xv = _mm256_loadu_si256((const __m256i *)(a->qs + 32 * c));
      __m256i p = _mm256_maddubs_epi16(q, xv);
      if (t == DI_Q6_K) p = _mm256_sub_epi16(p, _mm256_maddubs_epi16(_mm256_set1_epi8(32), xv));
      isum[i][j] = _mm256_add_epi32(isum[i][j], _mm256_madd_epi16(p, s));
    }
  }
}

/* Per super-block, as ggml: isum lanes = sum over chunks of scale * (4-element dot);
 * Q6_K subtracts 32 * (4-element sum of x) inside each lane before scaling, so the
 * lanes equal ggml's. The mins (Q4_K/Q5_K): 4 int32 lanes of min * (pairwise bsums
 * of 32 elements); Q4_K accumulates them in 4 float lanes, Q5_K sums them as one
 * integer into a scalar; both use (-d_a * dmin) and join the main sum at the end. */
AI void qk_tile(di_dtype t, int MT, int NT, const uint8_t *w, size_t wrow, const uint8_t *x,
                size_t xrow, int64_t nb, int64_t K, float *Y, int64_t ldy) {
  const size_t bb = block_bytes(t);
  __m256 acc[MT_MAX][2];
  __m128 accm[MT_MAX][2];
  float summ[MT_MAX][2];
  UNROLL for (int i = 0; i < MT; i++) UNROLL for (int j = 0; j < NT; j++) {
    acc[i][j] = _mm256_setzero_ps();
    accm[i][j] = _mm_setzero_ps();
    summ[i][j] = 0;
  }
  for (int64_t b = 0; b < nb; b++) {
    qk_w wv[2];
    UNROLL for (int j = 0; j < NT; j++) qk_load(t, w + j * wrow + b * bb, &wv[j]);
    if (MT == 1) gemv_prefetch(w + b * NT * bb, NT * bb, GEMV_PF_L1);
    __m256i isum[MT_MAX][2];
    UNROLL for (int i = 0; i < MT; i++) UNROLL for (int j = 0; j < NT; j++) isum[i][j] = _mm256_setzero_si256();
    if (t == DI_Q4_K && MT > 1) { /* fully unrolled, multi-row Q4_K tiles spill (GEMM 86 -> 93 GOP/s) */
      _Pragma("GCC unroll 2") for (int c = 0; c < 8; c++) qk_chunk_rows(t, MT, NT, wv, c, x, xrow, b, isum);
    } else {
      UNROLL for (int c = 0; c < 8; c++) qk_chunk_rows(t, MT, NT, wv, c, x, xrow, b, isum);
    }
    UNROLL for (int i = 0; i < MT; i++) {
      const di_act_q8k *a = (const di_act_q8k *)(x + i * xrow) + b;
      __m256 dx = _mm256_broadcast_ss(&a->d);
      __m128i q8s = _mm_setzero_si128();
      if (t != DI_Q6_K) {
        __m256i bs = _mm256_loadu_si256((const __m256i *)a->bsums);
        q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      }
      UNROLL for (int j = 0; j < NT; j++) {
        acc[i][j] = _mm256_fmadd_ps(_mm256_mul_ps(dx, wv[j].d), _mm256_cvtepi32_ps(isum[i][j]), acc[i][j]);
        if (t == DI_Q6_K) continue;
        __m128i prod = _mm_madd_epi16(wv[j].mins, q8s);
        float dmin = -a->d * _mm256_cvtss_f32(wv[j].dmin);
        if (t == DI_Q4_K) {
          accm[i][j] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), accm[i][j]);
        } else {
          prod = _mm_add_epi32(prod, _mm_shuffle_epi32(prod, 0x4e));
          prod = _mm_add_epi32(prod, _mm_shuffle_epi32(prod, 0xb1));
          summ[i][j] += dmin * (float)_mm_cvtsi128_si32(prod);
        }
      }
    }
  }
  UNROLL for (int i = 0; i < MT; i++) UNROLL for (int j = 0; j < NT; j++)
    Y[i * ldy + j] = hsum8(acc[i][j]) + (t == DI_Q4_K ? hsum4(accm[i][j]) : summ[i][j]);
}
DEFINE_DRIVER(qk, QK_NT_GEMV, 2)

/* ---------------- dispatch ---------------- */

DEFINE_WRAP(mm_f32, fl, DI_F32)
DEFINE_WRAP(mm_f16, fl, DI_F16)
DEFINE_WRAP(mm_bf16, fl, DI_BF16)
DEFINE_WRAP(mm_q4_0, q32, DI_Q4_0)
DEFINE_WRAP(mm_q4_1, q32, DI_Q4_1)
DEFINE_WRAP(mm_q5_0, q32, DI_Q5_0)
DEFINE_WRAP(mm_q5_1, q32, DI_Q5_1)
DEFINE_WRAP(mm_q8_0, q32, DI_Q8_0)
DEFINE_WRAP(mm_q4_K, qk, DI_Q4_K)
DEFINE_WRAP(mm_q5_K, qk, DI_Q5_K)
DEFINE_WRAP(mm_q6_K, qk, DI_Q6_K)

di_cpu_mm_fn di_cpu_mm_avx2(di_dtype t) {
  switch (t) {
  case DI_F32: return mm_f32;
  case DI_F16: return mm_f16;
  case DI_BF16: return mm_bf16;
  case DI_Q4_0: return mm_q4_0;
  case DI_Q4_1: return mm_q4_1;
  case DI_Q5_0: return mm_q5_0;
  case DI_Q5_1: return mm_q5_1;
  case DI_Q8_0: return mm_q8_0;
  case DI_Q4_K: return mm_q4_K;
  case DI_Q5_K: return mm_q5_K;
  case DI_Q6_K: return mm_q6_K;
  default: return NULL;
  }
}

/* ---------------- activation quantizers ----------------
 * Bit-identical to the scalar ones in quant.c (ggml's): same max, same scale
 * expressions, round-half-even of the same products. */

/* 32 floats times sc, rounded (clamped to 127 for Q8_K), as 32 int8 in order;
 * part[0] and part[1] get int32 lanes summing to the first and second 16 elements. */
AI __m256i act_q32(const float *x, __m256 sc, bool clamp, __m256i *part) {
  __m256i q[4];
  UNROLL for (int i = 0; i < 4; i++) {
    q[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), sc),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (clamp) q[i] = _mm256_min_epi32(q[i], _mm256_set1_epi32(127));
  }
  part[0] = _mm256_add_epi32(q[0], q[1]);
  part[1] = _mm256_add_epi32(q[2], q[3]);
  /* packs work within 128-bit lanes; the permute restores element order */
  __m256i a = _mm256_packs_epi32(q[0], q[1]), b = _mm256_packs_epi32(q[2], q[3]);
  __m256i c = _mm256_packs_epi16(a, b);
  return _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

AI float absmax(const float *x, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

AI int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

static void actq_q8(const float *x, void *yv, int64_t k) {
  di_act_q8 *y = yv;
  for (int64_t i = 0; i < k / 32; i++, x += 32) {
    float amax = absmax(x, 32), d = amax / 127.0f, id = amax != 0 ? 127.0f / amax : 0.0f;
    __m256i part[2];
    _mm256_storeu_si256((__m256i *)y[i].qs, act_q32(x, _mm256_set1_ps(id), false, part));
    int32_t sum = hsum_i32(_mm256_add_epi32(part[0], part[1]));
    y[i].d = di_cpu_fp16_round(d);
    y[i].s = di_cpu_fp16_round(d * (float)sum);
    y[i].sum = sum;
  }
}

/* The first element whose magnitude is amax (the scalar scan's strict > keeps the first). */
AI float first_at_absmax(const float *x, int n, float amax) {
  const __m256 sign = _mm256_set1_ps(-0.0f), a = _mm256_set1_ps(amax);
  for (int i = 0; i < n; i += 8) {
    int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), a, _CMP_EQ_OQ));
    if (m) return x[i + __builtin_ctz((unsigned)m)];
  }
  return 0;
}

static void actq_q8k(const float *x, void *yv, int64_t k) {
  di_act_q8k *y = yv;
  for (int64_t i = 0; i < k / 256; i++, x += 256) {
    float amax = absmax(x, 256);
    if (amax == 0) {
      memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    float iscale = -127.0f / first_at_absmax(x, 256, amax);
    __m256 sc = _mm256_set1_ps(iscale);
    for (int c = 0; c < 8; c++) {
      __m256i part[2];
      _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * c), act_q32(x + 32 * c, sc, true, part));
      y[i].bsums[2 * c] = (int16_t)hsum_i32(part[0]);
      y[i].bsums[2 * c + 1] = (int16_t)hsum_i32(part[1]);
    }
    y[i].d = 1.0f / iscale;
  }
}

di_cpu_actq_fn di_cpu_actq_avx2(di_cpu_act_kind kind) {
  switch (kind) {
  case DI_ACT_Q8: return actq_q8;
  case DI_ACT_Q8K: return actq_q8k;
  default: return NULL;
  }
}
