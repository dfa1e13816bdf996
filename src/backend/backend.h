/* The backend seam: every op the op program (graph/) runs, and the step that
 * readies a loaded model's weights for them, as one table of functions. graph/
 * calls ops only through it and model/ knows nothing of any backend; whoever
 * owns a model and a backend (the engine, `deepinfer info`, tests) loads with
 * di_backend_load_model, which runs the backend's prepare_weights.
 *
 * The CPU backend (backend/cpu/backend_cpu.c) is the one implementation. A
 * call is one indirect call per op per layer (per row or head for the row
 * ops), never per element, so the seam costs nothing measurable.
 *
 * Contracts every implementation keeps (DESIGN section 1): each op reduces a
 * row in a fixed order whatever the batch around it (row invariance), and a
 * matmul over output columns [n0, n1) gives those columns the bits it gives
 * them in any other split (graph/ splits columns across threads). */
#ifndef DI_BACKEND_BACKEND_H
#define DI_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/batch.h"
#include "kv/pool.h"
#include "model/model.h"
#include "util/status.h"
#include "util/threadpool.h"

/* A backend's attention state for batches of up to max_tokens (scratch and
 * work lists); one per forward context. */
typedef struct di_attn_sched di_attn_sched;

typedef struct di_backend {
  const char *name;

  /* ---- weights ---- */
  /* The weight types its matmul runs. */
  bool (*dtype_supported)(di_dtype t);
  /* After di_model_load: puts the weights in the backend's own layout (CPU:
   * MLA's kv_b as per-head matrices (m->layers[].mla_k / mla_v) that matmul
   * runs, then the quantized matrices packed in place; mmapped: the file is
   * mapped, so packed pages become private). */
  di_code (*prepare_weights)(di_model *m, bool mmapped, di_status *st);
  /* Frees what prepare_weights made outside the model (CPU: nothing). */
  void (*free_weights)(di_model *m);

  /* ---- matmul: Y = X · Wᵀ over output columns [n0, n1) ---- */
  /* Activations are prepared once per input (quantized to the weight type's
   * partner format, or kept f32) and read by any number of matmuls whose
   * weight types share act_format. */
  size_t (*act_bytes)(di_dtype wtype, int64_t M, int64_t K);
  int (*act_format)(di_dtype wtype);
  void (*act_prepare)(di_dtype wtype, const float *X, int64_t M, int64_t K, void *xq);
  void (*matmul)(const di_tensor *w, const void *xq, int64_t M, float *Y, int64_t ldy, int64_t n0, int64_t n1);
  /* True when one thread per sequence (graph/forward.c's batch split) loses to
   * splitting columns (CPU: the packed GEMMs run on AMX tiles). */
  bool (*wide_gemm)(void);

  /* ---- gather / scatter ---- */
  /* Row `row` of a weight matrix as floats (embedding lookup; packed or not). */
  void (*get_row)(const di_tensor *w, int64_t row, float *dst);
  /* n elements of one row in file layout as floats (small side matrices). */
  void (*dequant_row)(di_dtype t, const void *src, float *dst, int64_t n);
  /* dst[r] = src[rows[r]] for n rows of D floats (MoE: an expert's tokens). */
  void (*gather_rows)(float *dst, const float *src, const int32_t *rows, int n, int D);
  /* acc[rows[r]] += w[r] * y[r] for n rows of D floats, r ascending. */
  void (*scatter_add)(float *acc, const float *y, const int32_t *rows, const float *w, int n, int D);

  /* ---- row ops ---- */
  /* y = x / rms(x) * w over n (y may alias x); _rows: rows of them, ldx / ldy apart. */
  void (*rms_norm)(const float *x, const float *w, float *y, int n, float eps);
  void (*rms_norm_rows)(const float *x, size_t ldx, const float *w, float *y, size_t ldy, int rows, int n,
                        float eps);
  /* Rotates the pairs of one head in place; cs holds (cos, sin) per pair. */
  void (*rope)(float *head, const float *cs, int rope_dim, di_rope_type type);
  /* cs[rope_dim]: (cos, sin) pairs for position pos (the model's scaling when scaled). */
  void (*rope_cache)(float *cs, int pos, int rope_dim, float base, const di_hparams *hp, bool scaled,
                     const float *freq_factors);
  /* g[i] = act(g[i]) * u[i] */
  void (*glu)(float *g, const float *u, int n, di_act act);
  /* DeepSeek-V4's clipped SwiGLU: g[i] = SiLU(min(g[i], limit)) * clamp(u[i], ±limit). */
  void (*glu_clip)(float *g, const float *u, size_t n, float limit);
  void (*add)(float *x, const float *y, int n);
  void (*softcap)(float *x, int n, float cap);
  /* n floats into the KV cache's element type at dst. */
  void (*kv_store)(void *dst, const float *src, int n, di_kv_dtype type);
  /* n values of the KV cache's element type at src into floats (exact: every f16 / bf16 is a float). */
  void (*kv_load)(float *dst, const void *src, int n, di_kv_dtype type);

  /* ---- attention ---- */
  di_attn_sched *(*attn_create)(int max_tokens);
  void (*attn_free)(di_attn_sched *s);
  /* att[t][head][head_dim] for every token t of b, from q[t][head][head_dim]
   * and the K/V of pool layer slot kv_layer in table kv_table of each sequence
   * (-1: seqs[].blocks, else seqs[].swa[kv_table]); swa: the layer's sliding
   * window. Heads, widths, softcap and scale come from hp (MLA passes a view:
   * one KV head as wide as its latent row). */
  di_code (*attn)(di_attn_sched *s, di_threadpool *tp, const di_hparams *hp, const di_kv_pool *kv,
                  const di_batch *b, int kv_table, int kv_layer, bool swa, const float *q, float *att,
                  di_status *st);

  /* ---- DeepSeek-V4 (backend/cpu/dsv4.c) ---- */
  /* y = x / rms(x) over n, no weight (y may alias x): the per-head query norm. */
  void (*rms_norm_unit)(const float *x, float *y, int n, float eps);
  /* The conjugate rotation of rope (undoes it at the same position). */
  void (*rope_inv)(float *head, const float *cs, int rope_dim, di_rope_type type);
  /* x[i] *= s (the embedding scale). */
  void (*scale)(float *x, int n, float s);
  /* mHC. hc_norm: rms_norm_unit over a token's N*D stream values (the sum of
   * squares in double). hc_maps: from the streams' mix [(2+N)*N] and the
   * site's base / scale[3], pre[N] = sigmoid(mix*scale0 + base) + eps, and
   * unless post is NULL (the hyper head) post[N] = 2 sigmoid(..scale1..) and
   * comb[N][N] = row softmax + eps, then `iters` Sinkhorn-Knopp rounds.
   * hc_collapse: x[D] = sum_j pre[j] X[j]. hc_expand: X[k] = post[k] o +
   * sum_j comb[j][k] X[j], j ascending. */
  void (*hc_norm)(const float *x, float *y, int n, float eps);
  void (*hc_maps)(const float *mix, const float *base, const float *scale, int N, int iters, float eps, float *pre,
                  float *post, float *comb);
  void (*hc_collapse)(const float *X, const float *pre, int N, int D, float *x);
  void (*hc_expand)(float *X, const float *o, const float *post, const float *comb, int N, int D);
  /* The compressor's pooling of n rows: per channel, softmax over the rows'
   * gate[r][ch] weighting kv[r][ch], rows in the given order; work: 2*dim floats. */
  void (*compress_pool)(const float *const *kv, const float *const *gate, int n, int dim, float *work, float *out);
  /* The Lightning Indexer: scores[e] = sum_h relu(q[h] . keys[e]) * qs * (w[h] * ws)
   * over `heads` query heads of `dim`. */
  void (*indexer_scores)(const float *q, const float *w, int heads, int dim, const float *const *keys, int n,
                         float qs, float ws, float *scores);
  /* The indices of the k best of scores[n] (higher first, ties to the lower
   * index) into sel, ascending; returns min(k, n). work: n ints. */
  int (*topk)(const float *scores, int n, int k, int32_t *sel, int32_t *work);
  /* nh query heads (q[nh][hd]) over the same nk latent rows (K = V): head
   * h's o[h][hd] = softmax over the scaled dot products and its sink logit
   * sinks[h] (which adds to the denominator only) of the rows; s: nh * nk
   * floats of scratch. Each head's bits do not depend on nh. */
  void (*attn_sink)(const float *q, int nh, const float *const *keys, int nk, int hd, float scale, const float *sinks,
                    float *s, float *o);
  /* V4's routing: scores (sigmoid or sqrtsoftplus) of the logits; ids[K] are
   * hash_ids when given (hash_moe), else the K best of score + sel_bias in
   * that order (ties to the lower expert); w: their scores normalized, times
   * routed_scaling_factor. */
  void (*moe_route_v4)(const di_hparams *hp, const float *logits, const float *sel_bias, const int32_t *hash_ids,
                       int32_t *ids, float *w);
  /* The tokens (ascending) of T that chose expert e among their K in sel[T][K],
   * into rows, with their weights from selw; returns how many. */
  int (*moe_bucket)(const int32_t *sel, const float *selw, int T, int K, int e, int32_t *rows, float *w);

  /* ---- routing ---- */
  /* From the router's logits[n_expert] (and the noaux_tc selection bias, or
   * NULL): ids[n_expert_used] ascending and their weights w (normalized if
   * norm_topk_prob, times routed_scaling_factor). */
  void (*moe_route)(const di_hparams *hp, const float *logits, const float *sel_bias, int32_t *ids, float *w);
} di_backend;

/* The CPU backend (the ISA is chosen once per process, backend/cpu/isa.h). */
const di_backend *di_backend_cpu(void);

/* di_model_load, then be->prepare_weights; the model remembers be
 * (m->backend), which graph/ runs it on. */
di_code di_backend_load_model(const di_backend *be, const char *path, const di_model_opts *o, di_model **out,
                              di_status *st);
/* be->free_weights, then di_model_free. */
void di_backend_free_model(di_model *m);

#endif
