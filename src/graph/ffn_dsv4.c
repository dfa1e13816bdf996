/* DeepSeek-V4's MoE block: router scores (sqrtsoftplus or sigmoid) pick the
 * experts, by the frozen tid2eid[token] table on hash_moe layers or as the
 * top-k of score + selection bias on moe layers; the chosen scores,
 * normalized and times routed_scaling_factor, weight the experts. Every GLU
 * (experts and the shared one) clips gate to <= swiglu_limit and up to
 * [-limit, limit] before SiLU(gate) * up. Tokens are grouped by expert (each
 * chosen expert's weights read once per step) and each token's sum runs in
 * ascending expert order, then the shared expert is added: ffn_moe.c's
 * experts (at decode all experts in two thread syncs, not two per expert),
 * or under tensor parallel each expert's matmuls split by column as a dense
 * FFN's, here. */
#include <math.h>
#include <string.h>

#include "graph/dsv4.h"

static void st_route(stage_ctx *c, int t) {
  di_forward_ctx *f = c->f;
  const di_hparams *hp = &f->m->hp;
  const di_layer_weights *L = c->L;
  const int E = hp->n_expert, K = hp->n_expert_used;
  const int32_t *hash = L->v4_hash ? (const int32_t *)L->tid2eid.data + (size_t)c->b->tokens[t] * K : NULL;
  f->be->moe_route_v4(hp, f->rlogit + (size_t)t * E, L->router_bias.data, hash, f->sel + (size_t)t * K,
                      f->selw + (size_t)t * K);
  memset(f->acc + (size_t)t * hp->n_embd, 0, (size_t)hp->n_embd * sizeof(float));
}

void di_fwd_v4_ffn(stage_ctx *sc) {
  di_forward_ctx *f = sc->f;
  const di_hparams *hp = &f->m->hp;
  const di_layer_weights *L = sc->L;
  const int T = sc->b->n_tokens, E = hp->n_expert, K = hp->n_expert_used, D = hp->n_embd, F = hp->n_ff_exp;
  di_fwd_matmul(f, &L->router, f->xn, T, f->rlogit);
  di_fwd_par_tokens(sc, st_route);
  if (!f->tpar) {
    di_fwd_moe_experts(sc, hp->v4.swiglu_limit);
    return;
  }
  for (int e = 0; e < E; e++) {
    const int M = f->be->moe_bucket(f->sel, f->selw, T, K, e, f->bucket, f->bucket_w);
    if (!M) continue;
    f->be->gather_rows(f->xg, f->xn, f->bucket, M, D);
    const di_tensor *gu[] = {&L->exp_gate[e], &L->exp_up[e]};
    float *gy[] = {f->gate, f->up};
    di_fwd_matmul_n(f, gu, gy, 2, f->xg, M);
    f->be->glu_clip(f->gate, f->up, (size_t)M * F, hp->v4.swiglu_limit);
    di_fwd_matmul(f, &L->exp_down[e], f->gate, M, f->eo);
    f->be->scatter_add(f->acc, f->eo, f->bucket, f->bucket_w, M, D);
  }
  const di_tensor *gu[] = {&L->sh_gate, &L->sh_up};
  float *gy[] = {f->gate, f->up};
  di_fwd_matmul_n(f, gu, gy, 2, f->xn, T);
  f->be->glu_clip(f->gate, f->up, (size_t)T * F, hp->v4.swiglu_limit);
  di_fwd_matmul(f, &L->sh_down, f->gate, T, f->tmp);
  f->be->add(f->tmp, f->acc, T * D);
}
