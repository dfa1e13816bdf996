/* DeepSeek-V4's own ops on the CPU (dsv4.h). Each reduces in a fixed order
 * per token, whatever the batch or thread split (row invariance), and the
 * AVX-512 and AVX2 versions (dsv4_simd.h) repeat the scalar operations lane by lane:
 * a sum over a row runs in 16 interleaved partial sums (element i into lane
 * i % 16, by fmaf) folded by lane_sum16, exponentials are softmax_exp.h's, so
 * every ISA gives the same bits (DI_CPU_ISA=scalar is the reference). */
#include "backend/cpu/dsv4.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "backend/cpu/isa.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/softmax_exp.h"

/* Runs the AVX-512 or AVX2 version of fn and returns, when the ISA level has one. */
#if defined(DI_CPU_X86)
#define SIMD(fn, ...)                                \
  do {                                               \
    const di_cpu_isa_level l_ = di_cpu_isa();        \
    if (l_ >= DI_ISA_AVX512) {                       \
      fn##_avx512(__VA_ARGS__);                      \
      return;                                        \
    }                                                \
    if (l_ >= DI_ISA_AVX2) {                         \
      fn##_avx2(__VA_ARGS__);                        \
      return;                                        \
    }                                                \
  } while (0)
#else
#define SIMD(fn, ...) \
  do {                \
  } while (0)
#endif

void di_cpu_rms_norm_unit(const float *x, float *y, int n, float eps) {
  SIMD(di_cpu_rms_norm_unit, x, y, n, eps);
  float acc[16] = {0};
  for (int i = 0; i < n; i++) acc[i % 16] = fmaf(x[i], x[i], acc[i % 16]);
  const float r = 1.0f / sqrtf(di_cpu_lane_sum16(acc) / (float)n + eps);
  for (int i = 0; i < n; i++) y[i] = x[i] * r;
}

/* the sum of squares in double (N*D values), in 8 interleaved partial sums */
void di_cpu_hc_norm(const float *x, float *y, int n, float eps) {
  SIMD(di_cpu_hc_norm, x, y, n, eps);
  double acc[8] = {0};
  for (int i = 0; i < n; i++) acc[i % 8] = fma((double)x[i], (double)x[i], acc[i % 8]);
  const double ss = di_cpu_lane_sum8d(acc);
  const float r = 1.0f / sqrtf((float)(ss / n) + eps);
  for (int i = 0; i < n; i++) y[i] = x[i] * r;
}

void di_cpu_rope_inv(float *head, const float *cs, int rope_dim, di_rope_type type) {
  float ncs[2 * 1024];
  for (int i = 0; i < rope_dim / 2; i++) ncs[2 * i] = cs[2 * i], ncs[2 * i + 1] = -cs[2 * i + 1];
  di_cpu_rope(head, ncs, rope_dim, type);
}

void di_cpu_scale(float *x, int n, float s) {
  for (int i = 0; i < n; i++) x[i] *= s;
}

static float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* N is at most 16: a few hundred operations per token, left scalar */
void di_cpu_hc_maps(const float *mix, const float *b, const float *sc, int N, int iters, float eps, float *pre,
                    float *post, float *comb) {
  for (int j = 0; j < N; j++) pre[j] = sigmoidf_(mix[j] * sc[0] + b[j]) + eps;
  if (!post) return;
  for (int j = 0; j < N; j++) post[j] = 2.0f * sigmoidf_(mix[N + j] * sc[1] + b[N + j]);
  for (int j = 0; j < N; j++) { /* softmax over each row, + eps */
    float *row = comb + j * N, mx = -INFINITY, sum = 0;
    for (int k = 0; k < N; k++) {
      row[k] = mix[2 * N + j * N + k] * sc[2] + b[2 * N + j * N + k];
      if (row[k] > mx) mx = row[k];
    }
    for (int k = 0; k < N; k++) sum += row[k] = expf(row[k] - mx);
    for (int k = 0; k < N; k++) row[k] = row[k] / sum + eps;
  }
  for (int it = 0; it < iters; it++) { /* Sinkhorn-Knopp: columns, then (after the first) rows */
    if (it > 0)
      for (int j = 0; j < N; j++) {
        float sum = 0;
        for (int k = 0; k < N; k++) sum += comb[j * N + k];
        for (int k = 0; k < N; k++) comb[j * N + k] /= sum + eps;
      }
    for (int k = 0; k < N; k++) {
      float sum = 0;
      for (int j = 0; j < N; j++) sum += comb[j * N + k];
      for (int j = 0; j < N; j++) comb[j * N + k] /= sum + eps;
    }
  }
}

/* per element, streams ascending, multiply then add (as before the ops moved here) */
void di_cpu_hc_collapse(const float *X, const float *pre, int N, int D, float *x) {
  SIMD(di_cpu_hc_collapse, X, pre, N, D, x);
  for (int d = 0; d < D; d++) {
    float a = 0;
    for (int j = 0; j < N; j++) a += pre[j] * X[(size_t)j * D + d];
    x[d] = a;
  }
}

void di_cpu_hc_expand(float *X, const float *o, const float *post, const float *comb, int N, int D) {
  SIMD(di_cpu_hc_expand, X, o, post, comb, N, D);
  float old[16];
  for (int d = 0; d < D; d++) {
    for (int j = 0; j < N; j++) old[j] = X[(size_t)j * D + d];
    for (int k = 0; k < N; k++) {
      float a = post[k] * o[d];
      for (int j = 0; j < N; j++) a += comb[j * N + k] * old[j];
      X[(size_t)k * D + d] = a;
    }
  }
}

/* per channel, rows in order: the max, then exp(gate - max) summed and
 * weighting kv (by fmaf) */
void di_cpu_compress_pool(const float *const *kv, const float *const *gate, int n, int dim, float *work, float *out) {
  SIMD(di_cpu_compress_pool, kv, gate, n, dim, work, out);
  float *mx = work, *den = work + dim;
  for (int ch = 0; ch < dim; ch++) mx[ch] = -INFINITY, den[ch] = 0, out[ch] = 0;
  for (int r = 0; r < n; r++)
    for (int ch = 0; ch < dim; ch++) mx[ch] = gate[r][ch] > mx[ch] ? gate[r][ch] : mx[ch];
  for (int r = 0; r < n; r++)
    for (int ch = 0; ch < dim; ch++) {
      const float e = di_softmax_exp(gate[r][ch] - mx[ch]);
      den[ch] += e;
      out[ch] = fmaf(e, kv[r][ch], out[ch]);
    }
  for (int ch = 0; ch < dim; ch++) out[ch] /= den[ch];
}

/* Each head's dot product serial over the dimension (fmaf); the heads'
 * weighted ReLUs summed into lane h % 16, heads ascending, then folded. */
void di_cpu_indexer_scores(const float *q, const float *w, int heads, int dim, const float *const *keys, int n,
                           float qs, float ws, float *scores) {
  if (heads % 16 == 0 && heads <= DI_CPU_INDEXER_MAX_HEADS) SIMD(di_cpu_indexer_scores, q, w, heads, dim, keys, n, qs, ws, scores);
  for (int e = 0; e < n; e++) {
    const float *key = keys[e];
    float acc[16] = {0};
    for (int h = 0; h < heads; h++) {
      float d = 0;
      for (int i = 0; i < dim; i++) d = fmaf(q[(size_t)h * dim + i], key[i], d);
      acc[h % 16] += (d > 0 ? d : 0) * qs * (w[h] * ws);
    }
    scores[e] = di_cpu_lane_sum16(acc);
  }
}

/* a before b: the higher score, ties to the lower index (a total order on
 * distinct indices, so the chosen set never depends on the search) */
static inline bool better(const float *s, int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); }

/* Quickselect puts the k-th best at work[k-1]; a sweep then takes every index
 * not after it, ascending: O(n) where a sort was O(n log n). */
int di_cpu_topk(const float *s, int n, int k, int32_t *sel, int32_t *work) {
  if (k >= n) {
    for (int i = 0; i < n; i++) sel[i] = i;
    return n;
  }
  if (k <= 0) return 0;
  for (int i = 0; i < n; i++) work[i] = i;
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    const int32_t pv = work[mid];
    work[mid] = work[hi], work[hi] = pv;
    int st = lo;
    for (int i = lo; i < hi; i++)
      if (better(s, work[i], pv)) {
        const int32_t t = work[i];
        work[i] = work[st], work[st++] = t;
      }
    work[hi] = work[st], work[st] = pv;
    if (st == k - 1) break;
    if (st < k - 1) lo = st + 1;
    else hi = st - 1;
  }
  const int32_t thr = work[k - 1];
  int m = 0;
  for (int i = 0; i < n && m < k; i++)
    if (i == thr || better(s, i, thr)) sel[m++] = i;
  return m;
}

/* Per head: scores as 16-lane dot products (fmaf) folded, times scale; the
 * weights exp(s - max) summed serially after the sink's; the rows weighted
 * per element by fmaf in row order; then divided by the sum. */
static void attn_sink_one(const float *q, const float *const *keys, int nk, int hd, float scale, float sink, float *s,
                          float *o) {
  float m = sink;
  for (int j = 0; j < nk; j++) {
    float acc[16] = {0};
    for (int i = 0; i < hd; i++) acc[i % 16] = fmaf(q[i], keys[j][i], acc[i % 16]);
    s[j] = di_cpu_lane_sum16(acc) * scale;
    m = s[j] > m ? s[j] : m;
  }
  float den = di_softmax_exp(sink - m);
  for (int i = 0; i < hd; i++) o[i] = 0;
  for (int j = 0; j < nk; j++) {
    const float e = di_softmax_exp(s[j] - m);
    den += e;
    for (int i = 0; i < hd; i++) o[i] = fmaf(e, keys[j][i], o[i]);
  }
  for (int i = 0; i < hd; i++) o[i] /= den;
}

void di_cpu_attn_sink(const float *q, int nh, const float *const *keys, int nk, int hd, float scale,
                      const float *sinks, float *s, float *o) {
  SIMD(di_cpu_attn_sink, q, nh, keys, nk, hd, scale, sinks, s, o);
  for (int h = 0; h < nh; h++)
    attn_sink_one(q + (size_t)h * hd, keys, nk, hd, scale, sinks[h], s + (size_t)h * nk, o + (size_t)h * hd);
}

static float moe_score(di_moe_score f, float x) {
  if (f == DI_MOE_SIGMOID) return 1.0f / (1.0f + expf(-x));
  return sqrtf(x > 20.0f ? x : log1pf(expf(x))); /* sqrt(softplus), torch's threshold 20 */
}

void di_cpu_moe_route_v4(const di_hparams *hp, const float *logits, const float *bias, const int32_t *hash_ids,
                         int32_t *sel, float *w) {
  const int E = hp->n_expert, K = hp->n_expert_used;
  float lg[DI_MOE_MAX_EXPERTS];
  for (int e = 0; e < E; e++) lg[e] = moe_score(hp->moe_score, logits[e]);
  if (hash_ids) {
    memcpy(sel, hash_ids, (size_t)K * sizeof *sel);
  } else {
    bool taken[DI_MOE_MAX_EXPERTS] = {false};
    for (int k = 0; k < K; k++) { /* k-th best of score + bias; ties to the lower expert */
      int best = -1;
      for (int e = 0; e < E; e++)
        if (!taken[e] && (best < 0 || lg[e] + bias[e] > lg[best] + bias[best])) best = e;
      taken[best] = true;
      sel[k] = best;
    }
  }
  float sum = 0;
  for (int k = 0; k < K; k++) sum += w[k] = lg[sel[k]];
  for (int k = 0; k < K; k++) w[k] = w[k] / (sum + 1e-20f) * hp->moe_scale;
}

int di_cpu_moe_bucket(const int32_t *sel, const float *selw, int T, int K, int e, int32_t *rows, float *w) {
  int M = 0;
  for (int t = 0; t < T; t++)
    for (int k = 0; k < K; k++)
      if (sel[(size_t)t * K + k] == e) rows[M] = t, w[M++] = selw[(size_t)t * K + k];
  return M;
}
