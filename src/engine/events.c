/* The event stream: a sampled token through the streaming detokenizer and
 * the stop strings (text is held back while it could still start one) to the
 * caller's callback, and a sequence's finish. */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

static void emit(di_engine *e, di_seq *s, int32_t token, const char *text, size_t len, const di_sample_out *so,
                 di_finish finish, const char *error) {
  di_req *r = s->req;
  di_event ev = {0};
  ev.request_id = r->id;
  ev.index = s->index;
  ev.token = token;
  ev.text = text ? text : "";
  ev.text_len = len;
  if (so) {
    ev.logprob = so->logprob;
    if (r->p.top_logprobs > 0) {
      ev.n_top = so->n_top;
      ev.top_ids = so->top_ids;
      ev.top_logprobs = so->top_logprobs;
    }
  }
  ev.finish = finish;
  ev.error = error;
  ev.prompt_tokens = r->n_prompt;
  ev.cached_tokens = r->cached_tokens;
  ev.replayed_tokens = r->replayed_tokens;
  ev.completion_tokens = s->n_gen;
  ev.queue_seconds = r->admitted_once ? r->t_admit - r->t_submit : -1;
  ev.spec_drafted = s->spec.drafted;
  ev.spec_accepted = s->spec.accepted;
  ev.spec_verify_steps = s->spec.verify_steps;
  r->p.cb(&ev, r->p.user);
}

static bool pending_append(di_seq *s, const char *text, size_t len) {
  if (s->pending_len + len + 1 > s->pending_cap) {
    size_t cap = (s->pending_len + len + 1) * 2;
    char *p = realloc(s->pending, cap < 64 ? 64 : cap);
    if (!p) return false;
    s->pending = p;
    s->pending_cap = cap < 64 ? 64 : cap;
  }
  memcpy(s->pending + s->pending_len, text, len);
  s->pending_len += len;
  s->pending[s->pending_len] = 0;
  return true;
}

/* Earliest occurrence of any stop string in the pending text, or -1. */
static long find_stop(const di_seq *s) {
  const di_req *r = s->req;
  long best = -1;
  if (!s->pending) return -1; /* nothing decoded yet (memmem must not see NULL) */
  for (int i = 0; i < r->p.n_stop; i++) {
    const char *m = memmem(s->pending, s->pending_len, r->stop[i], r->stop_len[i]);
    if (m && (best < 0 || m - s->pending < best)) best = m - s->pending;
  }
  return best;
}

/* Bytes at the end of the pending text that could begin a stop string. */
static size_t holdback(const di_seq *s) {
  const di_req *r = s->req;
  size_t hold = 0;
  for (int i = 0; i < r->p.n_stop; i++) {
    size_t k = r->stop_len[i] - 1 < s->pending_len ? r->stop_len[i] - 1 : s->pending_len;
    for (; k > hold; k--)
      if (!memcmp(s->pending + s->pending_len - k, r->stop[i], k)) {
        hold = k;
        break;
      }
  }
  return hold;
}

static void seq_unlist(di_engine *e, di_seq *s) {
  if (s->state == DI_SEQ_RUNNING) di_seq_list_remove(&e->running, s);
  else if (s->state == DI_SEQ_WAITING) di_seq_list_remove(&e->waiting, s);
}

void di_engine_finish_seq(di_engine *e, di_seq *s, di_finish why, const char *error) {
  if (s->state == DI_SEQ_DONE) return;
  di_req *r = s->req;
  /* The rest of the text: flush the detokenizer, and a stop string may still
   * complete in what it releases. */
  if (s->detok && why != DI_FINISH_ERROR && e->be.detok_flush) {
    const char *t = NULL;
    size_t n = 0;
    e->be.detok_flush(s->detok, &t, &n);
    if (n) pending_append(s, t, n);
    long at = find_stop(s);
    if (at >= 0) {
      s->pending_len = (size_t)at;
      if (why == DI_FINISH_LENGTH) why = DI_FINISH_STOP;
    }
  }
  seq_unlist(e, s);
  s->state = DI_SEQ_DONE;
  di_seq_kv_release(e, s);
  emit(e, s, -1, s->pending, s->pending_len, NULL, why, why == DI_FINISH_ERROR ? (error ? error : "error") : NULL);
  s->pending_len = 0;
  /* Siblings not forked yet (n > 1 whose prompt never finished) end too. */
  if (s->index == 0 && r->n_seqs < r->n) {
    for (int i = r->n_seqs; i < r->n; i++) {
      r->seqs[i]->state = DI_SEQ_DONE;
      emit(e, r->seqs[i], -1, NULL, 0, NULL, why, why == DI_FINISH_ERROR ? (error ? error : "error") : NULL);
    }
    r->n_done += r->n - r->n_seqs;
    r->n_seqs = r->n;
  }
  r->n_done++;
}

static bool is_stop_token(const di_engine *e, const di_req *r, int32_t t) {
  for (int i = 0; i < r->p.n_stop_ids; i++)
    if (r->stop_ids[i] == t) return true;
  if (!r->p.ignore_eos)
    for (int i = 0; i < e->be.n_eos; i++)
      if (e->be.eos_ids[i] == t) return true;
  return false;
}

void di_engine_sample_emit(di_engine *e, di_seq *s, const float *logits) {
  di_req *r = s->req;
  di_sample_in in = {.p = &r->p.sampling, .history = s->tokens, .n_history = s->len, .n_prompt = r->n_prompt,
                     .rng = &s->rng, .top_logprobs = r->p.top_logprobs, .logprob = r->p.logprobs > 0};
  di_sample_out so;
  const di_constraint *c = &r->constraint;
  double tc = 0;
  if (c->accept) {
    tc = di_engine_now();
    c->fill_mask(c->self, e->cmask);
    in.mask = e->cmask;
    tc = di_engine_now() - tc;
  }
  in.cand = e->cand;
  di_sampler_sample(&e->sampler, logits, &in, &so);
  bool c_done = false;
  if (c->accept) {
    double t = di_engine_now();
    /* the mask allows end of generation only where the constraint accepts; stop once nothing can follow */
    c_done = !c->accept(c->self, so.token) || c->finished(c->self);
    e->acc.constraint_seconds += tc + di_engine_now() - t;
  }
  s->n_gen++;
  e->acc.generated_tokens++;
  if (is_stop_token(e, r, so.token)) {
    di_engine_finish_seq(e, s, DI_FINISH_STOP, NULL);
    return;
  }
  s->tokens[s->len++] = so.token;
  size_t release = 0;
  bool stopped = false;
  if (s->detok) {
    const char *t = NULL;
    size_t n = 0;
    e->be.detok_push(s->detok, so.token, &t, &n);
    if (n) pending_append(s, t, n);
    long at = find_stop(s);
    if (at >= 0) {
      s->pending_len = (size_t)at;
      release = (size_t)at;
      stopped = true;
    } else {
      release = s->pending_len - holdback(s);
    }
  }
  emit(e, s, so.token, s->pending, release, &so, DI_FINISH_NONE, NULL);
  if (s->pending) memmove(s->pending, s->pending + release, s->pending_len - release);
  s->pending_len -= release;
  if (stopped || c_done) di_engine_finish_seq(e, s, DI_FINISH_STOP, NULL);
  else if ((r->p.max_tokens > 0 && s->n_gen >= r->p.max_tokens) || s->len >= s->cap)
    di_engine_finish_seq(e, s, DI_FINISH_LENGTH, NULL);
}

void di_engine_deliver_logits(di_engine *e, di_seq *s, const float *row, int pos) {
  if (!s->req->p.logits_cb || pos < s->n_delivered) return;
  s->req->p.logits_cb(row, e->be.n_vocab, pos, s->req->p.user);
  s->n_delivered = pos + 1;
}

/* The detokenizer starts with the last prompt tokens so the first output
 * token decodes in context (a SentencePiece "▁word" keeps its space); their
 * own text is discarded. */
static void open_detok(di_engine *e, di_seq *s) {
  if (s->detok || !e->be.detok_new) return;
  s->detok = e->be.detok_new(e->be.user);
  if (!s->detok) return;
  int n = s->req->n_prompt < 4 ? s->req->n_prompt : 4;
  const char *t;
  size_t len;
  for (int i = s->req->n_prompt - n; i < s->req->n_prompt; i++) e->be.detok_push(s->detok, s->tokens[i], &t, &len);
}

/* Called for a sequence whose last token got logits this step. The first
 * completion of an n > 1 request forks its siblings here: they share every
 * prompt block (the partial last one is copied on first write). */
void di_engine_after_forward(di_engine *e, di_seq *s, const float *logits) {
  di_req *r = s->req;
  if (s->index == 0 && r->n_seqs < r->n) {
    for (int i = 1; i < r->n; i++) {
      di_seq *c = r->seqs[i];
      memcpy(c->tokens, s->tokens, (size_t)s->len * sizeof *c->tokens);
      c->len = s->len;
      c->n_computed = s->n_computed;
      di_seq_kv_fork(e, c, s);
      c->state = DI_SEQ_RUNNING;
      di_seq_list_insert(&e->running, c);
    }
    r->n_seqs = r->n;
    for (int i = 0; i < r->n; i++) {
      di_seq *c = r->seqs[i];
      open_detok(e, c);
      di_engine_sample_emit(e, c, logits);
    }
    return;
  }
  open_detok(e, s);
  di_engine_sample_emit(e, s, logits);
}
