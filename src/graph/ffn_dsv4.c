/* DeepSeek-V4's MoE block: router scores (sqrtsoftplus or sigmoid) pick the
 * experts, by the frozen tid2eid[token] table on hash_moe layers or as the
 * top-k of score + selection bias on moe layers; the chosen scores,
 * normalized and times routed_scaling_factor, weight the experts. Every GLU
 * (experts and the shared one) clips gate to <= swiglu_limit and up to
 * [-limit, limit] before SiLU(gate) * up. Tokens are grouped by expert (each
 * chosen expert's weights read once per step) and each token's sum runs in
 * ascending expert order, then the shared expert is added. */
#include <math.h>
#include <string.h>

#include "graph/dsv4.h"

static float score(di_moe_score f, float x) {
  if (f == DI_MOE_SIGMOID) return 1.0f / (1.0f + expf(-x));
  return sqrtf(x > 20.0f ? x : log1pf(expf(x))); /* sqrt(softplus), torch's threshold 20 */
}

static void st_route(stage_ctx *c, int t) {
  di_forward_ctx *f = c->f;
  const di_hparams *hp = &f->m->hp;
  const di_layer_weights *L = c->L;
  const int E = hp->n_expert, K = hp->n_expert_used;
  float *lg = f->rlogit + (size_t)t * E, *w = f->selw + (size_t)t * K;
  int32_t *sel = f->sel + (size_t)t * K;
  for (int e = 0; e < E; e++) lg[e] = score(hp->moe_score, lg[e]);
  if (L->v4_hash) {
    memcpy(sel, (const int32_t *)L->tid2eid.data + (size_t)c->b->tokens[t] * K, (size_t)K * sizeof *sel);
  } else {
    const float *bias = L->router_bias.data;
    for (int k = 0; k < K; k++) { /* k-th best of score + bias; ties to the lower expert */
      int best = -1;
      for (int e = 0; e < E; e++) {
        bool taken = false;
        for (int j = 0; j < k; j++) taken |= sel[j] == e;
        if (!taken && (best < 0 || lg[e] + bias[e] > lg[best] + bias[best])) best = e;
      }
      sel[k] = best;
    }
  }
  float sum = 0;
  for (int k = 0; k < K; k++) sum += w[k] = lg[sel[k]];
  for (int k = 0; k < K; k++) w[k] = w[k] / (sum + 1e-20f) * hp->moe_scale;
  memset(f->acc + (size_t)t * hp->n_embd, 0, (size_t)hp->n_embd * sizeof(float));
}

void di_fwd_v4_ffn(stage_ctx *sc) {
  di_forward_ctx *f = sc->f;
  const di_hparams *hp = &f->m->hp;
  const di_layer_weights *L = sc->L;
  const int T = sc->b->n_tokens, E = hp->n_expert, K = hp->n_expert_used, D = hp->n_embd, F = hp->n_ff_exp;
  di_fwd_matmul(f, &L->router, f->xn, T, f->rlogit);
  di_fwd_par_tokens(sc, st_route);
  for (int e = 0; e < E; e++) {
    int M = 0;
    for (int t = 0; t < T; t++)
      for (int k = 0; k < K; k++)
        if (f->sel[(size_t)t * K + k] == e) {
          f->bucket[M] = t;
          f->bucket_w[M] = f->selw[(size_t)t * K + k];
          memcpy(f->xg + (size_t)M * D, f->xn + (size_t)t * D, (size_t)D * sizeof(float));
          M++;
        }
    if (!M) continue;
    const di_tensor *gu[] = {&L->exp_gate[e], &L->exp_up[e]};
    float *gy[] = {f->gate, f->up};
    di_fwd_matmul_n(f, gu, gy, 2, f->xg, M);
    f->be->glu_clip(f->gate, f->up, (size_t)M * F, hp->v4.swiglu_limit);
    di_fwd_matmul(f, &L->exp_down[e], f->gate, M, f->eo);
    for (int i = 0; i < M; i++) {
      float *acc = f->acc + (size_t)f->bucket[i] * D;
      const float *o = f->eo + (size_t)i * D, w = f->bucket_w[i];
      for (int d = 0; d < D; d++) acc[d] += w * o[d];
    }
  }
  const di_tensor *gu[] = {&L->sh_gate, &L->sh_up};
  float *gy[] = {f->gate, f->up};
  di_fwd_matmul_n(f, gu, gy, 2, f->xn, T);
  f->be->glu_clip(f->gate, f->up, (size_t)T * F, hp->v4.swiglu_limit);
  di_fwd_matmul(f, &L->sh_down, f->gate, T, f->tmp);
  for (size_t i = 0; i < (size_t)T * D; i++) f->tmp[i] += f->acc[i];
}
