/* Multi-head latent attention (DeepSeek-V2/V3), absorbed form for prefill and
 * decode alike. Per token the cache holds one row: the kv_a_layernorm'ed
 * latent c (kv_lora_rank values) and the roped shared key k_r (qk_rope). With
 * kv_b_proj = per head [W_k (qk_nope rows) ; W_v (v_head_dim rows)] over c:
 *
 *   score_h(t, j) = q_nope_h . (W_k c_j) + q_rope_h . k_r_j
 *                 = (W_k^T q_nope_h) . c_j + q_rope_h . k_r_j
 *   out_h(t)      = sum_j p_j W_v c_j = W_v (sum_j p_j c_j)
 *
 * so attention is MQA over [c | k_r] rows with queries [W_k^T q_nope | q_rope]
 * (kv_lora_rank + qk_rope wide), whose values are the same rows (the pool's
 * v_in_k), and W_v is applied once per head to the result's latent part. The
 * existing tile kernels and their row invariance carry over unchanged.
 *
 * W_kᵀ q_nope and W_v a are ordinary matmuls over each head's matrices
 * (L->mla_k / mla_v, the backend's prepare_weights: in the file's type where
 * its layout allows), with the head's rows of all tokens as M. */
#include <string.h>

#include "graph/forward_internal.h"

static void st_q_a_norm(stage_ctx *c, int t) {
  const di_hparams *hp = &c->f->m->hp;
  float *qa = c->f->qa + (size_t)t * hp->q_lora_rank;
  c->f->be->rms_norm(qa, c->L->q_a_norm.data, qa, hp->q_lora_rank, hp->rms_eps);
}

/* latent norm, RoPE, the row into the cache */
static void st_mla_qk(stage_ctx *c, int t) {
  di_forward_ctx *f = c->f;
  const di_hparams *hp = &f->m->hp;
  const di_layer_weights *L = c->L;
  const di_backend *be = f->be;
  const int rd = hp->rope_dim, kvl = hp->kv_lora_rank, lat = kvl + rd;
  const float *cs = c->rope + (size_t)t * rd;
  float *kv_row = f->kva + (size_t)t * lat;
  be->rms_norm(kv_row, L->kv_a_norm.data, kv_row, kvl, hp->rms_eps);
  be->rope(kv_row + kvl, cs, rd, hp->rope_type);
  di_kv_pool *kv = c->kv;
  const di_batch *b = c->b;
  int32_t blk = di_batch_seq_table(&b->seqs[b->seq[t]], c->loc.table)[b->pos[t] / kv->block_size];
  be->kv_store((uint8_t *)di_kv_k(kv, blk, c->loc.layer) + di_kv_head_offset(kv, 0, b->pos[t] % kv->block_size, lat),
                  kv_row, lat, kv->type);
}

/* The absorbed products of heads [H*ith/nth, H*(ith+1)/nth), each a matmul
 * over the batch's tokens: query side qm[t][h][0:kvl] = W_kᵀ q_nope (and the
 * rope part of the query roped into qm[t][h][kvl:]), or output side
 * att[t][h] = W_v attm[t][h][0:kvl]. Split by heads even at decode, where one
 * head's matrices are most of the work. Row invariance: each token's row is
 * prepared and multiplied on its own (matmul.h), whatever T or the split. */
typedef struct mla_heads {
  stage_ctx *c;
  int n_head; /* the heads run here: c->head0 on (a tensor-parallel rank's, else all) */
  bool out;
} mla_heads;

static void mla_heads_run(void *p, int ith, int nth) {
  const mla_heads *k = p;
  stage_ctx *c = k->c;
  di_forward_ctx *f = c->f;
  const di_backend *be = f->be;
  const di_hparams *hp = &f->m->hp;
  const int H = k->n_head, hd = hp->head_dim, nope = hp->qk_nope_dim, rd = hp->rope_dim, kvl = hp->kv_lora_rank;
  const int lat = kvl + rd, vd = hp->v_head_dim, T = c->b->n_tokens;
  float *x = f->mla_x + (size_t)ith * f->mla_x_n;
  void *xq = f->mla_xq + (size_t)ith * f->mla_xq_bytes;
  for (int h = (int)((int64_t)H * ith / nth); h < (int)((int64_t)H * (ith + 1) / nth); h++) {
    const di_tensor *w = k->out ? &c->L->mla_v[c->head0 + h] : &c->L->mla_k[c->head0 + h];
    const int K = k->out ? kvl : nope;
    for (int t = 0; t < T; t++) {
      const size_t i = (size_t)t * H + h;
      if (k->out) {
        memcpy(x + (size_t)t * K, f->attm + i * lat, (size_t)K * sizeof(float));
        continue;
      }
      float *q = f->q + i * hd;
      be->rope(q + nope, c->rope + (size_t)t * rd, rd, hp->rope_type);
      memcpy(f->qm + i * lat + kvl, q + nope, (size_t)rd * sizeof(float));
      memcpy(x + (size_t)t * K, q, (size_t)K * sizeof(float));
    }
    be->act_prepare(w->type, x, T, K, xq);
    if (k->out) be->matmul(w, xq, T, f->att + (size_t)h * vd, (int64_t)H * vd, 0, vd);
    else be->matmul(w, xq, T, f->qm + (size_t)h * lat, (int64_t)H * lat, 0, kvl);
  }
}

static void mla_heads_par(stage_ctx *sc, int n_head, bool out) {
  mla_heads k = {sc, n_head, out};
  di_threadpool_run(sc->f->tp, mla_heads_run, &k);
}

/* Under tensor parallel (di_tp_mla_heads_split) each rank runs its own query
 * heads: their rows of the query projection (held alone, f->tp_local), the
 * absorbed queries, attention and value projections, and the heads' outputs
 * are gathered for the column-split output projection. The latent rows
 * (kv_a, column-split and gathered) and the cache stay whole on every rank:
 * every head reads every latent value, so cutting the latent dimension would
 * need a cross-rank sum of partial scores, not the same bits. */
di_code di_fwd_attn_mla(stage_ctx *sc, di_status *st) {
  di_forward_ctx *f = sc->f;
  const di_hparams *hp = &f->m->hp;
  const di_layer_weights *L = sc->L;
  const int T = sc->b->n_tokens;
  const bool split = f->tpar && di_tp_mla_heads_split(hp, f->m->tp_size);
  di_hparams ahp = *hp; /* this rank's heads */
  int h0 = 0, h1 = hp->n_head;
  if (split) di_tp_heads(hp->n_head, f->m->tp_rank, f->m->tp_size, &h0, &h1);
  ahp.n_head = h1 - h0;
  const di_tensor *wq = hp->q_lora_rank > 0 ? &L->wq_a : &L->wq;
  if (hp->q_lora_rank > 0 || !split) {
    const di_tensor *w[] = {wq, &L->wkv_a};
    float *y[] = {hp->q_lora_rank > 0 ? f->qa : f->q, f->kva};
    di_fwd_matmul_n(f, w, y, 2, f->xn, T);
  } else {
    di_fwd_matmul(f, &L->wkv_a, f->xn, T, f->kva);
  }
  if (hp->q_lora_rank > 0) di_fwd_par_tokens(sc, st_q_a_norm);
  f->tp_local = split; /* the rank's heads' rows, into f->q as [T][its heads * head_dim] */
  if (hp->q_lora_rank > 0) di_fwd_matmul(f, &L->wq_b, f->qa, T, f->q);
  else if (split) di_fwd_matmul(f, &L->wq, f->xn, T, f->q);
  f->tp_local = false;
  di_fwd_par_tokens(sc, st_mla_qk);
  sc->ahp = &ahp, sc->head0 = h0;
  mla_heads_par(sc, ahp.n_head, false);
  /* MQA over the latent rows: one KV "head" as wide as a row */
  di_hparams view = ahp;
  view.n_head_kv = 1;
  view.head_dim = hp->kv_lora_rank + hp->rope_dim;
  view.sliding_window = 0;
  view.attn_softcap = 0;
  di_code rc = f->be->attn(f->attn, f->tp, &view, sc->kv, sc->b, sc->loc.table, sc->loc.layer, false, f->qm, f->attm, st);
  float *att = f->att; /* the heads' outputs: [T][their heads * v_head_dim] under split */
  if (!rc && split && !(f->att = di_fwd_tp_heads_buf(f, (size_t)T * hp->n_head * hp->v_head_dim))) {
    f->att = att;
    sc->ahp = NULL, sc->head0 = 0;
    return DI_OK; /* the step has failed (di_fwd_tp_result says why) */
  }
  if (!rc) mla_heads_par(sc, ahp.n_head, true);
  f->att = att;
  sc->ahp = NULL, sc->head0 = 0;
  if (!rc && split) di_fwd_tp_gather_heads(f, f->att, T, hp->v_head_dim, &L->wo);
  return rc;
}
