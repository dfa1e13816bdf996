/* The engine: creation (pool, window groups, drafters), the step loop and
 * the stepping thread. Request intake is submit.c, the event stream
 * (detokenizer, stop strings, finish) events.c, scheduling scheduler.c and
 * the model behind di_engine_backend engine_model.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/comm.h"
#include "engine/engine_internal.h"
#include "kv/prefix.h"

#define DI_ENGINE_DEFAULT_KV_CAP ((size_t)1 << 30)

double di_engine_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void di_engine_opts_default(di_engine_opts *o) {
  memset(o, 0, sizeof *o);
  o->max_seqs = 16;
  o->max_batch_tokens = 512;
  o->block_size = 16;
  o->prefix_cache = 1;
}

void di_request_params_default(di_request_params *p) {
  memset(p, 0, sizeof *p);
  p->sampling.top_p = 1.0f;
  p->sampling.repetition_penalty = 1.0f;
  p->n = 1;
}

/* ---------------------------------------------------------------- create */

/* Window tables per sequence: the sliding-window ones, and the main table
 * when every layer slides. */
static int n_window_tables(const di_engine_backend *be) {
  if (be->window <= 0) return 0;
  return be->n_swa_tables + (be->policy == DI_KV_POLICY_WINDOW);
}

/* --swa-checkpoint / --swa-full / --no-replay: contradictions and C. */
static di_code swa_settings(di_engine *e, const di_engine_opts *o, const di_engine_backend *be, int bs, di_status *st) {
  if (o->swa_checkpoint < 0 || o->swa_window < 0)
    return di_errorf(st, DI_ERR_INVALID, "--swa-checkpoint %d / --swa-window %d: must be positive", o->swa_checkpoint,
                     o->swa_window);
  if (o->swa_full && o->no_replay)
    return di_errorf(st, DI_ERR_INVALID,
                     "--swa-full and --no-replay contradict: with full-size sliding-window KV there is nothing to replay");
  if (o->swa_checkpoint && (o->swa_full || o->no_replay))
    return di_errorf(st, DI_ERR_INVALID, "--swa-checkpoint %d and %s contradict: checkpoints exist for replay",
                     o->swa_checkpoint, o->swa_full ? "--swa-full" : "--no-replay");
  int nw = n_window_tables(be);
  if (o->swa_checkpoint && nw == 0)
    return di_errorf(st, DI_ERR_INVALID,
                     "--swa-checkpoint %d: this model keeps no sliding-window KV to checkpoint (see --swa-window)",
                     o->swa_checkpoint);
  if (o->swa_checkpoint && !o->prefix_cache)
    return di_errorf(st, DI_ERR_INVALID,
                     "--swa-checkpoint %d and --no-prefix-cache contradict: checkpoints live in the prefix cache",
                     o->swa_checkpoint);
  if (nw == 0 || o->no_replay || !o->prefix_cache) return DI_OK;
  int c = o->swa_checkpoint;
  if (c == 0) { /* 4 windows: replay <= 4 W positions, checkpoints cost about W/4 of every window kept */
    c = 4 * be->window;
    c = (c + bs - 1) / bs * bs;
  }
  if (c % bs != 0)
    return di_errorf(st, DI_ERR_INVALID, "--swa-checkpoint %d: not a multiple of the KV block size %d", c, bs);
  if (c < be->window)
    return di_errorf(st, DI_ERR_INVALID, "--swa-checkpoint %d: smaller than the sliding window %d", c, be->window);
  e->swa_ckpt = c;
  return DI_OK;
}

/* The pool must hold one sequence's windows (and a block of the rest). */
static di_code swa_pool_check(di_engine *e, const di_engine_opts *o, const di_engine_backend *be, int bs,
                              di_status *st) {
  int nw = n_window_tables(be);
  if (nw == 0) return DI_OK;
  int need = be->policy != DI_KV_POLICY_WINDOW;
  for (int k = 0; k < nw; k++) {
    int w = k < be->n_swa_tables ? di_engine_swa_window(be, k) : be->window;
    if (w > e->ctx) w = e->ctx;
    need += (w - 1 + bs - 1) / bs + 1;
  }
  if (e->pool->n_blocks >= need) return DI_OK;
  return di_errorf(st, DI_ERR_INVALID,
                   "--kv-mem %zu: the pool holds %d blocks of %d positions, but one sequence's sliding windows need "
                   "%d (window %d in %d tables)",
                   o->kv_mem ? o->kv_mem : (size_t)e->pool->n_blocks * e->pool->block_bytes, e->pool->n_blocks, bs,
                   need, be->window, nw);
}

di_code di_engine_create_backend(const di_engine_opts *o, const di_engine_backend *be, di_engine **out,
                                 di_status *st) {
  return di_engine_create_spec(o, be, NULL, out, st);
}

/* An engine that failed to start, and the draft backend it did not hand on. */
static void create_fail(di_engine *e, di_engine_backend *draft) {
  if (draft->destroy) draft->destroy(draft->user);
  di_engine_destroy(e);
}

di_code di_engine_create_spec(const di_engine_opts *o, const di_engine_backend *be, const di_engine_backend *draft,
                              di_engine **out, di_status *st) {
  *out = NULL;
  di_engine *e = calloc(1, sizeof *e);
  if (!e) {
    if (draft && draft->destroy) draft->destroy(draft->user);
    if (be->destroy) be->destroy(be->user);
    return di_errorf(st, DI_ERR_NOMEM, "engine: out of memory");
  }
  e->be = *be;
  e->max_seqs = o->max_seqs > 0 ? o->max_seqs : 16;
  e->max_batch_tokens = o->max_batch_tokens > 0 ? o->max_batch_tokens : 512;
  e->ctx = o->ctx > 0 && o->ctx < be->n_ctx ? o->ctx : be->n_ctx;
  int bs = o->block_size > 0 ? o->block_size : 16;
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  e->next_id = 1;
  di_engine_backend dbe = {0};
  if (draft) dbe = *draft; /* owned from here: freed below on an early error, else by the draft drafter */
  if (o->max_seqs < 0 || o->max_batch_tokens < 0 || o->block_size < 0 || o->ctx < 0) {
    create_fail(e, &dbe);
    return di_errorf(st, DI_ERR_INVALID, "engine: max_seqs, max_batch_tokens, block_size and ctx must be >= 0");
  }
  size_t kv_mem = o->kv_mem;
  di_kv_spec spec = {.n_layers = be->n_layers, .kv_dim = be->kv_dim, .v_in_k = be->kv_v_in_k,
                     .type = o->kv_type};
  if (kv_mem == 0) { /* enough for max_seqs full contexts (sliding-window tables: kv/table.h di_kv_window_span), capped */
    size_t per_seq = (size_t)((e->ctx + bs - 1) / bs + 1);
    if (be->n_swa_tables > 0) {
      for (int k = 0; k < be->n_swa_tables; k++) {
        int swa_pos = di_kv_window_span(di_engine_swa_window(be, k), e->max_batch_tokens, be->window_sparse);
        if (swa_pos > e->ctx) swa_pos = e->ctx;
        per_seq += (size_t)((swa_pos + bs - 1) / bs + 1);
      }
    }
    kv_mem = di_kv_spec_block_bytes(&spec, bs) * per_seq *
             (size_t)e->max_seqs;
    if (kv_mem > DI_ENGINE_DEFAULT_KV_CAP) kv_mem = DI_ENGINE_DEFAULT_KV_CAP;
  }
  if (o->spec < DI_SPEC_OFF || o->spec > DI_SPEC_MTP || o->spec_mode < DI_SPEC_AUTO || o->spec_mode > DI_SPEC_ALWAYS ||
      o->spec_k_max < 0 || o->spec_k_max > DI_SPEC_K_LIMIT) {
    create_fail(e, &dbe);
    return di_errorf(st, DI_ERR_INVALID, "engine: spec_k_max must be in [1, %d] (0 = default %d)", DI_SPEC_K_LIMIT,
                     DI_SPEC_K_DEFAULT);
  }
  const char *spec_err = NULL;
  if (o->spec == DI_SPEC_DRAFT && !draft) spec_err = "--spec draft needs --draft-model PATH";
  else if ((draft || o->draft_model_path) && o->spec != DI_SPEC_DRAFT) spec_err = "--draft-model needs --spec draft";
  if (spec_err) {
    create_fail(e, &dbe);
    return di_errorf(st, DI_ERR_INVALID, "%s", spec_err);
  }
  if (o->spec == DI_SPEC_NGRAM) {
    di_drafter_ngram(&e->spec.drafter);
  } else if (o->spec == DI_SPEC_DRAFT) {
    e->spec.drafter = (di_drafter){.name = "draft"};
  } else if (o->spec == DI_SPEC_MTP && be->forward_mtp && be->hidden && be->n_embd > 0) {
    e->spec.drafter = (di_drafter){.name = "mtp"};
    e->spec.mtp = true;
    size_t ring = DI_MTP_RING_BYTES / ((size_t)be->n_embd * sizeof(float)); /* DeepSeek-V3's 7168: 146 positions */
    e->spec.mtp_ring = ring < 64 ? 64 : ring > DI_MTP_RING_FULL ? DI_MTP_RING_FULL : (int)ring;
  } else if (o->spec != DI_SPEC_OFF) {
    create_fail(e, &dbe);
    return di_errorf(st, DI_ERR_UNSUPPORTED,
                     "--spec mtp: %s has no MTP (multi-token prediction) weights; use --spec ngram or off",
                     o->model_path ? o->model_path : "this model");
  }
  e->spec.on = o->spec != DI_SPEC_OFF;
  e->spec.always = o->spec_mode == DI_SPEC_ALWAYS;
  e->spec.k_max = o->spec_k_max > 0 ? o->spec_k_max : DI_SPEC_K_DEFAULT;
  if (be->n_swa_tables < 0 || be->n_swa_tables > DI_KV_MAX_SWA_TABLES) {
    create_fail(e, &dbe);
    return di_errorf(st, DI_ERR_INVALID, "engine: %d sliding-window tables (at most %d)", be->n_swa_tables,
                     DI_KV_MAX_SWA_TABLES);
  }
  size_t draft_mem = 0;
  if (draft) { /* both pools hold as many positions: the budget splits by bytes per position */
    size_t t = di_kv_spec_block_bytes(&spec, 1) * (size_t)(1 + be->n_swa_tables), d = di_spec_model_pos_bytes(draft, o->kv_type);
    if (o->kv_mem) {
      draft_mem = (size_t)((double)kv_mem * (double)d / (double)(t + d));
      kv_mem -= draft_mem;
    } else {
      draft_mem = (size_t)((double)kv_mem * (double)d / (double)t);
    }
  }
  di_code rc = DI_OK;
  if (draft) { /* first: its errors (vocabulary, budget) say more than the target pool's */
    rc = di_spec_model_create(e, &dbe, draft_mem, bs, o->kv_type, &e->spec.model, st);
    dbe.destroy = NULL;
  }
  if (rc == DI_OK) rc = swa_settings(e, o, be, bs, st);
  if (rc == DI_OK) rc = di_kv_pool_create_spec(&e->pool, kv_mem, bs, &spec, st);
  if (rc == DI_OK) rc = swa_pool_check(e, o, be, bs, st);
  if (rc == DI_OK && o->prefix_cache) rc = di_kv_prefix_enable(e->pool, st);
  if (rc == DI_OK) rc = di_sampler_init(&e->sampler, be->n_vocab, st);
  if (rc != DI_OK) {
    create_fail(e, &dbe);
    return rc;
  }
  int nt = e->max_batch_tokens, ns = e->max_seqs;
  e->b_tokens = malloc((size_t)nt * sizeof *e->b_tokens);
  e->b_pos = malloc((size_t)nt * sizeof *e->b_pos);
  e->b_seq = malloc((size_t)nt * sizeof *e->b_seq);
  e->b_want = malloc((size_t)nt * sizeof *e->b_want);
  e->b_seqs = malloc((size_t)ns * sizeof *e->b_seqs);
  e->b_owner = malloc((size_t)ns * sizeof *e->b_owner);
  bool mtp_ok = true, split_ok = true;
  e->logits = malloc((size_t)ns * (size_t)be->n_vocab * sizeof *e->logits);
  e->logits_cap = ns;
  e->cmask = calloc(((size_t)be->n_vocab + 31) / 32, sizeof *e->cmask);
  if (be->split_logits) {
    e->split_k = malloc((size_t)ns * sizeof *e->split_k);
    e->split_t = malloc((size_t)ns * sizeof *e->split_t);
    e->split_out = malloc((size_t)ns * DI_SPLIT_TOPK_MAX * sizeof *e->split_out);
    split_ok = e->split_k && e->split_t && e->split_out;
  }
  e->running.v = malloc((size_t)ns * sizeof *e->running.v);
  e->running.cap = ns;
  if (e->spec.mtp) {
    e->spec.mtp_hidden = malloc((size_t)nt * (size_t)be->n_embd * sizeof *e->spec.mtp_hidden);
    e->spec.mtp_out = malloc((size_t)nt * (size_t)be->n_embd * sizeof *e->spec.mtp_out);
    e->spec.mtp_tokens = malloc((size_t)nt * sizeof *e->spec.mtp_tokens);
    e->spec.mtp_pos = malloc((size_t)nt * sizeof *e->spec.mtp_pos);
    e->spec.mtp_seq = malloc((size_t)nt * sizeof *e->spec.mtp_seq);
    e->spec.mtp_want = malloc((size_t)nt * sizeof *e->spec.mtp_want);
    e->spec.mtp_depth = malloc((size_t)ns * sizeof *e->spec.mtp_depth);
    e->spec.mtp_chain = malloc((size_t)ns * (size_t)be->n_embd * sizeof *e->spec.mtp_chain);
    e->spec.mtp_grew = malloc((size_t)ns * sizeof *e->spec.mtp_grew);
    mtp_ok = e->spec.mtp_depth && e->spec.mtp_chain && e->spec.mtp_grew && e->spec.mtp_hidden && e->spec.mtp_out &&
             e->spec.mtp_tokens && e->spec.mtp_pos && e->spec.mtp_seq && e->spec.mtp_want;
  }
  if (!mtp_ok || !split_ok || !e->b_tokens || !e->b_pos || !e->b_seq || !e->b_want || !e->b_seqs || !e->b_owner || !e->logits || !e->cmask ||
      !e->running.v) {
    create_fail(e, &dbe);
    return di_errorf(st, DI_ERR_NOMEM, "engine: cannot allocate batch buffers (%d tokens, %d sequences)", nt, ns);
  }
  *out = e;
  return DI_OK;
}

static void seq_free(di_engine *e, di_seq *s) {
  if (!s) return;
  if (e->pool) di_seq_kv_release(e, s);
  di_spec_model_seq_free(e, s);
  di_spec_mtp_seq_free(s);
  di_kv_table_free(&s->table);
  for (int k = 0; k < DI_KV_MAX_SWA_TABLES; k++) di_kv_table_free(&s->swa[k]);
  free(s->pins);
  if (s->detok && e->be.detok_free) e->be.detok_free(s->detok);
  free(s->tokens);
  free(s->pending);
  free(s);
}

void di_engine_req_free(di_engine *e, di_req *r) {
  if (!r) return;
  for (int i = 0; i < r->n; i++) seq_free(e, r->seqs ? r->seqs[i] : NULL);
  free(r->seqs);
  free(r->prompt);
  for (int i = 0; i < r->p.n_stop; i++) free(r->stop ? r->stop[i] : NULL);
  free(r->stop);
  free(r->stop_len);
  free(r->stop_ids);
  free(r->bias_ids);
  free(r->bias_vals);
  free(r);
}

static void drain_inbox(di_engine *e);

void di_engine_destroy(di_engine *e) {
  if (!e) return;
  di_engine_stop(e);
  /* Every request still queued or running gets its final (cancelled) event. */
  if (e->pool) {
    drain_inbox(e);
    for (di_req *r = e->reqs; r; r = r->next)
      for (int k = 0; k < r->n_seqs; k++) di_engine_finish_seq(e, r->seqs[k], DI_FINISH_CANCELLED, NULL);
  }
  for (di_req *r = e->reqs, *n; r; r = n) {
    n = r->next;
    di_engine_req_free(e, r);
  }
  for (di_req *r = e->inbox_head, *n; r; r = n) {
    n = r->next;
    di_engine_req_free(e, r);
  }
  free(e->waiting.v);
  free(e->running.v);
  free(e->b_tokens);
  free(e->b_pos);
  free(e->b_seq);
  free(e->b_want);
  free(e->b_seqs);
  free(e->b_owner);
  free(e->logits);
  free(e->split_k);
  free(e->split_t);
  free(e->split_out);
  free(e->cmask);
  free(e->cmds);
  free(e->spec.mtp_hidden);
  free(e->spec.mtp_out);
  free(e->spec.mtp_tokens);
  free(e->spec.mtp_pos);
  free(e->spec.mtp_seq);
  free(e->spec.mtp_want);
  free(e->spec.mtp_depth);
  free(e->spec.mtp_chain);
  free(e->spec.mtp_grew);
  di_sampler_free(&e->sampler);
  di_spec_model_free(e->spec.model);
  di_kv_pool_destroy(e->pool);
  if (e->be.destroy) e->be.destroy(e->be.user);
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e);
}

bool di_engine_logit_rows(di_engine *e, int rows) {
  if (rows <= e->logits_cap) return true;
  if (rows > e->max_batch_tokens) return false;
  int cap = e->logits_cap * 2 > rows ? e->logits_cap * 2 : rows;
  if (cap > e->max_batch_tokens) cap = e->max_batch_tokens;
  float *l = realloc(e->logits, (size_t)cap * (size_t)e->be.n_vocab * sizeof *l);
  if (!l) return false;
  e->logits = l;
  e->logits_cap = cap;
  return true;
}

const struct di_tokenizer *di_engine_tokenizer(const di_engine *e) { return e->be.tokenizer; }
int di_engine_ctx(const di_engine *e) { return e->ctx; }
int di_engine_n_vocab(const di_engine *e) { return e->be.n_vocab; }
/* ---------------------------------------------------------------- step */

/* Finished requests are freed only here, at the end of a step, so no loop
 * over a batch or a request's completions ever touches freed memory. */
static void sweep_finished(di_engine *e) {
  int n = 0;
  for (di_req **l = &e->reqs; *l;) {
    di_req *r = *l;
    if (r->n_done < r->n) {
      l = &r->next;
      continue;
    }
    *l = r->next;
    e->n_reqs--;
    e->acc.finished++;
    di_engine_req_free(e, r);
    n++;
  }
  if (!n) return;
  pthread_mutex_lock(&e->mu);
  e->n_unfinished -= n;
  pthread_mutex_unlock(&e->mu);
}

static void drain_inbox(di_engine *e) {
  pthread_mutex_lock(&e->mu);
  di_req *in = e->inbox_head;
  e->inbox_head = e->inbox_tail = NULL;
  int nc = e->n_cmds;
  di_engine_cmd cmds[64];
  if (nc > 64) nc = 64; /* the rest wait for the next step */
  if (nc > 0) {
    memcpy(cmds, e->cmds, (size_t)nc * sizeof *cmds);
    memmove(e->cmds, e->cmds + nc, (size_t)(e->n_cmds - nc) * sizeof *cmds);
    e->n_cmds -= nc;
  }
  pthread_mutex_unlock(&e->mu);
  while (in) {
    di_req *r = in;
    in = in->next;
    r->next = e->reqs;
    e->reqs = r;
    e->n_reqs++;
    e->acc.prompt_tokens += (uint64_t)r->n_prompt;
    r->seqs[0]->queued_at = e->acc.steps;
    di_seq_list_insert(&e->waiting, r->seqs[0]);
  }
  for (int i = 0; i < nc; i++) {
    for (di_req *r = e->reqs; r; r = r->next) {
      if (r->id != cmds[i].id) continue;
      if (cmds[i].op == DI_CMD_CANCEL) {
        r->cancelled = true;
        for (int k = 0; k < r->n_seqs; k++) di_engine_finish_seq(e, r->seqs[k], DI_FINISH_CANCELLED, NULL);
      } else {
        r->paused = cmds[i].op == DI_CMD_PAUSE; /* the scheduler parks or readmits its sequences */
      }
      break;
    }
  }
}

/* Unfinished requests that are paused: with nothing else to do the stepping
 * thread sleeps instead of building empty batches. */
static void count_paused(di_engine *e) {
  int n = 0;
  for (di_req *r = e->reqs; r; r = r->next) n += r->paused && !r->cancelled && r->n_done < r->n;
  pthread_mutex_lock(&e->mu);
  e->n_paused = n;
  pthread_mutex_unlock(&e->mu);
}

static void publish_stats(di_engine *e) {
  di_engine_stats s = e->acc;
  s.running = e->running.n;
  s.waiting = e->waiting.n;
  s.paused = e->n_paused;
  s.kv_blocks_total = e->pool->n_blocks;
  s.kv_blocks_used = di_kv_n_used(e->pool);
  s.kv_blocks_high_water = e->pool->high_water;
  s.kv_blocks_cached = di_kv_prefix_n_cached(e->pool);
  s.kv_ckpt_blocks = di_kv_prefix_n_ckpt(e->pool);
  s.swa_checkpoint = e->swa_ckpt;
  s.kv_blocks_used_full = e->pool->used_by_group[DI_KV_GROUP_FULL];
  s.kv_blocks_used_window = e->pool->used_by_group[DI_KV_GROUP_WINDOW];
  s.kv_blocks_high_full = e->pool->high_by_group[DI_KV_GROUP_FULL];
  s.kv_blocks_high_window = e->pool->high_by_group[DI_KV_GROUP_WINDOW];
  s.swa_held_blocks = 0;
  for (int i = 0; i < e->waiting.n; i++) s.swa_held_blocks += e->waiting.v[i]->n_pins;
  s.kv_block_size = e->pool->block_size;
  s.kv_block_bytes = e->pool->block_bytes;
  s.spec_drafter = e->spec.on ? e->spec.drafter.name : NULL;
  pthread_mutex_lock(&e->mu);
  e->stats = s;
  pthread_mutex_unlock(&e->mu);
}

/* Tensor parallel: when every logits row of b is one sequence's last and
 * its sampling needs only a reduction of the row (di_sampler_split_k), the
 * ranks reduce their vocabulary slices and rank 0 merges, instead of
 * gathering whole rows (the same tokens: the reduction is sampling's own). */
static const di_logits_split *plan_split(di_engine *e, const di_batch *b) {
  if (!e->be.split_logits) return NULL;
  int rows = 0, covered = 0;
  for (int t = 0; t < b->n_tokens; t++) rows += b->want_logits ? b->want_logits[t] : t == b->n_tokens - 1;
  if (rows > e->max_seqs) return NULL;
  for (int i = 0; i < b->n_seqs; i++) {
    const di_seq *s = e->b_owner[i];
    const di_req *r = s->req;
    if (s->logits_row < 0) continue;
    if (s->n_draft > 0 || r->p.logits_cb || s->logits_row >= rows) return NULL;
    int k = di_sampler_split_k(&r->p.sampling, r->constraint.accept != NULL, r->p.logprobs > 0 || r->p.top_logprobs > 0,
                               e->be.n_vocab, DI_SPLIT_TOPK_MAX);
    if (!k) return NULL;
    e->split_k[s->logits_row] = k;
    e->split_t[s->logits_row] = r->p.sampling.temperature;
    covered++;
  }
  if (covered != rows) return NULL; /* a row no sequence samples from (prompt rows) */
  e->split = (di_logits_split){.k = e->split_k, .temperature = e->split_t, .out = e->split_out};
  return &e->split;
}

int di_engine_step(di_engine *e) {
  drain_inbox(e);
  if (e->spec.model) di_spec_model_step(e); /* drafts for the batch the scheduler is about to build */
  double t0 = di_engine_now();
  di_batch b;
  int n = di_sched_build(e, &b);
  double t1 = di_engine_now();
  e->acc.sched_seconds += t1 - t0;
  if (n > 0) {
    di_status st = {0};
    if (e->spec.model) {
      di_spec_model_prefill(e, b.n_seqs, e->b_owner);
      t1 = di_engine_now(); /* the draft's forward is no part of the step's time, as di_spec_model_step's */
    }
    b.split = plan_split(e, &b);
    if (e->be.forward(e->be.user, e->pool, &b, e->logits, &st) != DI_OK) {
      /* An internal failure ends the sequences of this batch, not the engine. */
      for (int i = 0; i < b.n_seqs; i++) di_engine_finish_seq(e, e->b_owner[i], DI_FINISH_ERROR, st.msg);
    } else {
      e->acc.steps++;
      e->acc.batch_tokens += (uint64_t)n;
      /* A sequence with drafts commits after verification, which decides how
       * many of its positions stay. */
      for (int i = 0; i < b.n_seqs; i++) {
        di_seq *s = e->b_owner[i];
        if (s->n_draft > 0) continue;
        s->n_computed += s->take;
        di_kv_table_commit(e->pool, &s->table, s->tokens, s->n_computed);
        for (int k = 0; k < e->be.n_swa_tables; k++) di_kv_table_commit(e->pool, &s->swa[k], s->tokens, s->n_computed);
      }
      const size_t V = (size_t)e->be.n_vocab;
      for (int i = 0; i < b.n_seqs; i++) {
        di_seq *s = e->b_owner[i];
        if (s->state != DI_SEQ_RUNNING) continue;
        if (s->n_draft > 0) {
          di_spec_verify(e, s, e->logits + (size_t)s->logits_row * V);
          continue;
        }
        if (s->req->p.logits_cb && s->row0 >= 0) /* rows of the prompt positions before the last */
          for (int r = s->row0, pos = s->n_computed - s->take; pos < s->n_computed && pos < s->len - 1; r++, pos++)
            di_engine_deliver_logits(e, s, e->logits + (size_t)r * V, pos);
        if (s->logits_row >= 0) {
          di_engine_deliver_logits(e, s, e->logits + (size_t)s->logits_row * V, s->len - 1);
          e->cand = b.split ? e->split_out + (size_t)s->logits_row * DI_SPLIT_TOPK_MAX : NULL;
          di_engine_after_forward(e, s, e->logits + (size_t)s->logits_row * V);
          e->cand = NULL;
          di_spec_shadow_check(e, s);
        }
      }
      if (e->spec.on && e->step_prefill == 0) di_spec_cost_add(&e->spec.cost, n, di_engine_now() - t1);
      if (e->spec.mtp) di_spec_mtp_step(e, &b);
    }
    e->acc.step_seconds += di_engine_now() - t1;
  }
  sweep_finished(e);
  count_paused(e);
  publish_stats(e);
  pthread_mutex_lock(&e->mu);
  int left = e->n_unfinished - e->n_paused;
  pthread_mutex_unlock(&e->mu);
  return left;
}

void di_engine_stats_get(di_engine *e, di_engine_stats *s) {
  pthread_mutex_lock(&e->mu);
  *s = e->stats;
  pthread_mutex_unlock(&e->mu);
}

/* ---------------------------------------------------------------- thread */

static void *engine_thread(void *arg) {
  di_engine *e = arg;
  for (;;) {
    pthread_mutex_lock(&e->mu);
    while (!e->stop && e->n_unfinished == e->n_paused && e->n_cmds == 0) pthread_cond_wait(&e->cv, &e->mu);
    bool stop = e->stop;
    pthread_mutex_unlock(&e->mu);
    if (stop) break;
    di_engine_step(e);
  }
  return NULL;
}

di_code di_engine_start(di_engine *e) {
  if (e->thread_on) return DI_OK;
  publish_stats(e); /* the pool's size is known before the first step (metrics) */
  e->stop = false;
  if (pthread_create(&e->thread, NULL, engine_thread, e) != 0) return DI_ERR_INTERNAL;
  e->thread_on = true;
  return DI_OK;
}

void di_engine_stop(di_engine *e) {
  if (!e->thread_on) return;
  pthread_mutex_lock(&e->mu);
  e->stop = true;
  pthread_cond_signal(&e->cv);
  pthread_mutex_unlock(&e->mu);
  pthread_join(e->thread, NULL);
  e->thread_on = false;
}
