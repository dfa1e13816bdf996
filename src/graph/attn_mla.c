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
 * existing tile kernels and their row invariance carry over unchanged. */
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

/* A head's absorbed query (item t * H + h): parallel over heads too, since
 * each reads the head's f32 W_k (nope x kv_lora), heavy even at decode. */
static void st_mla_q(stage_ctx *c, int i) {
  di_forward_ctx *f = c->f;
  const di_hparams *hp = &f->m->hp;
  const int H = hp->n_head, hd = hp->head_dim, nope = hp->qk_nope_dim, rd = hp->rope_dim, kvl = hp->kv_lora_rank;
  const int lat = kvl + rd, vd = hp->v_head_dim, t = i / H, h = i % H;
  float *q = f->q + (size_t)i * hd, *qm = f->qm + (size_t)i * lat;
  f->be->rope(q + nope, c->rope + (size_t)t * rd, rd, hp->rope_type);
  /* qm[0:kvl] = W_k^T q_nope */
  f->be->mla_absorb_q(q, c->L->kv_b + (size_t)h * (nope + vd) * kvl, nope, kvl, qm);
  memcpy(qm + kvl, q + nope, (size_t)rd * sizeof(float));
}

/* W_v applied to a head's latent output (item t * H + h) */
static void st_mla_out(stage_ctx *c, int i) {
  di_forward_ctx *f = c->f;
  const di_hparams *hp = &f->m->hp;
  const int H = hp->n_head, nope = hp->qk_nope_dim, rd = hp->rope_dim, kvl = hp->kv_lora_rank, vd = hp->v_head_dim;
  const int lat = kvl + rd, h = i % H;
  const float *wv = c->L->kv_b + ((size_t)h * (nope + vd) + nope) * kvl;
  f->be->mla_out(f->attm + (size_t)i * lat, wv, vd, kvl, f->att + (size_t)i * vd);
}

di_code di_fwd_attn_mla(stage_ctx *sc, di_status *st) {
  di_forward_ctx *f = sc->f;
  const di_hparams *hp = &f->m->hp;
  const di_layer_weights *L = sc->L;
  const int T = sc->b->n_tokens;
  if (hp->q_lora_rank > 0) {
    const di_tensor *w[] = {&L->wq_a, &L->wkv_a};
    float *y[] = {f->qa, f->kva};
    di_fwd_matmul_n(f, w, y, 2, f->xn, T);
    di_fwd_par_tokens(sc, st_q_a_norm);
    di_fwd_matmul(f, &L->wq_b, f->qa, T, f->q);
  } else {
    const di_tensor *w[] = {&L->wq, &L->wkv_a};
    float *y[] = {f->q, f->kva};
    di_fwd_matmul_n(f, w, y, 2, f->xn, T);
  }
  di_fwd_par_tokens(sc, st_mla_qk);
  di_fwd_par_items(sc, T * hp->n_head, st_mla_q);
  /* MQA over the latent rows: one KV "head" as wide as a row */
  di_hparams view = *hp;
  view.n_head_kv = 1;
  view.head_dim = hp->kv_lora_rank + hp->rope_dim;
  view.sliding_window = 0;
  view.attn_softcap = 0;
  di_code rc = f->be->attn(f->attn, f->tp, &view, sc->kv, sc->b, sc->loc.table, sc->loc.layer, false, f->qm, f->attm, st);
  if (rc) return rc;
  di_fwd_par_items(sc, T * hp->n_head, st_mla_out);
  return DI_OK;
}
