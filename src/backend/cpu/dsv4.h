/* The CPU kernels of DeepSeek-V4's own ops (dsv4.c): mHC's stream maps, the
 * compressor's gated pooling, the Lightning Indexer's scores and top-k, and
 * attention over a list of latent rows with a learned sink; each as the
 * di_backend entry of the same name (backend/backend.h). */
#ifndef DI_BACKEND_CPU_DSV4_H
#define DI_BACKEND_CPU_DSV4_H

#include <stdint.h>

#include "model/model.h"

void di_cpu_rms_norm_unit(const float *x, float *y, int n, float eps);
void di_cpu_hc_norm(const float *x, float *y, int n, float eps);
void di_cpu_rope_inv(float *head, const float *cs, int rope_dim, di_rope_type type);
void di_cpu_scale(float *x, int n, float s);
void di_cpu_hc_maps(const float *mix, const float *base, const float *scale, int N, int iters, float eps, float *pre,
                    float *post, float *comb);
void di_cpu_hc_collapse(const float *X, const float *pre, int N, int D, float *x);
void di_cpu_hc_expand(float *X, const float *o, const float *post, const float *comb, int N, int D);
void di_cpu_compress_pool(const float *const *kv, const float *const *gate, int n, int dim, float *work, float *out);
void di_cpu_indexer_scores(const float *q, const float *w, int heads, int dim, const float *const *keys, int n,
                           float qs, float ws, float *scores);
int di_cpu_topk(const float *scores, int n, int k, int32_t *sel, int32_t *work);
void di_cpu_attn_sink(const float *q, int nh, const float *const *keys, int nk, int hd, float scale,
                      const float *sinks, float *s, float *o);
void di_cpu_moe_route_v4(const di_hparams *hp, const float *logits, const float *sel_bias, const int32_t *hash_ids,
                         int32_t *ids, float *w);
int di_cpu_moe_bucket(const int32_t *sel, const float *selw, int T, int K, int e, int32_t *rows, float *w);

/* The fold of 16 (8) partial sums every version uses. */
static inline float di_cpu_lane_sum16(const float a[16]) {
  float b[8], c[4];
  for (int i = 0; i < 8; i++) b[i] = a[i] + a[i + 8];
  for (int i = 0; i < 4; i++) c[i] = b[i] + b[i + 4];
  return (c[0] + c[2]) + (c[1] + c[3]);
}
static inline double di_cpu_lane_sum8d(const double a[8]) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* The SIMD versions (dsv4_simd.h, built as dsv4_avx512.c and dsv4_avx2.c), the same bits. */
#define DI_CPU_INDEXER_MAX_HEADS 256
#define DI_DSV4_SIMD_DECL(sfx)                                                                                      \
  void di_cpu_rms_norm_unit_##sfx(const float *x, float *y, int n, float eps);                                      \
  void di_cpu_hc_norm_##sfx(const float *x, float *y, int n, float eps);                                            \
  void di_cpu_hc_collapse_##sfx(const float *X, const float *pre, int N, int D, float *x);                          \
  void di_cpu_hc_expand_##sfx(float *X, const float *o, const float *post, const float *comb, int N, int D);        \
  void di_cpu_compress_pool_##sfx(const float *const *kv, const float *const *gate, int n, int dim, float *work,     \
                                  float *out);                                                                      \
  void di_cpu_indexer_scores_##sfx(const float *q, const float *w, int heads, int dim, const float *const *keys,    \
                                   int n, float qs, float ws, float *scores);                                       \
  void di_cpu_attn_sink_##sfx(const float *q, int nh, const float *const *keys, int nk, int hd, float scale,      \
                              const float *sinks, float *s, float *o);
DI_DSV4_SIMD_DECL(avx512)
DI_DSV4_SIMD_DECL(avx2)

#endif
