/* The draft-model drafter (draft.h). Per sequence it keeps its own block
 * tables in the draft pool and `dc`, the leading positions whose draft KV is
 * valid. Rollback is lazy: the KV at position p depends only on tokens
 * [0, p], so before drafting, the positions fed with the last proposal are
 * kept as far as the sequence's tokens still equal it (the verified prefix)
 * and the tables are cut there; nothing else has to follow verification,
 * preemption or a step that verified fewer tokens than were drafted. */
#include "engine/spec/draft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "tokenizer/tokenizer.h"

struct di_draft_seq {
  di_kv_table table, swa[DI_KV_MAX_SWA_TABLES];
  int dc;                       /* leading positions whose draft KV is valid */
  int base;                     /* the last proposal continued tokens[0..base) */
  int32_t prop[DI_SPEC_K_LIMIT];
  int prop_n;                   /* its length; positions base .. base+prop_n-2 were fed prop[0..prop_n-1) */
  int k;                        /* this step's planned length (0: none) */
  int need_from;                /* first position still to feed this step */
};

struct di_spec_model {
  di_engine_backend be;
  di_kv_pool *pool;
  int max_tokens, max_seqs;
  int32_t *b_tokens, *b_pos, *b_seq;
  bool *b_want;
  di_batch_seq *b_seqs;
  di_seq **cand;                /* [max_seqs] sequences drafting this step */
  int *slot_c;                  /* [max_seqs] candidate of each batch slot */
  float *logits;                /* [max_seqs][be.n_vocab] */
  di_spec_cost cost;            /* draft forward time against tokens */
  uint64_t step_of_prop;
};

static void put_token(char *out, size_t cap, const struct di_tokenizer *t, int32_t id) {
  size_t n = 0, o = 0;
  const char *b = di_tokenizer_token_bytes(t, id, &n);
  if (!b) {
    snprintf(out, cap, "(none)");
    return;
  }
  out[o++] = '"';
  for (size_t i = 0; i < n && o + 6 < cap; i++) {
    unsigned char c = (unsigned char)b[i];
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') out[o++] = (char)c;
    else o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
  }
  out[o++] = '"';
  out[o] = 0;
  if (di_tokenizer_is_special(t, id)) snprintf(out + o, cap - o, " (special)");
}

di_code di_spec_vocab_check(const di_engine_backend *target, const di_engine_backend *draft, di_status *st) {
  const struct di_tokenizer *a = target->tokenizer, *b = draft->tokenizer;
  if (!a != !b) return di_errorf(st, DI_ERR_INVALID, "--draft-model: only one of the two models has a tokenizer");
  if (a) {
    int32_t na = di_tokenizer_n_vocab(a), nb = di_tokenizer_n_vocab(b), n = na < nb ? na : nb;
    for (int32_t id = 0; id <= n; id++) {
      if (id == n) {
        if (na == nb) break;
        return di_errorf(st, DI_ERR_INVALID,
                         "--draft-model: vocabulary differs from the target's at token %d (the target has %d tokens, "
                         "the draft %d)",
                         n, na, nb);
      }
      size_t la = 0, lb = 0;
      const char *ta = di_tokenizer_token_bytes(a, id, &la), *tb = di_tokenizer_token_bytes(b, id, &lb);
      bool same = !ta == !tb && la == lb && (!ta || !memcmp(ta, tb, la)) &&
                  di_tokenizer_is_special(a, id) == di_tokenizer_is_special(b, id);
      if (same) continue;
      char sa[96], sb[96];
      put_token(sa, sizeof sa, a, id);
      put_token(sb, sizeof sb, b, id);
      return di_errorf(st, DI_ERR_INVALID, "--draft-model: vocabulary differs from the target's at token %d: target %s, draft %s",
                       id, sa, sb);
    }
  }
  /* Model vocabulary widths may exceed the tokenizer's (padded embeddings); the
   * draft proposes only ids the target can produce. */
  if (!a && target->n_vocab != draft->n_vocab)
    return di_errorf(st, DI_ERR_INVALID, "--draft-model: the target has %d vocabulary entries, the draft %d",
                     target->n_vocab, draft->n_vocab);
  return DI_OK;
}

size_t di_spec_model_pos_bytes(const di_engine_backend *d, di_kv_dtype type) {
  di_kv_spec s = {.n_layers = d->n_layers, .kv_dim = d->kv_dim, .v_in_k = d->kv_v_in_k, .type = type};
  return di_kv_spec_block_bytes(&s, 1) * (size_t)(1 + d->n_swa_tables);
}

void di_spec_model_free(di_spec_model *d) {
  if (!d) return;
  di_kv_pool_destroy(d->pool);
  if (d->be.destroy) d->be.destroy(d->be.user);
  free(d->b_tokens);
  free(d->b_pos);
  free(d->b_seq);
  free(d->b_want);
  free(d->b_seqs);
  free(d->cand);
  free(d->slot_c);
  free(d->logits);
  free(d);
}

di_code di_spec_model_create(di_engine *e, const di_engine_backend *draft, size_t kv_mem, int block_size,
                             di_kv_dtype type, di_spec_model **out, di_status *st) {
  *out = NULL;
  di_spec_model *d = calloc(1, sizeof *d);
  if (!d) {
    if (draft->destroy) draft->destroy(draft->user);
    return di_errorf(st, DI_ERR_NOMEM, "--draft-model: out of memory");
  }
  d->be = *draft;
  if (di_spec_vocab_check(&e->be, draft, st) != DI_OK) {
    di_spec_model_free(d);
    return st->code;
  }
  if (draft->n_ctx < e->ctx) {
    di_spec_model_free(d);
    return di_errorf(st, DI_ERR_INVALID, "--draft-model: its context (%d positions) is shorter than the engine's (%d)",
                     draft->n_ctx, e->ctx);
  }
  di_kv_spec spec = {.n_layers = draft->n_layers, .kv_dim = draft->kv_dim, .v_in_k = draft->kv_v_in_k, .type = type};
  size_t blk = di_kv_spec_block_bytes(&spec, block_size);
  /* Fewer than two blocks per table could never hold a draft beside the
   * token it continues: that budget does not fit a draft model. */
  size_t need = blk * (size_t)(1 + draft->n_swa_tables) * 2;
  if (kv_mem < need) {
    di_spec_model_free(d);
    return di_errorf(st, DI_ERR_RANGE,
                     "--draft-model: its KV share of --kv-mem (%zu bytes at %zu bytes per position) is smaller than "
                     "two KV blocks (%zu bytes); raise --kv-mem",
                     kv_mem, di_spec_model_pos_bytes(draft, type), need);
  }
  di_code rc = di_kv_pool_create_spec(&d->pool, kv_mem, block_size, &spec, st);
  if (rc != DI_OK) {
    di_spec_model_free(d);
    return di_error_wrap(st, "--draft-model: ");
  }
  d->max_tokens = e->max_batch_tokens;
  d->max_seqs = e->max_seqs;
  size_t nt = (size_t)d->max_tokens, ns = (size_t)d->max_seqs;
  d->b_tokens = malloc(nt * sizeof *d->b_tokens);
  d->b_pos = malloc(nt * sizeof *d->b_pos);
  d->b_seq = malloc(nt * sizeof *d->b_seq);
  d->b_want = malloc(nt * sizeof *d->b_want);
  d->b_seqs = malloc(ns * sizeof *d->b_seqs);
  d->cand = malloc(ns * sizeof *d->cand);
  d->slot_c = malloc(ns * sizeof *d->slot_c);
  d->logits = malloc(ns * (size_t)draft->n_vocab * sizeof *d->logits);
  if (!d->b_tokens || !d->b_pos || !d->b_seq || !d->b_want || !d->b_seqs || !d->cand || !d->slot_c || !d->logits) {
    di_spec_model_free(d);
    return di_errorf(st, DI_ERR_NOMEM, "--draft-model: cannot allocate its batch buffers");
  }
  *out = d;
  return DI_OK;
}

static void dseq_release(di_spec_model *d, di_draft_seq *q) {
  di_kv_table_release(d->pool, &q->table);
  for (int t = 0; t < d->be.n_swa_tables; t++) di_kv_table_release(d->pool, &q->swa[t]);
  q->dc = 0;
  q->prop_n = 0;
}

void di_spec_model_seq_free(di_engine *e, di_seq *s) {
  di_draft_seq *q = s->dseq;
  if (!q) return;
  di_spec_model *d = e->spec.model;
  if (d) dseq_release(d, q);
  di_kv_table_free(&q->table);
  for (int t = 0; t < DI_KV_MAX_SWA_TABLES; t++) di_kv_table_free(&q->swa[t]);
  free(q);
  s->dseq = NULL;
}

int di_spec_model_blocks_used(const di_engine *e) { return e->spec.model ? di_kv_n_used(e->spec.model->pool) : 0; }

static di_draft_seq *dseq_get(di_engine *e, di_seq *s) {
  if (s->dseq) return s->dseq;
  di_draft_seq *q = calloc(1, sizeof *q);
  if (!q) return NULL;
  di_status st = {0};
  bool ok = di_kv_table_init(&q->table, e->spec.model->pool->block_size, s->cap, &st) == DI_OK;
  for (int t = 0; ok && t < e->spec.model->be.n_swa_tables; t++)
    ok = di_kv_table_init(&q->swa[t], e->spec.model->pool->block_size, s->cap, &st) == DI_OK;
  s->dseq = q;
  if (!ok) {
    di_spec_model_seq_free(e, s);
    return NULL;
  }
  return q;
}

static void dseq_truncate(di_spec_model *d, di_draft_seq *q, int dc) {
  int keep = (dc + d->pool->block_size - 1) / d->pool->block_size;
  di_kv_table_truncate(d->pool, &q->table, keep);
  for (int t = 0; t < d->be.n_swa_tables; t++) di_kv_table_truncate(d->pool, &q->swa[t], keep);
  q->dc = dc;
}

/* Cuts the draft KV back to the positions whose tokens are still the ones it was fed. */
static void dseq_reconcile(di_spec_model *d, di_draft_seq *q, const di_seq *s) {
  int dc = q->dc;
  if (q->prop_n > 0 && dc > q->base) {
    int m = 0;
    while (q->base + m < dc && q->base + m < s->len && q->prop[m] == s->tokens[q->base + m]) m++;
    dc = q->base + m;
  }
  if (dc > s->len) dc = s->len;
  q->prop_n = 0;
  dseq_truncate(d, q, dc);
}

static int dseq_blocks_needed(di_spec_model *d, di_draft_seq *q, int end) {
  int n = di_kv_table_blocks_needed(d->pool, &q->table, q->dc, end);
  for (int t = 0; t < d->be.n_swa_tables; t++) n += di_kv_table_blocks_needed(d->pool, &q->swa[t], q->dc, end);
  return n;
}

/* Frees draft KV of sequences that are not running (preempted or waiting) so
 * running ones can draft. */
static void reclaim_waiting(di_engine *e) {
  for (int i = 0; i < e->waiting.n; i++)
    if (e->waiting.v[i]->dseq) dseq_release(e->spec.model, e->waiting.v[i]->dseq);
}

static void batch_add(di_spec_model *d, di_batch *b, int c, int from, int to, const int32_t *fed_after) {
  di_seq *s = d->cand[c];
  di_draft_seq *q = s->dseq;
  di_kv_table_prepare(d->pool, &q->table, from, to);
  int slot = b->n_seqs++;
  d->slot_c[slot] = c;
  di_batch_seq *bs = &d->b_seqs[slot];
  *bs = (di_batch_seq){.blocks = q->table.blocks, .n_blocks = q->table.n_blocks};
  for (int t = 0; t < d->be.n_swa_tables; t++) {
    di_kv_table_prepare(d->pool, &q->swa[t], from, to);
    bs->swa[t] = q->swa[t].blocks;
    bs->n_swa_blocks = q->swa[t].n_blocks;
  }
  for (int p = from; p < to; p++) {
    int n = b->n_tokens++;
    d->b_tokens[n] = p < s->len ? s->tokens[p] : fed_after[p - s->len];
    d->b_pos[n] = p;
    d->b_seq[n] = slot;
    d->b_want[n] = p == to - 1 && p >= s->len - 1;
  }
}

static int argmax(const float *row, int n) {
  int best = 0;
  for (int v = 1; v < n; v++)
    if (row[v] > row[best]) best = v;
  return best;
}

/* Runs one draft forward; false (and no drafts this step) on failure. Its
 * time prices a drafted token (the planner's k_cost) only when it is a
 * drafting step's own work: a round, or a catch-up of at most the two tokens
 * a fully accepted verification leaves per sequence (its last draft and the
 * bonus token). A longer catch-up (the prompt, a return from back-off) is
 * paid once, not per draft token: fitted, the prompt's forward alone priced
 * the first drafts at ~17 single-token forwards (the fit's prior puts a
 * step's fixed part at 16 tokens), which held k at 1 for the first 7 of 27
 * verifications of a 128-token reply to a 379-token prompt. */
static bool run_forward(di_spec_model *d, di_batch *b) {
  di_status st = {0};
  double t0 = di_engine_now();
  if (d->be.forward(d->be.user, d->pool, b, d->logits, &st) != DI_OK) return false;
  if (b->n_tokens <= 2 * b->n_seqs) di_spec_cost_add(&d->cost, b->n_tokens, di_engine_now() - t0);
  return true;
}

/* Greedy: the draft token at index j of each sequence whose row the batch produced. */
static void collect(const di_engine *e, di_spec_model *d, const di_batch *b, int j) {
  int V = e->be.n_vocab < d->be.n_vocab ? e->be.n_vocab : d->be.n_vocab;
  for (int t = 0, r = 0; t < b->n_tokens; t++)
    if (b->want_logits[t]) d->cand[d->slot_c[b->seq[t]]]->dseq->prop[j] = argmax(d->logits + (size_t)r++ * d->be.n_vocab, V);
}

static void batch_reset(di_spec_model *d, di_batch *b) {
  memset(b, 0, sizeof *b);
  b->tokens = d->b_tokens;
  b->pos = d->b_pos;
  b->seq = d->b_seq;
  b->want_logits = d->b_want;
  b->seqs = d->b_seqs;
  b->n_swa_tables = d->be.n_swa_tables;
}

/* Catch-up of candidates [0, nc): every token the draft has not seen, through
 * the last known one (whose logits give the first draft token), in chunks
 * under the batch cap. False if a draft forward failed. */
static bool catch_up(const di_engine *e, di_spec_model *d, int nc) {
  di_batch b;
  for (bool more = true; more;) {
    more = false;
    batch_reset(d, &b);
    int room = d->max_tokens;
    for (int c = 0; c < nc; c++) {
      di_seq *s = d->cand[c];
      di_draft_seq *q = s->dseq;
      if (q->need_from >= s->len) continue;
      if (room == 0) {
        more = true;
        break;
      }
      int to = s->len - q->need_from <= room ? s->len : q->need_from + room;
      room -= to - q->need_from;
      batch_add(d, &b, c, q->need_from, to, NULL);
      q->need_from = to;
      more |= to < s->len;
    }
    if (b.n_tokens == 0) break;
    if (!run_forward(d, &b)) return false;
    collect(e, d, &b, 0);
  }
  return true;
}

void di_spec_model_prefill(di_engine *e, int n, di_seq *const *seqs) {
  di_spec_model *d = e->spec.model;
  int nc = 0;
  for (int i = 0; i < n; i++) {
    di_seq *s = seqs[i];
    /* its last known token computed this step (a token will be sampled), the
     * draft more than a decode step's catch-up behind, speculation due */
    if (s->n_draft > 0 || s->n_computed + s->take != s->len || (s->dseq ? s->dseq->dc : 0) >= s->len - 2) continue;
    if (di_spec_k_cap(e, s, 1) <= 0 || !di_spec_active(&s->spec, e->acc.steps)) continue;
    di_draft_seq *q = dseq_get(e, s);
    if (!q) continue;
    dseq_reconcile(d, q, s);
    if (dseq_blocks_needed(d, q, s->len) > di_kv_n_available(d->pool)) continue; /* caught up when it drafts */
    di_kv_table_prepare(d->pool, &q->table, q->dc, s->len);
    for (int t = 0; t < d->be.n_swa_tables; t++) di_kv_table_prepare(d->pool, &q->swa[t], q->dc, s->len);
    q->k = 0;
    q->need_from = q->dc;
    d->cand[nc++] = s;
  }
  if (!nc) return;
  bool ok = catch_up(e, d, nc);
  for (int c = 0; c < nc; c++) {
    di_draft_seq *q = d->cand[c]->dseq;
    if (ok) q->dc = d->cand[c]->len;
    else dseq_release(d, q);
  }
}

void di_spec_model_step(di_engine *e) {
  di_spec_model *d = e->spec.model;
  int n_ready = 0;
  for (int i = 0; i < e->running.n; i++) {
    di_seq *s = e->running.v[i];
    if (s->dseq) s->dseq->k = 0;
    n_ready += s->len - s->n_computed == 1;
  }
  if (!n_ready) return;
  /* Plan: the draft's measured cost per drafted token enters the tuner's
   * objective beside the verification's. */
  double k_cost = d->cost.fitted ? di_spec_cost_time(&d->cost, n_ready) / n_ready : 0;
  double emit = 0;
  int tokens = 0, nc = 0, kmax = 0;
  bool reclaimed = false;
  for (int i = 0; i < e->running.n; i++) {
    di_seq *s = e->running.v[i];
    if (s->len - s->n_computed != 1) continue;
    int k_cap = di_spec_k_cap(e, s, e->max_batch_tokens - 1);
    if (k_cap <= 0) continue;
    di_spec_plan_in in = {.k_avail = k_cap, .always = e->spec.always, .emit = emit + 1, .tokens = tokens + 1,
                          .step = e->acc.steps, .k_cost = k_cost};
    bool fallback = false;
    int k = di_spec_plan(&s->spec, &e->spec.cost, &in, &fallback);
    if (fallback) e->acc.spec_fallbacks++;
    emit += 1 + di_spec_expected(&s->spec, k);
    tokens += 1 + k;
    di_draft_seq *q = k > 0 ? dseq_get(e, s) : NULL;
    if (!q) continue;
    dseq_reconcile(d, q, s);
    int need = dseq_blocks_needed(d, q, s->len + k - 1);
    if (need > di_kv_n_available(d->pool) && !reclaimed) {
      reclaim_waiting(e);
      reclaimed = true;
    }
    if (need > di_kv_n_available(d->pool)) continue; /* no draft this step; never a preemption */
    di_kv_table_prepare(d->pool, &q->table, q->dc, s->len + k - 1);
    for (int t = 0; t < d->be.n_swa_tables; t++) di_kv_table_prepare(d->pool, &q->swa[t], q->dc, s->len + k - 1);
    q->k = k;
    q->base = s->len;
    q->need_from = q->dc;
    d->cand[nc++] = s;
    if (k > kmax) kmax = k;
  }
  if (!nc) return;
  di_batch b;
  if (!catch_up(e, d, nc)) goto fail;
  /* Rounds 1..k-1: each sequence's last draft token in, the next one out. */
  for (int j = 1; j < kmax; j++) {
    batch_reset(d, &b);
    for (int c = 0; c < nc; c++) {
      di_seq *s = d->cand[c];
      if (s->dseq->k > j) batch_add(d, &b, c, s->len - 1 + j, s->len + j, s->dseq->prop);
    }
    if (!run_forward(d, &b)) goto fail;
    collect(e, d, &b, j);
  }
  for (int c = 0; c < nc; c++) {
    di_draft_seq *q = d->cand[c]->dseq;
    q->prop_n = q->k;
    q->dc = q->base + q->k - 1;
  }
  return;
fail: /* a draft failure costs the drafts, not the requests */
  for (int c = 0; c < nc; c++) {
    dseq_release(d, d->cand[c]->dseq);
    d->cand[c]->dseq->k = 0;
  }
}

int di_spec_model_take(di_engine *e, di_seq *s, int k, int32_t *out) {
  (void)e;
  di_draft_seq *q = s->dseq;
  if (!q || q->k == 0 || q->base != s->len) return 0;
  int n = q->prop_n < k ? q->prop_n : k;
  memcpy(out, q->prop, (size_t)n * sizeof *out);
  return n;
}
