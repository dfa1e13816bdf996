/* Attention over the paged KV cache in tiles aligned to absolute positions
 * (0-63, 64-127, ...). Each (token, head, tile) yields a partial softmax
 * state; partials are merged in ascending tile order. The result of a token
 * therefore depends only on its query and the cached K/V — not on chunking,
 * batch composition or how tiles were spread over threads (row invariance). */
#ifndef DI_BACKEND_CPU_ATTN_H
#define DI_BACKEND_CPU_ATTN_H

#include <stdint.h>

#include "kv/pool.h"

#define DI_ATTN_TILE 64
#define DI_ATTN_MAX_TILES 8192 /* 512K positions */

typedef struct di_attn_partial {
  float m;   /* max score in the tile */
  float l;   /* sum of exp(score - m) */
  float pad_[14]; /* acc on its own cache lines: the tiles store it a vector at a time, and a store across two lines costs two */
  float acc[]; /* head_dim: sum of exp(score - m) * V */
} di_attn_partial;

static inline size_t di_attn_partial_bytes(int head_dim) {
  return sizeof(di_attn_partial) + (size_t)head_dim * sizeof(float);
}

/* Partial state over positions [lo, hi] (within one tile) of one query head. */
void di_cpu_attn_tile(const di_kv_pool *kv, int layer, const int32_t *blocks, int kvh, int head_dim, const float *q,
                      int lo, int hi, float scale, float softcap, di_attn_partial *out);
/* Merges n partials (in order) into out[head_dim]. */
void di_cpu_attn_merge(const di_attn_partial *const *parts, int n, int head_dim, float *out);
void di_cpu_attn_merge_avx2(const di_attn_partial *const *parts, int n, int head_dim, float *out);

/* The whole tile in SIMD (head_dim a multiple of 8): krow/vrow point at each
 * position's head slice. AVX2 exists in x86-64 builds, NEON in aarch64 builds;
 * both add in the same order and give the same bits. */
typedef void (*di_attn_tile_simd_fn)(const float *q, const uint8_t *const *krow, const uint8_t *const *vrow, int n,
                                     int hd, di_kv_dtype t, float scale, float softcap, di_attn_partial *out);
void di_cpu_attn_tile_avx2(const float *q, const uint8_t *const *krow, const uint8_t *const *vrow, int n, int hd,
                           di_kv_dtype t, float scale, float softcap, di_attn_partial *out);
/* The tile for nq queries that read the same K/V rows (the query heads of one
 * KV head under GQA, of one or several tokens): query i at q[i] over
 * positions [lo, qhi[i]] (qhi NULL: [lo, hi] for all; else hi = the largest
 * qhi[i]), result in out[i], each the bits of its own single-query tile. */
/* Up to MLA's latent rows (DeepSeek-V2/V3: kv_lora_rank 512 + rope 64), whose
 * 16+ query heads per token share every row: one f32 conversion of the tile
 * for all of them instead of one per head. */
#define DI_ATTN_GROUP_MAX_HD 576
/* Queries per group call: a prefill unit of up to this many queries converts
 * its tile's f16 K/V rows to f32 once (64 had left the conversion at ~10% of
 * the tile time on MHA prompts; 110M tile microbenchmark 64 -> 256: +8%). */
#define DI_ATTN_MAX_Q 256
void di_cpu_attn_tile_group(const di_kv_pool *kv, int layer, const int32_t *blocks, int kvh, int head_dim,
                            const float *const *q, int nq, int lo, int hi, const int *qhi, float scale, float softcap,
                            di_attn_partial *const *out);
/* The same over row pointers: query i over the first qn[i] of the n rows (qn
 * NULL: all n). */
void di_cpu_attn_tile_group_avx2(const float *const *q, int nq, const uint8_t *const *krow,
                                 const uint8_t *const *vrow, int n, const int *qn, int hd, di_kv_dtype t, float scale,
                                 float softcap, di_attn_partial *const *out);

/* The same for AVX-512 (attn_avx512.c): up to 16 queries per pass, each
 * query's result the bits of its AVX2 tile. */
void di_cpu_attn_tile_group_avx512(const float *const *q, int nq, const uint8_t *const *krow,
                                   const uint8_t *const *vrow, int n, const int *qn, int hd, di_kv_dtype t,
                                   float scale, float softcap, di_attn_partial *const *out);

/* softmax_exp.h over an array, 8 (AVX2) or 4 (NEON) lanes at a time (tests
 * compare them with the scalar di_softmax_exp bit for bit). */
void di_cpu_softmax_exp_avx2(const float *x, float *y, int n);
void di_cpu_softmax_exp_neon(const float *x, float *y, int n);
void di_cpu_attn_tile_neon(const float *q, const uint8_t *const *krow, const uint8_t *const *vrow, int n, int hd,
                           di_kv_dtype t, float scale, float softcap, di_attn_partial *out);

#endif
