/* Mixture-of-experts feed-forward (DeepSeek-V2/V3): a router scores every
 * expert per token, a selection rule picks n_expert_used of them, and the
 * layer's output is the weighted sum of the chosen experts' GLUs plus the
 * shared experts' GLU. The batch is grouped by expert so each chosen
 * expert's weights are read once per step, for all the tokens that chose it,
 * and experts nobody chose are not read at all. A token's sum runs over its
 * experts in ascending id order, whatever the batch (row invariance). */
#include "graph/moe.h"

#include <math.h>
#include <string.h>

#include "backend/cpu/ops.h"
#include "graph/forward_internal.h"

void di_moe_route(const di_hparams *hp, const float *logits, const float *sel_bias, int32_t *ids, float *w) {
  enum { MAXE = DI_MOE_MAX_EXPERTS };
  const int E = hp->n_expert, K = hp->n_expert_used;
  float s[MAXE], c[MAXE];
  if (hp->moe_score == DI_MOE_SOFTMAX) {
    float mx = logits[0];
    for (int e = 1; e < E; e++) mx = logits[e] > mx ? logits[e] : mx;
    double sum = 0;
    for (int e = 0; e < E; e++) sum += exp((double)logits[e] - mx);
    for (int e = 0; e < E; e++) s[e] = (float)(exp((double)logits[e] - mx) / sum);
  } else {
    for (int e = 0; e < E; e++) s[e] = (float)(1.0 / (1.0 + exp(-(double)logits[e])));
  }
  /* selection scores: bias-corrected under noaux_tc (the bias never weights) */
  for (int e = 0; e < E; e++) c[e] = sel_bias ? s[e] + sel_bias[e] : s[e];
  if (hp->n_group > 1 && hp->moe_topk != DI_MOE_GREEDY) {
    const int G = hp->n_group, per = E / G;
    float gs[MAXE];
    for (int g = 0; g < G; g++) {
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int i = 0; i < per; i++) {
        float v = c[g * per + i];
        if (v > b1) b2 = b1, b1 = v;
        else if (v > b2) b2 = v;
      }
      /* noaux_tc: the sum of the group's two best; group_limited_greedy: its best */
      gs[g] = hp->moe_topk == DI_MOE_NOAUX_TC ? b1 + b2 : b1;
    }
    bool keep[MAXE] = {false};
    for (int k = 0; k < hp->topk_group; k++) {
      int best = -1;
      for (int g = 0; g < G; g++)
        if (!keep[g] && (best < 0 || gs[g] > gs[best])) best = g;
      keep[best] = true;
    }
    for (int e = 0; e < E; e++)
      if (!keep[e / per]) c[e] = -INFINITY;
  }
  bool taken[MAXE] = {false};
  double sum = 0;
  for (int k = 0; k < K; k++) {
    int best = -1;
    for (int e = 0; e < E; e++)
      if (!taken[e] && (best < 0 || c[e] > c[best])) best = e;
    taken[best] = true;
    ids[k] = best;
    w[k] = s[best];
    sum += s[best];
  }
  for (int k = 0; k < K; k++) {
    float v = hp->moe_norm_topk ? (float)(w[k] / sum) : w[k];
    w[k] = v * hp->moe_scale;
  }
  /* ascending expert ids: the order each token's sum runs in */
  for (int i = 1; i < K; i++)
    for (int j = i; j > 0 && ids[j] < ids[j - 1]; j--) {
      int32_t ti = ids[j];
      ids[j] = ids[j - 1], ids[j - 1] = ti;
      float tw = w[j];
      w[j] = w[j - 1], w[j - 1] = tw;
    }
}

static void st_route(stage_ctx *c, int t) {
  di_forward_ctx *f = c->f;
  const di_hparams *hp = &f->m->hp;
  const int K = hp->n_expert_used;
  di_moe_route(hp, f->rlogit + (size_t)t * hp->n_expert, c->L->router_bias.data, f->sel + (size_t)t * K,
               f->selw + (size_t)t * K);
}

static void glu_rows(di_forward_ctx *f, int n, int F) {
  for (int r = 0; r < n; r++) di_cpu_glu(f->gate + (size_t)r * F, f->up + (size_t)r * F, F, f->m->hp.act);
}

void di_fwd_ffn_moe(stage_ctx *sc) {
  di_forward_ctx *f = sc->f;
  const di_hparams *hp = &f->m->hp;
  const di_layer_weights *L = sc->L;
  const int T = sc->b->n_tokens, E = hp->n_expert, K = hp->n_expert_used, D = hp->n_embd, F = hp->n_ff_exp;
  di_fwd_matmul(f, &L->router, f->xn, T, f->rlogit);
  di_fwd_par_tokens(sc, st_route);
  /* group (token, weight) by expert, tokens ascending within each */
  int cnt[DI_MOE_MAX_EXPERTS + 1] = {0};
  for (int i = 0; i < T * K; i++) cnt[f->sel[i] + 1]++;
  for (int e = 0; e < E; e++) cnt[e + 1] += cnt[e];
  int fill[DI_MOE_MAX_EXPERTS];
  memcpy(fill, cnt, (size_t)E * sizeof(int));
  for (int t = 0; t < T; t++)
    for (int k = 0; k < K; k++) {
      int e = f->sel[t * K + k], at = fill[e]++;
      f->bucket[at] = t;
      f->bucket_w[at] = f->selw[t * K + k];
    }
  memset(f->acc, 0, (size_t)T * D * sizeof(float));
  /* Expert parallel (--tp): this rank runs whole experts [e0, e1), each on
   * the rows routed to it, into its rows of f->ey (expert order); the
   * gather brings every expert's rows, and each rank adds them up below in
   * the one-rank order, so the sum has the same bits. */
  int e0, e1;
  di_fwd_ep_range(f, E, &e0, &e1);
  f->tp_local = f->tpar != NULL;
  for (int e = e0; e < e1; e++) {
    const int n = cnt[e + 1] - cnt[e];
    if (!n) continue;
    const int32_t *rows = f->bucket + cnt[e];
    for (int r = 0; r < n; r++) memcpy(f->xg + (size_t)r * D, f->xn + (size_t)rows[r] * D, (size_t)D * sizeof(float));
    const di_tensor *gu[] = {&L->exp_gate[e], &L->exp_up[e]};
    float *gy[] = {f->gate, f->up};
    di_fwd_matmul_n(f, gu, gy, 2, f->xg, n);
    glu_rows(f, n, F);
    di_fwd_matmul(f, &L->exp_down[e], f->gate, n, f->ey + (size_t)cnt[e] * D);
  }
  f->tp_local = false;
  di_fwd_ep_gather(f, f->ey, cnt, E, D);
  /* experts in ascending order: each token's sum runs in its experts' id order */
  for (int e = 0; e < E; e++)
    for (int r = cnt[e]; r < cnt[e + 1]; r++) {
      const float wr = f->bucket_w[r], *y = f->ey + (size_t)r * D;
      float *a = f->acc + (size_t)f->bucket[r] * D;
      for (int i = 0; i < D; i++) a[i] += wr * y[i];
    }
  if (hp->n_expert_shared > 0) {
    const di_tensor *gu[] = {&L->sh_gate, &L->sh_up};
    float *gy[] = {f->gate, f->up};
    di_fwd_matmul_n(f, gu, gy, 2, f->xn, T);
    glu_rows(f, T, hp->n_ff_shexp);
    di_fwd_matmul(f, &L->sh_down, f->gate, T, f->tmp);
    for (size_t i = 0; i < (size_t)T * D; i++) f->tmp[i] += f->acc[i];
  } else {
    memcpy(f->tmp, f->acc, (size_t)T * D * sizeof(float));
  }
}
