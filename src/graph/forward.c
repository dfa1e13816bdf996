/* The op program. One function, read top to bottom like the math, serves
 * every architecture: descriptor flags in di_hparams pick the variant of each
 * step (QKV bias, QK-norm, sandwich norms, GeGLU vs SwiGLU, sliding window,
 * soft-capping, RoPE layout and scaling). */
#include "graph/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/forward_internal.h"
#include "model/tensors.h"
#include "util/mem.h"
#include "util/threadpool.h"

typedef struct wscan {
  const di_backend *be;
  int T;
  size_t act_bytes;
  const di_tensor *bad; /* a weight without a CPU kernel */
} wscan;

static void wscan_one(di_tensor *t, void *u) {
  wscan *w = u;
  if (!t->data) return;
  if (!w->be->dtype_supported(t->type) && !w->bad) w->bad = t;
  size_t b = w->be->act_bytes(t->type, w->T, t->ne[0]);
  if (b > w->act_bytes) w->act_bytes = b;
}

/* Largest prepared-activation buffer any matmul of a T-token batch needs, and
 * the first weight without a kernel. */
static wscan scan_weights(const di_model *m, int T) {
  wscan w = {.be = m->backend, .T = T};
  wscan_one((di_tensor *)&m->tok_embd, &w);
  wscan_one((di_tensor *)&m->output, &w);
  for (int il = 0; il < m->hp.n_layer; il++) di_layer_each_matrix(&m->hp, &m->layers[il], wscan_one, &w);
  if (m->mtp) {
    di_layer_each_matrix(&m->hp, &m->mtp->layer, wscan_one, &w);
    wscan_one((di_tensor *)&m->mtp->eh_proj, &w);
    wscan_one((di_tensor *)&m->mtp->head, &w);
  }
  return w;
}

static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }

di_code di_forward_ctx_create(const di_model *m, int max_tokens, int threads, di_forward_ctx **out,
                              di_status *st) {
  *out = NULL;
  const di_hparams *hp = &m->hp;
  if (max_tokens <= 0) return di_errorf(st, DI_ERR_INVALID, "forward: max_tokens must be positive");
  if (!m->backend)
    return di_errorf(st, DI_ERR_INVALID, "%s: weights not prepared for a backend (load with di_backend_load_model)",
                     m->path);
  /* Every weight type must have a kernel before we promise to run. */
  wscan ws = scan_weights(m, max_tokens);
  if (ws.bad)
    return di_errorf(st, DI_ERR_UNSUPPORTED, "%s: tensor %s: dtype %s has no %s kernel", m->path, ws.bad->name,
                     di_dtype_name(ws.bad->type), m->backend->name);
  di_forward_ctx *f = calloc(1, sizeof *f);
  if (!f) return di_errorf(st, DI_ERR_NOMEM, "forward: out of memory");
  f->m = m;
  f->be = m->backend;
  f->max_tokens = max_tokens;
  f->freq_factors = m->rope_freqs.data;
  f->tp = di_threadpool_create(threads);
  size_t T = (size_t)max_tokens;
  size_t qd = (size_t)hp->n_head * hp->head_dim, kvd = (size_t)hp->n_head_kv * hp->head_dim;
  size_t wide = qd > (size_t)hp->n_embd ? qd : (size_t)hp->n_embd;
  size_t ff = max_z((size_t)hp->n_ff, max_z((size_t)hp->n_ff_exp, (size_t)hp->n_ff_shexp));
  f->x = malloc(T * hp->n_embd * sizeof(float));
  f->xn = malloc(T * wide * sizeof(float));
  f->q = malloc(T * qd * sizeof(float));
  f->k = malloc(T * kvd * sizeof(float));
  f->v = malloc(T * kvd * sizeof(float));
  f->att = malloc(T * max_z(qd, (size_t)hp->n_head * hp->v_head_dim) * sizeof(float)); /* MLA: H x v_head_dim */
  f->gate = malloc(T * ff * sizeof(float));
  f->up = malloc(T * ff * sizeof(float));
  f->tmp = malloc(T * wide * sizeof(float));
  f->rope_g = malloc(T * (size_t)hp->rope_dim * sizeof(float));
  f->rope_l = malloc(T * (size_t)hp->rope_dim * sizeof(float));
  bool extra_ok = true;
  if (hp->attn_kind == DI_ATTN_MLA) {
    size_t lat = (size_t)hp->kv_lora_rank + (size_t)hp->rope_dim;
    f->qa = malloc(T * max_z((size_t)hp->q_lora_rank, 1) * sizeof(float));
    f->kva = malloc(T * lat * sizeof(float));
    f->qm = malloc(T * (size_t)hp->n_head * lat * sizeof(float));
    f->attm = malloc(T * (size_t)hp->n_head * lat * sizeof(float));
    const int nthr = f->tp ? di_threadpool_size(f->tp) : 1;
    const int64_t kvl = hp->kv_lora_rank, nope = hp->qk_nope_dim;
    f->mla_x_n = T * (size_t)max_z((size_t)kvl, (size_t)nope);
    for (int il = 0; il <= hp->n_layer; il++) {
      const di_layer_weights *L = il < hp->n_layer ? &m->layers[il] : m->mtp ? &m->mtp->layer : NULL;
      if (!L || L->attn != DI_ATTN_MLA || !L->mla_k) continue;
      f->mla_xq_bytes = max_z(f->mla_xq_bytes, f->be->act_bytes(L->mla_k[0].type, max_tokens, nope));
      f->mla_xq_bytes = max_z(f->mla_xq_bytes, f->be->act_bytes(L->mla_v[0].type, max_tokens, kvl));
    }
    f->mla_xq_bytes = (f->mla_xq_bytes + 63) / 64 * 64;
    f->mla_x = malloc(nthr * f->mla_x_n * sizeof(float));
    f->mla_xq_total = nthr * f->mla_xq_bytes + 64;
    f->mla_xq = di_alloc_aligned(f->mla_xq_total, false);
    extra_ok = f->qa && f->kva && f->qm && f->attm && f->mla_x && f->mla_xq;
  }
  if (hp->n_expert > 0) {
    size_t TK = T * (size_t)hp->n_expert_used;
    f->rlogit = malloc(T * (size_t)hp->n_expert * sizeof(float));
    f->selw = malloc(TK * sizeof(float));
    f->sel = malloc(TK * sizeof(int32_t));
    f->bucket = malloc(TK * sizeof(int32_t));
    f->bucket_w = malloc(TK * sizeof(float));
    f->xg = malloc(T * hp->n_embd * sizeof(float));
    f->eo = malloc(T * hp->n_embd * sizeof(float));
    f->ey = malloc(TK * hp->n_embd * sizeof(float));
    f->acc = malloc(T * hp->n_embd * sizeof(float));
    extra_ok = extra_ok && f->rlogit && f->selw && f->sel && f->bucket && f->bucket_w && f->xg && f->eo && f->ey && f->acc;
    /* grouped experts: f32 activations (4 bytes a value) bound every format */
    const size_t R = (size_t)(max_tokens < DI_MOE_GROUP_TOKENS ? max_tokens : DI_MOE_GROUP_TOKENS) * hp->n_expert_used;
    const size_t FE = (size_t)hp->n_ff_exp > 0 ? (size_t)hp->n_ff_exp : 1;
    f->moe_xq_bytes = R * max_z((size_t)hp->n_embd, FE) * 4 + 64;
    f->moe_xq = di_alloc_aligned(f->moe_xq_bytes, false);
    f->moe_g = malloc(R * FE * sizeof(float));
    f->moe_u = malloc(R * FE * sizeof(float));
    extra_ok = extra_ok && f->moe_xq && f->moe_g && f->moe_u;
  }
  if (m->mtp) {
    f->cat = malloc(T * 2 * (size_t)hp->n_embd * sizeof(float));
    extra_ok = extra_ok && f->cat;
  }
  if (hp->attn_kind == DI_ATTN_DSV4 && di_fwd_v4_alloc(f)) extra_ok = false;
  f->xq_bytes = ws.act_bytes;
  f->xq = di_alloc_aligned(f->xq_bytes, false);
  f->attn = f->be->attn_create(max_tokens);
  bool split_ok = true;
  const char *env = getenv("DI_FORWARD_SPLIT");
  f->split_mode = env && *env ? (atoi(env) > 0 ? 1 : -1) : 0;
  int nth = f->tp ? di_threadpool_size(f->tp) : 1;
  if (hp->attn_kind != DI_ATTN_DSV4 && f->split_mode >= 0 && nth > 1 && nth <= SPLIT_MAX_PARTS && max_tokens >= 2 * nth) {
    int per = max_tokens / nth < SPLIT_MAX_TOKENS ? max_tokens / nth : SPLIT_MAX_TOKENS;
    f->split_want = malloc(T * sizeof(bool));
    split_ok = f->split_want != NULL;
    for (int i = 0; i < nth && split_ok; i++, f->n_parts++)
      split_ok = di_forward_ctx_create(m, per, 1, &f->part[i], st) == DI_OK;
  }
  if (!split_ok || !extra_ok || !f->tp || !f->x || !f->xn || !f->q || !f->k || !f->v || !f->att || !f->gate || !f->up ||
      !f->tmp || !f->rope_g || !f->rope_l || !f->xq || !f->attn) {
    di_forward_ctx_free(f);
    return di_errorf(st, DI_ERR_NOMEM, "forward: cannot allocate scratch for %d tokens", max_tokens);
  }
  *out = f;
  return DI_OK;
}

void di_forward_ctx_free(di_forward_ctx *f) {
  if (!f) return;
  for (int i = 0; i < f->n_parts; i++) di_forward_ctx_free(f->part[i]);
  free(f->split_want);
  if (f->attn) f->be->attn_free(f->attn);
  di_threadpool_free(f->tp);
  free(f->x), free(f->xn), free(f->q), free(f->k), free(f->v), free(f->att);
  free(f->gate), free(f->up), free(f->tmp), free(f->rope_g), free(f->rope_l);
  free(f->qa), free(f->kva), free(f->qm), free(f->attm), free(f->cat), free(f->mla_x);
  if (f->mla_xq) di_free_aligned(f->mla_xq, f->mla_xq_total);
  free(f->rlogit), free(f->selw), free(f->sel), free(f->bucket), free(f->bucket_w), free(f->xg), free(f->eo),
      free(f->ey), free(f->acc), free(f->moe_g), free(f->moe_u);
  if (f->moe_xq) di_free_aligned(f->moe_xq, f->moe_xq_bytes);
  di_free_aligned(f->xq, f->xq_bytes);
  di_fwd_v4_free(f);
  di_fwd_tp_free(f);
  free(f);
}

/* ---- parallel matmul: threads split output columns, never the reduction ---- */

void di_fwd_mm_run(void *p, int ith, int nth) {
  mm_task *t = p;
  int64_t total = 0;
  for (int j = 0; j < t->n; j++) total += t->hi[j] - t->lo[j];
  /* Chunks rounded to 16 columns keep SIMD tiles whole. */
  int64_t per = ((total + nth - 1) / nth + 15) / 16 * 16;
  int64_t c0 = per * ith, c1 = c0 + per < total ? c0 + per : total, base = 0;
  for (int j = 0; j < t->n && c0 < c1; j++) {
    const di_tensor *w = t->w[j];
    const int64_t len = t->hi[j] - t->lo[j];
    int64_t n0 = c0 - base, n1 = c1 - base;
    if (n0 < 0) n0 = 0;
    if (n1 > len) n1 = len;
    base += len;
    if (n0 >= n1) continue;
    n0 += t->lo[j], n1 += t->lo[j];
    const void *xq = t->xqs[j] ? t->xqs[j] : t->xq;
    if (!w->sliced) {
      t->be->matmul(w, xq, t->M, t->y[j], t->ldy[j] ? t->ldy[j] : w->ne[1], n0, n1);
      continue;
    }
    /* a tensor-parallel slice: the backend sees the rows held as a whole
     * matrix, and output columns relative to them; y is either the full
     * output (the slice's columns in place) or, compact, just the slice's */
    di_tensor v = *w;
    v.ne[1] = w->nrows, v.sliced = false, v.row0 = v.nrows = 0;
    const int64_t off = t->compact ? 0 : w->row0;
    if (n0 < off || n1 > off + w->nrows) abort(); /* a column this rank does not hold */
    t->be->matmul(&v, xq, t->M, t->y[j] + off, t->compact ? w->nrows : w->ne[1], n0 - off, n1 - off);
  }
}

/* Runs t over the pool: large matrices in up to four parts per thread, so a
 * thread that finishes early (or a worker that starts late) takes the next
 * part instead of waiting at the end; small ones one part per thread. */
void di_fwd_mm(di_threadpool *tp, mm_task *t) {
  int64_t total = 0;
  for (int j = 0; j < t->n; j++) total += t->hi[j] - t->lo[j];
  const int nth = di_threadpool_size(tp);
  const int64_t by_size = total / 512;
  di_threadpool_run_parts(tp, di_fwd_mm_run, t, by_size > 4 * nth ? 4 * nth : by_size > nth ? (int)by_size : nth);
}

/* Rows [m0, m1) of X prepared into xq for matmuls of w's type (per-row:
 * the same bytes whichever thread prepares which rows). */
static void prepare_rows(const di_backend *be, const di_tensor *w, const float *X, void *xq, int64_t m0,
                         int64_t m1) {
  if (m0 >= m1) return;
  size_t rb = be->act_bytes(w->type, 1, w->ne[0]);
  be->act_prepare(w->type, X + m0 * w->ne[0], m1 - m0, w->ne[0], (uint8_t *)xq + (size_t)m0 * rb);
}

static void prep_run(void *p, int ith, int nth) {
  mm_task *t = p;
  int64_t per = (t->M + nth - 1) / nth, m0 = per * ith, m1 = m0 + per < t->M ? m0 + per : t->M;
  prepare_rows(t->be, t->w[0], t->x, (void *)t->xq, m0, m1); /* xq is f->xq, writable */
}

/* y_j[M][w_j.rows] = x[M][cols] * w_j^T for each j; matrices of one dtype
 * share one prepared activation. */
void di_fwd_matmul_n(di_forward_ctx *f, const di_tensor **ws, float **ys, int n, const float *x, int64_t M) {
  for (int j = 0; j < n;) {
    mm_task t = {.be = f->be, .x = x, .xq = f->xq, .M = M, .compact = f->tp_local};
    /* group consecutive matrices of the same type */
    do {
      t.w[t.n] = ws[j];
      t.y[t.n] = ys[j];
      t.hi[t.n] = f->tp_local ? di_tensor_rows(ws[j]) : ws[j]->ne[1];
      t.n++;
      j++;
    } while (j < n && t.n < MM_MAX_JOBS && ws[j]->type == t.w[0]->type);
    bool ready = f->xq_src == x && f->be->act_format(t.w[0]->type) == f->xq_fmt; /* a row stage did it */
    if (!ready && M >= 8) di_threadpool_run(f->tp, prep_run, &t);
    else if (!ready) prepare_rows(f->be, t.w[0], x, f->xq, 0, M);
    f->xq_src = NULL;
    if (f->tpar && !f->tp_local) di_fwd_tp_matmul(f, &t);
    else di_fwd_mm(f->tp, &t);
  }
}

void di_fwd_matmul(di_forward_ctx *f, const di_tensor *w, const float *x, int64_t M, float *y) {
  di_fwd_matmul_n(f, &w, &y, 1, x, M);
}


/* ---- attention: K/V locations (the work itself: the backend's attn op) ---- */

/* Where layer il's K/V live: a table of the sequence and a layer slot of its
 * blocks (kv_loc). Without per-group tables every layer is in `blocks` at its own index. */
/* idx: the layer's index among the layers of its kind (full or sliding-window). */
static kv_loc layer_kv(const di_kv_pool *kv, const di_batch *b, int il, bool swa, int idx) {
  if (b->n_swa_tables == 0) return (kv_loc){-1, il};
  return swa ? (kv_loc){idx / kv->n_layers, idx % kv->n_layers} : (kv_loc){-1, idx};
}

void di_forward_kv_spec(const di_model *m, di_kv_spec *s) {
  di_forward_kv_spec_rank(m, m->tp_rank, m->tp_size, s);
}

void di_forward_kv_spec_rank(const di_model *m, int rank, int size, di_kv_spec *s) {
  const di_hparams *hp = &m->hp;
  int g0, g1, q0, q1;
  di_tp_gqa_heads(hp, rank, size, &g0, &g1, &q0, &q1);
  *s = (di_kv_spec){.n_layers = hp->n_layer, .kv_dim = (g1 - g0) * hp->head_dim};
  if (hp->attn_kind == DI_ATTN_MLA) s->kv_dim = hp->kv_lora_rank + hp->rope_dim, s->v_in_k = true;
  if (hp->attn_kind == DI_ATTN_DSV4) di_fwd_v4_kv_spec(m, s);
}

void di_forward_capture_hidden(di_forward_ctx *f, float *rows) { f->hidden_out = rows; }

di_code di_fwd_check_batch(const di_forward_ctx *f, const di_kv_pool *kv, const di_batch *b, di_status *st) {
  const di_hparams *hp = &f->m->hp;
  if (b->n_tokens <= 0 || b->n_tokens > f->max_tokens)
    return di_errorf(st, DI_ERR_INVALID, "forward: batch of %d tokens (1..%d allowed)", b->n_tokens, f->max_tokens);
  int n_swa = 0;
  for (int il = 0; il < hp->n_layer; il++) n_swa += di_hparams_layer_is_swa(hp, il);
  bool grouped = b->n_swa_tables > 0;
  di_kv_spec spec;
  di_forward_kv_spec(f->m, &spec);
  /* an MTP module's cache is one more layer after the main ones (--spec mtp) */
  bool mtp_layer = f->m->mtp && !grouped && kv->n_layers == hp->n_layer + 1;
  /* (DeepSeek-V4's grouped cache has its own geometry: checked by its forward) */
  bool v4_grouped = grouped && hp->attn_kind == DI_ATTN_DSV4 && b->n_swa_tables <= DI_KV_MAX_SWA_TABLES;
  if (!v4_grouped &&
      (kv->kv_dim != spec.kv_dim || kv->v_in_k != spec.v_in_k ||
       (!grouped && kv->n_layers != spec.n_layers && !mtp_layer) ||
       (grouped && (kv->n_layers != hp->n_layer - n_swa || b->n_swa_tables > DI_KV_MAX_SWA_TABLES ||
                    b->n_swa_tables * kv->n_layers < n_swa))))
    return di_errorf(st, DI_ERR_INVALID, "forward: KV pool geometry does not match the model");
  for (int t = 0; t < b->n_tokens; t++) {
    if (b->tokens[t] < 0 || b->tokens[t] >= hp->n_vocab)
      return di_errorf(st, DI_ERR_RANGE, "token id %d out of range [0, %d)", b->tokens[t], hp->n_vocab);
    if (b->seq[t] < 0 || b->seq[t] >= b->n_seqs)
      return di_errorf(st, DI_ERR_INVALID, "forward: token %d has bad sequence index %d", t, b->seq[t]);
    const di_batch_seq *s = &b->seqs[b->seq[t]];
    if (b->pos[t] < 0 || b->pos[t] / kv->block_size >= s->n_blocks)
      return di_errorf(st, DI_ERR_RANGE, "forward: position %d has no KV block (table of %d)", b->pos[t],
                       s->n_blocks);
    /* V4's window tables map only the positions later steps read (its forward checks its reads) */
    for (int k = 0; k < (v4_grouped ? 0 : b->n_swa_tables); k++)
      if (b->pos[t] / kv->block_size >= s->n_swa_blocks || s->swa[k][b->pos[t] / kv->block_size] < 0)
        return di_errorf(st, DI_ERR_RANGE, "forward: position %d has no sliding-window KV block", b->pos[t]);
  }
  return DI_OK;
}

/* ---- per-token stages between the matmuls, parallel over tokens ---- */

/* Each thread a contiguous range of tokens: kernels that take several rows
 * at once get them together (par_rows); per-token stages loop over theirs. */
static void rows_run(void *p, int ith, int nth) {
  stage_ctx *c = p;
  const int n = c->b->n_tokens;
  c->rows(c, (int)((int64_t)n * ith / nth), (int)((int64_t)n * (ith + 1) / nth));
}

/* Small batches (decode) run inline: a thread sync costs more than the work. */
static void par_rows(stage_ctx *c, void (*rows)(stage_ctx *, int, int)) {
  c->rows = rows;
  if (c->b->n_tokens < 4) rows_run(c, 0, 1);
  else di_threadpool_run(c->f->tp, rows_run, c);
}

static void tokens_rows(stage_ctx *c, int t0, int t1) {
  for (int t = t0; t < t1; t++) c->fn(c, t);
}

void di_fwd_par_tokens(stage_ctx *c, void (*fn)(stage_ctx *, int)) {
  c->fn = fn;
  par_rows(c, tokens_rows);
}

/* the input norm of tokens [t0, t1) */
static void norm_rows(stage_ctx *c, const di_tensor *w, int t0, int t1) {
  const di_hparams *hp = &c->f->m->hp;
  const size_t D = (size_t)hp->n_embd, o = (size_t)t0 * D;
  c->f->be->rms_norm_rows(c->f->x + o, D, w->data, c->f->xn + o, D, t1 - t0, hp->n_embd, hp->rms_eps);
}

/* Rows [t0, t1) of the next matmul's input prepared by the thread that just
 * wrote them, so matmul_n skips its own preparation pass and the sync after it. */
static void prep_rows(stage_ctx *c, int t0, int t1) {
  if (c->prep_w) prepare_rows(c->f->be, c->prep_w, c->prep_x, c->f->xq, t0, t1);
}

/* A row stage whose last step is prep_rows for w on X (w NULL: none); after
 * it, matmul_n may use xq as prepared. One place names the matmul for both. */
static void par_rows_prep(stage_ctx *c, void (*rows)(stage_ctx *, int, int), const di_tensor *w, const float *X) {
  c->prep_w = w, c->prep_x = X;
  par_rows(c, rows);
  c->prep_w = NULL;
  if (!w) return;
  c->f->xq_src = X;
  c->f->xq_fmt = c->f->be->act_format(w->type);
}

static void st_attn_norm(stage_ctx *c, int t0, int t1) {
  norm_rows(c, &c->L->attn_norm, t0, t1);
  prep_rows(c, t0, t1);
}

/* bias, QK-norm, RoPE, and K/V into the token's cache slot */
static void st_qk(stage_ctx *c, int t) {
  di_forward_ctx *f = c->f;
  const di_hparams *hp = c->ahp ? c->ahp : &f->m->hp; /* this rank's heads where split */
  const di_layer_weights *L = c->L;
  const di_backend *be = f->be;
  const int H = hp->n_head, HKV = hp->n_head_kv, hd = hp->head_dim, kvd = HKV * hd, rd = hp->rope_dim;
  const size_t qo = (size_t)c->qhead0 * hd, ko = (size_t)c->head0 * hd; /* into the biases */
  float *q = f->q + (size_t)t * H * hd, *k = f->k + (size_t)t * kvd, *v = f->v + (size_t)t * kvd;
  if (L->bq.data) be->add(q, (const float *)L->bq.data + qo, H * hd);
  if (L->bk.data) be->add(k, (const float *)L->bk.data + ko, kvd);
  if (L->bv.data) be->add(v, (const float *)L->bv.data + ko, kvd);
  const float *cs = c->rope + (size_t)t * rd;
  for (int h = 0; h < H; h++) {
    if (hp->qk_norm) be->rms_norm(q + h * hd, L->q_norm.data, q + h * hd, hd, hp->rms_eps);
    be->rope(q + h * hd, cs, rd, hp->rope_type);
  }
  for (int h = 0; h < HKV; h++) {
    if (hp->qk_norm) be->rms_norm(k + h * hd, L->k_norm.data, k + h * hd, hd, hp->rms_eps);
    be->rope(k + h * hd, cs, rd, hp->rope_type);
  }
  di_kv_pool *kv = c->kv;
  const di_batch *b = c->b;
  const di_batch_seq *bs = &b->seqs[b->seq[t]];
  if (c->loc.table < 0 && b->pos[t] < bs->full_cached) return; /* a replay: the cached rows are these */
  int32_t blk = di_batch_seq_table(bs, c->loc.table)[b->pos[t] / kv->block_size];
  int slot = b->pos[t] % kv->block_size;
  for (int h = 0; h < HKV; h++) {
    size_t o = di_kv_head_offset(kv, h, slot, hd);
    be->kv_store((uint8_t *)di_kv_k(kv, blk, c->loc.layer) + o, k + h * hd, hd, kv->type);
    be->kv_store((uint8_t *)di_kv_v(kv, blk, c->loc.layer) + o, v + h * hd, hd, kv->type);
  }
}

/* residual add of a block's output (post-normed for Gemma) */
static void residual(stage_ctx *c, int t, const di_tensor *post) {
  const di_hparams *hp = &c->f->m->hp;
  size_t o = (size_t)t * hp->n_embd;
  float *y = c->f->tmp + o;
  if (post->data) c->f->be->rms_norm(y, post->data, y, hp->n_embd, hp->rms_eps);
  c->f->be->add(c->f->x + o, y, hp->n_embd);
}

static void st_attn_out(stage_ctx *c, int t0, int t1) {
  for (int t = t0; t < t1; t++) residual(c, t, &c->L->attn_post_norm);
  norm_rows(c, &c->L->ffn_norm, t0, t1);
  prep_rows(c, t0, t1);
}

static void st_glu(stage_ctx *c, int t0, int t1) {
  const size_t F = (size_t)c->f->m->hp.n_ff, c0 = (size_t)c->c0, n = c->c1 > c->c0 ? (size_t)(c->c1 - c->c0) : F;
  for (int t = t0; t < t1; t++)
    c->f->be->glu(c->f->gate + t * F + c0, c->f->up + t * F + c0, (int)n, c->f->m->hp.act);
  prep_rows(c, t0, t1);
}

/* Tensor parallel dense FFN: gate and up split alike by column, so each rank
 * applies the (elementwise) GLU to its own columns before the one gather,
 * which then moves the GLU's output instead of both inputs (half the bytes).
 * Its columns start on 16-column tiles, so the GLU's SIMD chunks fall where
 * they fall in a whole row: the same bits. */
static void ffn_dense_tp(stage_ctx *sc) {
  di_forward_ctx *f = sc->f;
  const di_layer_weights *L = sc->L;
  const int T = sc->b->n_tokens;
  const di_tensor *gu_w[] = {&L->w_gate, &L->w_up};
  float *gu_y[] = {f->gate, f->up};
  f->tp_keep = true;
  di_fwd_matmul_n(f, gu_w, gu_y, 2, f->xn, T);
  f->tp_keep = false;
  di_tp_cols(f->m->hp.n_ff, f->m->tp_rank, f->m->tp_size, &sc->c0, &sc->c1);
  if (sc->c1 > sc->c0) par_rows(sc, st_glu);
  sc->c0 = sc->c1 = 0;
  di_fwd_tp_gather(f, &L->w_gate, f->gate, T, &L->w_down);
  di_fwd_matmul(f, &L->w_down, f->gate, T, f->tmp);
}

/* the FFN's residual, then (next: the next layer's weights) that layer's
 * input norm, so one stage sits between the two layers */
static void st_ffn_out(stage_ctx *c, int t0, int t1) {
  for (int t = t0; t < t1; t++) residual(c, t, &c->L->ffn_post_norm);
  if (!c->next) return;
  stage_ctx n = *c;
  n.L = c->next;
  st_attn_norm(&n, t0, t1);
}

/* ---- batch split: each thread runs the whole forward for its own sequences ----
 *
 * A decode step of a small model is hundreds of short ops; split across
 * threads by output column, each op ends in a handoff and the threads spend a
 * fifth of the step waiting on each other. Whole sequences per thread need no
 * handoff at all until the end of the step, at the price of each thread
 * reading every weight (from a shared cache, on a small model). The logits do
 * not change: a token's result does not depend on the batch around it. */

typedef struct split_task {
  di_forward_ctx *f;
  di_kv_pool *kv;
  di_batch part[SPLIT_MAX_PARTS];
  float *logits[SPLIT_MAX_PARTS];
  di_code rc[SPLIT_MAX_PARTS];
  di_status st[SPLIT_MAX_PARTS];
} split_task;

static void split_run(void *p, int ith, int nth) {
  (void)nth;
  split_task *t = p;
  if (ith < t->f->n_parts) t->rc[ith] = di_forward(t->f->part[ith], t->kv, &t->part[ith], t->logits[ith], &t->st[ith]);
}

/* Weights small enough that two threads reading all of them costs less than
 * handing every op between them: a model of up to ~1k hidden units. Not
 * where the packed GEMMs run on AMX: there each thread's share of the rows
 * (8 of 16 streams) falls below or near one 16-row tile, and splitting the
 * columns instead measured 15-25% faster at 8, 16 and 32 SmolLM2 streams. */
static bool split_by_size(const di_model *m) { return m->hp.n_embd <= 1024 && !m->backend->wide_gemm(); }

/* Cuts b into n_parts runs of about equal tokens at sequence boundaries; false
 * when the batch cannot be cut that way (a sequence in two runs, a run empty,
 * over its context's size or over 1.5x its share). */
static bool split_plan(di_forward_ctx *f, const di_batch *b, float *logits, split_task *t) {
  const int T = b->n_tokens, n = f->n_parts;
  if (f->tpar) return false; /* exchanges are made by one thread of each rank */
  if (n < 2 || T < 2 * n || T > n * f->part[0]->max_tokens) return false;
  const int per = f->part[0]->max_tokens;
  if (f->split_mode == 0 && !split_by_size(f->m)) return false;
  const bool *want = b->want_logits;
  if (!want) {
    for (int i = 0; i < T; i++) f->split_want[i] = i == T - 1;
    want = f->split_want;
  }
  int start = 0, n_out = 0;
  for (int k = 0; k < n; k++) {
    int end = k == n - 1 ? T : (int)((int64_t)T * (k + 1) / n);
    while (end < T && end > start && b->seq[end] == b->seq[end - 1]) end++;
    /* a run far over its share would leave the other threads idle */
    if (end <= start || end - start > per || 2 * (end - start) * n > 3 * T) return false;
    t->part[k] = (di_batch){.n_tokens = end - start, .tokens = b->tokens + start, .pos = b->pos + start,
                            .seq = b->seq + start, .want_logits = want + start, .n_seqs = b->n_seqs,
                            .seqs = b->seqs, .n_swa_tables = b->n_swa_tables};
    t->logits[k] = logits ? logits + (size_t)n_out * f->m->hp.n_vocab : NULL;
    f->part[k]->hidden_out = f->hidden_out ? f->hidden_out + (size_t)start * f->m->hp.n_embd : NULL;
    for (int i = start; i < end; i++) n_out += want[i];
    start = end;
  }
  /* each sequence's tokens must lie in one run (K/V written and read in one place) */
  for (int i = 1; i < T; i++)
    for (int j = 0; j < i && b->seq[i] != b->seq[i - 1]; j++)
      if (b->seq[j] == b->seq[i]) return false;
  return true;
}

/* Token tok's embedding row. A tied classifier split by vocabulary
 * (tp_slice.c) holds this rank's rows, prepared (packed) for the backend in
 * place, so those are read through it; the rest of the embedding is as in
 * the file. */
static void embed_row(const di_forward_ctx *f, int32_t tok, float *dst) {
  const di_tensor *e = &f->m->tok_embd, *o = &f->m->output;
  if (o->sliced && o->data && o->type == e->type && o->row_bytes == e->row_bytes &&
      (const uint8_t *)o->data == (const uint8_t *)e->data + (size_t)o->row0 * o->row_bytes && tok >= o->row0 &&
      tok < o->row0 + o->nrows) {
    di_tensor v = *o;
    v.ne[1] = o->nrows, v.sliced = false, v.row0 = v.nrows = 0;
    f->be->get_row(&v, tok - o->row0, dst);
  } else {
    f->be->get_row(e, tok, dst);
  }
}

void di_fwd_embed(di_forward_ctx *f, const di_batch *b, float *x) {
  const di_model *m = f->m;
  const di_hparams *hp = &m->hp;
  const int D = hp->n_embd;
  for (int t = 0; t < b->n_tokens; t++) {
    embed_row(f, b->tokens[t], x + (size_t)t * D);
    if (hp->embd_scale) f->be->scale(x + (size_t)t * D, D, sqrtf((float)D));
  }
}

/* RoPE tables per token: global layers and sliding-window layers */
void di_fwd_rope_tables(di_forward_ctx *f, const di_batch *b) {
  const di_hparams *hp = &f->m->hp;
  const int rd = hp->rope_dim;
  bool local_unscaled = hp->rope_local_unscaled; /* gemma3 scales only its global layers */
  for (int t = 0; t < b->n_tokens; t++) {
    f->be->rope_cache(f->rope_g + (size_t)t * rd, b->pos[t], rd, hp->rope_base, hp, true, f->freq_factors);
    f->be->rope_cache(f->rope_l + (size_t)t * rd, b->pos[t], rd, hp->rope_base_local, hp, !local_unscaled,
                      f->freq_factors);
  }
}

/* The first matmul on a layer's normed input (its activations are prepared
 * by the norm's stage). */
static const di_tensor *first_matmul(const di_hparams *hp, const di_layer_weights *L) {
  if (L->attn == DI_ATTN_MLA) return hp->q_lora_rank > 0 ? &L->wq_a : &L->wq;
  return &L->wq;
}

/* Tensor parallel attention split by heads (di_tp_gqa_heads): Q/K/V of the
 * rank's heads (its weight rows), their cache (the rank's pool holds only
 * its KV heads) and attention, then every rank's heads gathered into f->att
 * for the column-split output projection. Heads are independent, so each
 * one's values are those of one rank. A single KV head is computed and
 * cached whole on every rank (its wk/wv unsplit); with fewer KV heads than
 * ranks each rank computes the one KV head its query heads read. */
static di_code attn_heads(stage_ctx *sc, bool swa, di_status *st) {
  di_forward_ctx *f = sc->f;
  const di_hparams *hp = &f->m->hp;
  const di_layer_weights *L = sc->L;
  const int T = sc->b->n_tokens;
  int k0, k1, q0, q1;
  di_tp_gqa_heads(hp, f->m->tp_rank, f->m->tp_size, &k0, &k1, &q0, &q1);
  di_hparams ahp = *hp;
  ahp.n_head_kv = k1 - k0;
  ahp.n_head = q1 - q0;
  const di_tensor *qkv_w[] = {&L->wq, &L->wk, &L->wv};
  float *qkv_y[] = {f->q, f->k, f->v};
  f->tp_local = true; /* the rank's rows of each, or all of a single KV head's */
  di_fwd_matmul_n(f, qkv_w, qkv_y, 3, f->xn, T);
  f->tp_local = false;
  sc->ahp = &ahp, sc->head0 = k0, sc->qhead0 = q0;
  di_fwd_par_tokens(sc, st_qk);
  sc->ahp = NULL, sc->head0 = sc->qhead0 = 0;
  float *att = di_fwd_tp_heads_buf(f, (size_t)T * (size_t)hp->n_head * hp->head_dim);
  if (!att) return DI_OK; /* the step has failed (di_fwd_tp_result says why) */
  di_code rc = f->be->attn(f->attn, f->tp, &ahp, sc->kv, sc->b, sc->loc.table, sc->loc.layer, swa, f->q, att, st);
  if (!rc) di_fwd_tp_gather_heads(f, f->att, T, hp->head_dim, &L->wo);
  return rc;
}

di_code di_fwd_layer(di_forward_ctx *f, di_kv_pool *kv, const di_batch *b, const di_layer_weights *L, kv_loc loc,
                     bool swa, bool first, const di_layer_weights *next, di_status *st) {
  const di_hparams *hp = &f->m->hp;
  const int T = b->n_tokens;
  di_code rc;
  stage_ctx sc = {.f = f, .kv = kv, .b = b, .L = L, .loc = loc, .rope = swa ? f->rope_l : f->rope_g, .next = next};

  /* attention block (the first layer's input norm; the others' ran in st_ffn_out) */
  if (first) par_rows_prep(&sc, st_attn_norm, first_matmul(hp, L), f->xn);
  if (L->attn == DI_ATTN_MLA) {
    if ((rc = di_fwd_attn_mla(&sc, st))) return rc;
  } else if (f->tpar && di_tp_gqa_split(hp, f->m->tp_size)) {
    if ((rc = attn_heads(&sc, swa, st))) return rc;
  } else {
    const di_tensor *qkv_w[] = {&L->wq, &L->wk, &L->wv};
    float *qkv_y[] = {f->q, f->k, f->v};
    di_fwd_matmul_n(f, qkv_w, qkv_y, 3, f->xn, T);
    di_fwd_par_tokens(&sc, st_qk);
    if ((rc = f->be->attn(f->attn, f->tp, hp, kv, b, loc.table, loc.layer, swa, f->q, f->att, st))) return rc;
  }
  di_fwd_matmul(f, &L->wo, f->att, T, f->tmp);
  /* residual, then the FFN's input norm */
  par_rows_prep(&sc, st_attn_out, L->ffn == DI_FFN_MOE ? &L->router : &L->w_gate, f->xn);

  /* feed-forward block */
  if (L->ffn == DI_FFN_MOE) {
    di_fwd_ffn_moe(&sc);
  } else if (f->tpar) {
    ffn_dense_tp(&sc);
  } else {
    const di_tensor *gu_w[] = {&L->w_gate, &L->w_up};
    float *gu_y[] = {f->gate, f->up};
    di_fwd_matmul_n(f, gu_w, gu_y, 2, f->xn, T);
    par_rows_prep(&sc, st_glu, &L->w_down, f->gate);
    di_fwd_matmul(f, &L->w_down, f->gate, T, f->tmp);
  }
  par_rows_prep(&sc, st_ffn_out, next ? first_matmul(hp, next) : NULL, f->xn);
  return DI_OK;
}

static di_code forward_run(di_forward_ctx *f, di_kv_pool *kv, const di_batch *b, float *logits, di_status *st);

di_code di_forward(di_forward_ctx *f, di_kv_pool *kv, const di_batch *b, float *logits, di_status *st) {
  di_code rc;
  if ((rc = di_fwd_check_batch(f, kv, b, st))) return rc;
  if (f->tpar && (rc = di_fwd_tp_step(f, kv, b, NULL, st))) return rc;
  rc = forward_run(f, kv, b, logits, st);
  return f->tpar && !rc ? di_fwd_tp_result(f, st) : rc;
}

static di_code forward_run(di_forward_ctx *f, di_kv_pool *kv, const di_batch *b, float *logits, di_status *st) {
  di_code rc;
  if (f->m->hp.attn_kind == DI_ATTN_DSV4) return di_fwd_v4(f, kv, b, logits, st);
  split_task split = {.f = f, .kv = kv};
  if (split_plan(f, b, logits, &split)) {
    di_threadpool_run(f->tp, split_run, &split);
    for (int k = 0; k < f->n_parts; k++)
      if (split.rc[k]) {
        *st = split.st[k];
        return split.rc[k];
      }
    return DI_OK;
  }
  const di_model *m = f->m;
  const di_hparams *hp = &m->hp;
  const int T = b->n_tokens, D = hp->n_embd;

  di_fwd_embed(f, b, f->x);
  di_fwd_rope_tables(f, b);

  int n_kind[2] = {0, 0}; /* full and sliding-window layers so far */
  for (int il = 0; il < hp->n_layer; il++) {
    bool swa = di_hparams_layer_is_swa(hp, il);
    kv_loc loc = layer_kv(kv, b, il, swa, n_kind[swa]++);
    if ((rc = di_fwd_layer(f, kv, b, &m->layers[il], loc, swa, il == 0, il + 1 < hp->n_layer ? &m->layers[il + 1] : NULL,
                           st)))
      return rc;
  }
  if (f->hidden_out) memcpy(f->hidden_out, f->x, (size_t)T * D * sizeof *f->x);

  /* classifier for the tokens that want logits */
  int n_out = 0;
  for (int t = 0; t < T; t++) {
    bool want = b->want_logits ? b->want_logits[t] : t == T - 1;
    if (!want) continue;
    f->be->rms_norm(f->x + (size_t)t * D, m->output_norm.data, f->xn + (size_t)n_out * D, D, hp->rms_eps);
    n_out++;
  }
  di_fwd_classifier(f, b, logits, n_out);
  return DI_OK;
}

void di_fwd_classifier(di_forward_ctx *f, const di_batch *b, float *logits, int n_out) {
  const di_model *m = f->m;
  const di_hparams *hp = &m->hp;
  if (!n_out) return;
  if (f->tpar && b->split) { /* each rank reduces its vocabulary slice */
    f->tp_keep = true;
    di_fwd_matmul(f, &m->output, f->xn, n_out, logits);
    f->tp_keep = false;
    di_fwd_tp_split_logits(f, b->split, logits, n_out, hp->final_softcap);
    return;
  }
  f->tp_leader_only = true; /* the engine (rank 0's) reads logits; a follower's stay partial */
  di_fwd_matmul(f, &m->output, f->xn, n_out, logits);
  f->tp_leader_only = false;
  if (hp->final_softcap > 0) f->be->softcap(logits, n_out * hp->n_vocab, hp->final_softcap);
}
