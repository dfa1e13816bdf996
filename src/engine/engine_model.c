/* The real model behind the engine: loader, forward pass and tokenizer,
 * adapted to di_engine_backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_model.h"

#include "backend/backend.h"
#include "engine/engine_internal.h"
#include "dist/comm.h"
#include "graph/forward.h"
#include "graph/forward_tp.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

typedef struct di_model_backend {
  di_model *model;
  di_forward_ctx *fwd;
  di_tokenizer *tok;
  bool parse_special;
  int32_t eos[16];
  float *hidden;  /* --spec mtp: the forward's last hidden states */
} di_model_backend;

static di_code mb_forward(void *u, di_kv_pool *kv, const di_batch *b, float *logits, di_status *st) {
  di_model_backend *m = u;
  return di_forward(m->fwd, kv, b, logits, st);
}

static di_code mb_forward_mtp(void *u, di_kv_pool *kv, const di_batch *b, const float *hidden, float *logits,
                             float *hidden_out, di_status *st) {
  di_model_backend *m = u;
  return di_forward_mtp(m->fwd, kv, b, hidden, logits, hidden_out, st);
}

static di_code mb_encode(void *u, const char *text, size_t len, bool parse_special, int32_t **ids, size_t *n,
                         di_status *st) {
  di_model_backend *m = u;
  return di_tokenizer_encode(m->tok, text, len, true, parse_special || m->parse_special, ids, n, st);
}

static void *mb_detok_new(void *u) {
  di_model_backend *m = u;
  di_detok_stream *s = NULL;
  di_status st = {0};
  return di_detok_stream_new(m->tok, true, &s, &st) == DI_OK ? s : NULL;
}

static void mb_detok_push(void *s, int32_t id, const char **text, size_t *len) {
  di_status st = {0};
  if (di_detok_stream_push(s, id, text, len, &st) != DI_OK) *len = 0;
}

static void mb_detok_flush(void *s, const char **text, size_t *len) {
  di_status st = {0};
  if (di_detok_stream_flush(s, text, len, &st) != DI_OK) *len = 0;
}

static void mb_detok_free(void *s) { di_detok_stream_free(s); }

static void mb_destroy(void *u) {
  di_model_backend *m = u;
  if (!m) return;
  di_forward_ctx_free(m->fwd);
  free(m->hidden);
  di_tokenizer_free(m->tok);
  di_engine_free_weights(m->model);
  free(m);
}

di_code di_engine_load_weights(const char *path, bool use_mmap, bool tp, di_model **out, di_status *st) {
  di_model_opts mo = {.use_mmap = use_mmap};
  if (tp && di_dist_active()) mo.tp_rank = di_dist_rank(), mo.tp_size = di_dist_size();
  /* the CPU backend: the only one so far; its prepare step packs the weights */
  return di_backend_load_model(di_backend_cpu(), path, &mo, out, st);
}

void di_engine_free_weights(di_model *m) { di_backend_free_model(m); }

/* --swa-window N: every layer slides with window N. A model that already has
 * sliding layers keeps its own layout (N must equal its window): turning its
 * global layers into sliding ones would also change their RoPE. */
static di_code force_window(di_model *m, const di_engine_opts *o, di_status *st) {
  di_hparams *hp = &m->hp;
  if (hp->attn_kind != DI_ATTN_GQA)
    return di_errorf(st, DI_ERR_UNSUPPORTED, "--swa-window %d: %s's attention (latent or compressed) takes no forced window",
                     o->swa_window, hp->arch);
  if (hp->sliding_window > 0) {
    if (hp->sliding_window != o->swa_window)
      return di_errorf(st, DI_ERR_INVALID, "--swa-window %d: this %s model's layers already slide with window %d",
                       o->swa_window, hp->arch, hp->sliding_window);
    return DI_OK;
  }
  hp->sliding_window = o->swa_window;
  hp->swa_pattern = 0;
  return DI_OK;
}

/* Loads the model at path (weights, tokenizer, forward scratch) as an engine
 * backend; on failure nothing is left allocated. lead: the main model, whose
 * forward runs tensor parallel when the process is rank 0 of several (a
 * draft model runs on rank 0 alone). */
static di_code backend_open(const char *path, const di_engine_opts *o, bool lead, di_engine_backend *be,
                            di_status *st) {
  memset(be, 0, sizeof *be);
  di_model_backend *m = calloc(1, sizeof *m);
  di_code rc = m ? DI_OK : di_errorf(st, DI_ERR_NOMEM, "engine: out of memory");
  if (rc == DI_OK) rc = di_engine_load_weights(path, o->use_mmap != 0, lead, &m->model, st);
  if (rc == DI_OK)
    rc = m->model->gguf ? di_tokenizer_from_gguf(m->model->gguf, &m->tok, st) : di_tokenizer_load(path, &m->tok, st);
  if (rc != DI_OK && m && m->model && o->tokenizer_optional) { /* ids in, ids out */
    di_status_clear(st);
    m->tok = NULL;
    rc = DI_OK;
  }
  if (rc == DI_OK && o->swa_window > 0) rc = force_window(m->model, o, st);
  /* DeepSeek-V4 under --spec mtp: the cache plan holds the MTP block's window
   * (one more sliding layer's values); settled before the followers load (--tp) */
  if (rc == DI_OK)
    m->model->hp.v4.mtp_kv = o->spec == DI_SPEC_MTP && m->model->mtp && m->model->hp.attn_kind == DI_ATTN_DSV4;
  int max_batch = o->max_batch_tokens > 0 ? o->max_batch_tokens : 512;
  if (rc == DI_OK) rc = di_forward_ctx_create(m->model, max_batch, o->threads, &m->fwd, st);
  if (rc == DI_OK && lead && di_dist_active() && di_dist_rank() == 0)
    rc = di_forward_tp_lead(m->fwd, path, o->threads, max_batch, o->use_mmap != 0, st);
  if (rc != DI_OK) {
    mb_destroy(m);
    return rc;
  }
  const di_hparams *hp = &m->model->hp;
  m->parse_special = o->allow_special_in_content != 0;
  be->n_vocab = hp->n_vocab;
  be->n_ctx = hp->n_ctx_train > 0 ? hp->n_ctx_train : 4096;
  /* A forced window (testing) bounds what every layer sees, so --ctx may pass the trained context. */
  if (o->swa_window > 0 && o->ctx > be->n_ctx) be->n_ctx = o->ctx;
  const bool v4_mtp = hp->v4.mtp_kv;
  di_kv_spec spec;
  di_forward_kv_spec(m->model, &spec);
  be->n_layers = spec.n_layers; /* DeepSeek-V4: one pool layer holding every layer's values */
  be->kv_dim = spec.kv_dim;
  be->kv_v_in_k = spec.v_in_k;
  /* Layer groups (kv/table.h): all sliding -> one table under WINDOW; mixed ->
   * the pool's blocks hold the full-attention layers and the sliding ones
   * are spread over ceil(n_swa / n_full) WINDOW tables of the same blocks. */
  int n_swa = 0;
  for (int il = 0; il < hp->n_layer; il++) n_swa += di_hparams_layer_is_swa(hp, il);
  int n_full = hp->n_layer - n_swa;
  be->policy = n_swa > 0 && n_full == 0 ? DI_KV_POLICY_WINDOW : DI_KV_POLICY_FULL;
  be->window = n_swa > 0 ? hp->sliding_window : 0;
  if (o->swa_full) be->policy = DI_KV_POLICY_FULL; /* sliding layers keep every position; attention still slides */
  if (n_swa > 0 && n_full > 0 && (n_swa + n_full - 1) / n_full <= DI_KV_MAX_SWA_TABLES && !o->swa_full &&
      !getenv("DI_KV_NO_GROUPS")) {
    be->n_layers = n_full;
    be->n_swa_tables = (n_swa + n_full - 1) / n_full;
  }
  /* DeepSeek-V4: compressed rows in the main table, raw rows and compressor
   * projections in window tables (graph/dsv4.h); --swa-full keeps one row of
   * everything per position (the reference layout). */
  if (hp->attn_kind == DI_ATTN_DSV4 && !o->swa_full && !getenv("DI_KV_NO_GROUPS")) {
    di_v4_geometry g;
    di_forward_v4_geometry(hp, o->block_size > 0 ? o->block_size : 16, &g);
    be->n_layers = 1;
    be->kv_dim = g.unit;
    be->policy = DI_KV_POLICY_FULL;
    be->window = g.window;
    be->n_swa_tables = g.n_tables;
    be->window_sparse = true; /* a step's own window rows come from the forward's scratch */
    be->n_swa_short = g.n_short;
    be->window_short = g.short_window;
    be->align = g.align > (o->block_size > 0 ? o->block_size : 16) ? g.align : 0;
  }
  const int32_t *eos = NULL;
  size_t n_eos = m->tok ? di_tokenizer_eos(m->tok, &eos) : 0;
  int k = 0;
  if (hp->eos_id >= 0) m->eos[k++] = hp->eos_id;
  for (size_t i = 0; i < n_eos && k < 16; i++)
    if (eos[i] != hp->eos_id) m->eos[k++] = eos[i];
  be->eos_ids = m->eos;
  be->n_eos = k;
  be->user = m;
  be->forward = mb_forward;
  /* the tensor parallel classifier reduces split logits rows for sampling
   * (DI_TP_FULL_LOGITS=1: whole rows, to measure the difference) */
  be->split_logits = lead && di_dist_active() && !getenv("DI_TP_FULL_LOGITS");
  if (m->tok) {
    be->encode = mb_encode;
    be->detok_new = mb_detok_new;
    be->detok_push = mb_detok_push;
    be->detok_flush = mb_detok_flush;
    be->detok_free = mb_detok_free;
  }
  be->tokenizer = m->tok;
  be->destroy = mb_destroy;
  /* --spec mtp on a model with an MTP module: the engine reads the hidden
   * states, and the module's K/V are one more pool layer (without a module the
   * engine reports that --spec mtp cannot run) */
  if (o->spec == DI_SPEC_MTP && m->model->mtp && (be->n_swa_tables == 0 || v4_mtp)) {
    /* V4's hidden state is its hc_mult streams; its module's K/V are in the plan already */
    const int width = v4_mtp ? hp->v4.hc_mult * hp->n_embd : hp->n_embd;
    m->hidden = malloc((size_t)max_batch * (size_t)width * sizeof *m->hidden);
    if (!m->hidden) {
      mb_destroy(m);
      memset(be, 0, sizeof *be);
      return di_errorf(st, DI_ERR_NOMEM, "--spec mtp: out of memory");
    }
    di_forward_capture_hidden(m->fwd, m->hidden);
    if (!v4_mtp) be->n_layers++;
    be->n_embd = width;
    be->mtp_window = v4_mtp ? hp->v4.window : 0; /* V4's block slides like the main ones (attn_dsv4.c) */
    be->mtp_kv_only = v4_mtp;
    be->hidden = m->hidden;
    be->forward_mtp = mb_forward_mtp;
  }
  return DI_OK;
}

di_code di_engine_create(const di_engine_opts *o, di_engine **out, char *err, size_t errlen) {
  di_status st = {0};
  *out = NULL;
  di_engine_backend be, draft;
  di_code rc = o->model_path ? DI_OK : di_errorf(&st, DI_ERR_INVALID, "engine: no model path");
  if (rc == DI_OK) rc = backend_open(o->model_path, o, true, &be, &st);
  bool with_draft = rc == DI_OK && o->spec == DI_SPEC_DRAFT && o->draft_model_path;
  if (with_draft && (rc = backend_open(o->draft_model_path, o, false, &draft, &st)) != DI_OK) {
    di_error_wrap(&st, "--draft-model %s: ", o->draft_model_path);
    mb_destroy(be.user);
  }
  /* owns both backends from here, even on failure */
  if (rc == DI_OK) rc = di_engine_create_spec(o, &be, with_draft ? &draft : NULL, out, &st);
  if (rc != DI_OK && err && errlen) snprintf(err, errlen, "%s", st.msg);
  return rc;
}

const di_model *di_engine_model(const di_engine *e) {
  return e && e->be.destroy == mb_destroy ? ((const di_model_backend *)e->be.user)->model : NULL;
}
