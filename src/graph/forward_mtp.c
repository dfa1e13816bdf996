/* The multi-token-prediction module as a draft forward: the embedding of the
 * next token and the main model's hidden state, each normed, projected
 * together, then one decoder block (the same layer code as the main forward,
 * its K/V in the pool's extra layer) and the module's own head. DeepSeek-V4's
 * block (hyper-connection streams, a sliding window) is forward_dsv4.c's
 * di_fwd_v4_mtp, which shares the projection. */
#include <string.h>

#include "graph/forward_internal.h"

/* out[t] = eh_proj [enorm(e[t]); hnorm(h[t])] for T rows, h's rows h_stride
 * floats apart (DeepSeek's order: the embedding first). */
void di_fwd_mtp_project(di_forward_ctx *f, const float *e, const float *h, size_t h_stride, int T, float *out) {
  const di_hparams *hp = &f->m->hp;
  const di_mtp_weights *w = f->m->mtp;
  const int D = hp->n_embd;
  for (int t = 0; t < T; t++) {
    float *c = f->cat + (size_t)t * 2 * D;
    f->be->rms_norm(e + (size_t)t * D, w->enorm.data, c, D, hp->rms_eps);
    f->be->rms_norm(h + (size_t)t * h_stride, w->hnorm.data, c + D, D, hp->rms_eps);
  }
  di_fwd_matmul(f, &w->eh_proj, f->cat, T, out);
}

static di_code mtp_run(di_forward_ctx *f, di_kv_pool *kv, const di_batch *b, const float *hidden, float *logits,
                       float *hidden_out, di_status *st);

/* Under --tp the module runs like a layer of the model on every rank: the
 * leader hands the step (with the input states) to the followers first, its
 * matmuls are column-split and gathered, its block split by heads as the
 * model's layers are (model/tp_slice.c cuts its weights alike). */
di_code di_forward_mtp(di_forward_ctx *f, di_kv_pool *kv, const di_batch *b, const float *hidden, float *logits,
                       float *hidden_out, di_status *st) {
  if (!f->m->mtp || !f->cat) return di_errorf(st, DI_ERR_UNSUPPORTED, "%s has no MTP module", f->m->path);
  di_code rc = di_fwd_check_batch(f, kv, b, st);
  if (!rc && f->tpar) rc = di_fwd_tp_step(f, kv, b, hidden, st);
  if (rc) return rc;
  rc = mtp_run(f, kv, b, hidden, logits, hidden_out, st);
  return f->tpar && !rc ? di_fwd_tp_result(f, st) : rc;
}

static di_code mtp_run(di_forward_ctx *f, di_kv_pool *kv, const di_batch *b, const float *hidden, float *logits,
                       float *hidden_out, di_status *st) {
  const di_model *m = f->m;
  const di_hparams *hp = &m->hp;
  const di_mtp_weights *w = m->mtp;
  di_code rc;
  if (hp->attn_kind == DI_ATTN_DSV4) return di_fwd_v4_mtp(f, kv, b, hidden, logits, hidden_out, st);
  if (kv->n_layers != hp->n_layer + 1 || b->n_swa_tables)
    return di_errorf(st, DI_ERR_INVALID, "forward: the KV pool has no MTP layer (%d layers for %d)", kv->n_layers,
                     hp->n_layer);
  const int T = b->n_tokens, D = hp->n_embd;
  di_fwd_embed(f, b, f->x);
  di_fwd_mtp_project(f, f->x, hidden, (size_t)D, T, f->x); /* f->x is read into f->cat before it is written */
  di_fwd_rope_tables(f, b);
  if ((rc = di_fwd_layer(f, kv, b, &w->layer, (kv_loc){-1, hp->n_layer}, false, true, NULL, st))) return rc;
  if (hidden_out) memcpy(hidden_out, f->x, (size_t)T * D * sizeof *f->x);
  int n_out = 0;
  for (int t = 0; t < T; t++) {
    bool want = b->want_logits ? b->want_logits[t] : t == T - 1;
    if (want) f->be->rms_norm(f->x + (size_t)t * D, w->head_norm.data, f->xn + (size_t)n_out++ * D, D, hp->rms_eps);
  }
  f->tp_leader_only = true; /* the drafts are rank 0's engine's */
  if (n_out) di_fwd_matmul(f, w->head.data ? &w->head : &m->output, f->xn, n_out, logits);
  f->tp_leader_only = false;
  return DI_OK;
}
