/* Generation contexts: one per chat/completions request. The engine's
 * callback (on the engine thread, must not block) only copies events into a
 * per-request queue; the request's own HTTP thread pops and formats them.
 * The context is reference-counted: one reference for the HTTP side and one
 * per engine submission, dropped on that submission's last event, so a
 * client that leaves never frees memory the engine may still write to. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/internal.h"
#include "server/toolcon.h"
#include "server/tools.h"

static uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

di_srv_gen *di_srv_gen_new(di_srv_req *r, di_srv_kind kind, int n_subs, int n_per) {
  di_srv_gen *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->subs = calloc((size_t)n_subs, sizeof *g->subs);
  g->choices = calloc((size_t)n_subs * (size_t)n_per, sizeof *g->choices);
  if (!g->subs || !g->choices) {
    free(g->subs);
    free(g->choices);
    free(g);
    return NULL;
  }
  pthread_mutex_init(&g->mu, NULL);
  pthread_mutex_init(&g->pause_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&g->cv, &ca);
  pthread_condattr_destroy(&ca);
  g->refs = 1;
  g->s = r->s;
  g->c = r->c;
  g->kind = kind;
  g->n_subs = n_subs;
  g->n_per = n_per;
  g->n_choices = n_subs * n_per;
  for (int k = 0; k < n_subs; k++) {
    g->subs[k].g = g;
    g->subs[k].k = k;
  }
  snprintf(g->id, sizeof g->id, "%s-%016llx", kind == DI_SRV_CHAT ? "chatcmpl" : "cmpl",
           (unsigned long long)mix64(r->s->id_salt ^ r->seq));
  g->created = (long)time(NULL);
  g->t_start = r->t0;
  if (r->s->be.params_default) r->s->be.params_default(&g->params);
  else {
    memset(&g->params, 0, sizeof g->params);
    g->params.sampling.top_p = 1.0f;
    g->params.sampling.repetition_penalty = 1.0f;
  }
  g->params.sampling.temperature = 1.0f; /* OpenAI's default, not the engine's greedy one */
  g->params.sampling.seed = mix64(r->s->id_salt + r->seq * 7919u);
  atomic_fetch_add(&r->s->live_gens, 1);
  return g;
}

void di_srv_evt_free(di_srv_evt *v) {
  if (!v) return;
  free(v->text);
  free(v->top_ids);
  free(v->top_logprobs);
  free(v->error);
  free(v);
}

static void gen_free(di_srv_gen *g) {
  for (di_srv_evt *v = g->head, *nx; v; v = nx) {
    nx = v->next;
    di_srv_evt_free(v);
  }
  for (int i = 0; i < g->n_choices; i++) {
    di_srv_choice *ch = &g->choices[i];
    di_srv_buf_free(&ch->text);
    di_srv_buf_free(&ch->reasoning);
    json_decref(ch->logprobs);
    json_decref(ch->tool_calls);
    if (ch->tp) di_srv_toolparse_free(ch->tp);
    free(ch->tp);
    free(ch->error);
  }
  for (int k = 0; k < g->n_subs; k++) {
    free(g->subs[k].prompt_ids);
    free(g->subs[k].echo);
    di_gmatcher_free(g->subs[k].matcher);
    di_srv_toolcon_free(g->subs[k].toolcon);
  }
  for (int i = 0; i < g->n_stops; i++) free(g->stops[i]);
  free(g->stops);
  free(g->bias_ids);
  free(g->bias_vals);
  di_srv_buf_free(&g->out);
  pthread_mutex_destroy(&g->mu);
  pthread_mutex_destroy(&g->pause_mu);
  pthread_cond_destroy(&g->cv);
  atomic_fetch_sub(&g->s->live_gens, 1);
  free(g->subs);
  free(g->choices);
  free(g);
}

void di_srv_gen_unref(di_srv_gen *g) {
  pthread_mutex_lock(&g->mu);
  int left = --g->refs;
  pthread_mutex_unlock(&g->mu);
  if (left == 0) gen_free(g);
}

static char *dup_n(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (p) {
    if (n) memcpy(p, s, n);
    p[n] = 0;
  }
  return p;
}

/* Called with g->mu held when a submission stops holding engine work. */
static void engine_released(di_srv_gen *g) {
  if (--g->engine_live == 0) atomic_fetch_sub(&g->s->inflight, g->n_subs * g->n_per);
}

static void on_event(const di_event *ev, void *user) {
  di_srv_sub *sub = user;
  di_srv_gen *g = sub->g;
  if (ev->index < 0 || ev->index >= g->n_per) return; /* defensive: never index out of range */
  double now = di_srv_now();
  di_srv_evt *v = calloc(1, sizeof *v);
  if (v) {
    v->choice = sub->k * g->n_per + ev->index;
    v->token = ev->token;
    v->logprob = ev->logprob;
    v->finish = ev->finish;
    if (ev->text_len) {
      v->text = dup_n(ev->text, ev->text_len);
      v->text_len = v->text ? ev->text_len : 0;
    }
    if (ev->n_top > 0 && ev->top_ids && ev->top_logprobs) {
      v->top_ids = malloc((size_t)ev->n_top * sizeof *v->top_ids);
      v->top_logprobs = malloc((size_t)ev->n_top * sizeof *v->top_logprobs);
      if (v->top_ids && v->top_logprobs) {
        memcpy(v->top_ids, ev->top_ids, (size_t)ev->n_top * sizeof *v->top_ids);
        memcpy(v->top_logprobs, ev->top_logprobs, (size_t)ev->n_top * sizeof *v->top_logprobs);
        v->n_top = ev->n_top;
      }
    }
    if (ev->error) v->error = strdup(ev->error);
  }
  di_srv_metrics *m = &g->s->metrics;
  int release = 0, stalled = 0;
  pthread_mutex_lock(&g->mu);
  if (v && g->overflow && ev->finish == DI_FINISH_NONE) {
    di_srv_evt_free(v); /* cancelled for a client that stopped reading: nothing more to keep */
  } else if (v) {
    v->bytes = sizeof *v + v->text_len + (size_t)v->n_top * 8;
    g->queued_bytes += v->bytes;
    if (g->tail) g->tail->next = v;
    else g->head = v;
    g->tail = v;
    /* A stream whose client does not read holds its events here: past the
     * limit it is paused (its KV freed) until the client reads again, or
     * cancelled where the backend cannot pause, instead of growing. */
    if (g->stream && !g->overflow && !g->paused && ev->finish == DI_FINISH_NONE &&
        g->queued_bytes > g->s->o.stream_buffer) {
      if (g->s->be.pause) {
        g->paused = 1;
        g->paused_at = now;
        stalled = 2;
      } else {
        g->overflow = 1;
        stalled = 1;
      }
      g->refs++; /* for the watchdog */
    }
  } else {
    g->lost = 1;
  }
  if (ev->prompt_tokens > sub->prompt_tokens) sub->prompt_tokens = ev->prompt_tokens;
  if (ev->cached_tokens > sub->cached_tokens) sub->cached_tokens = ev->cached_tokens;
  if (ev->replayed_tokens > sub->replayed_tokens) sub->replayed_tokens = ev->replayed_tokens;
  if (!g->t_first) g->t_first = now; /* first event of any kind */
  if (ev->queue_seconds >= 0 && g->queue_s < 0) g->queue_s = ev->queue_seconds;
  di_srv_choice *ch = &g->choices[sub->k * g->n_per + ev->index];
  if (ev->token >= 0) {
    ch->cb_tokens++;
    if (!sub->n_tokens++ && !g->first_token_seen) {
      g->first_token_seen = 1;
      di_srv_metrics_ttft(m, now - g->t_start);
    }
  }
  if (ev->finish != DI_FINISH_NONE) {
    int toks = ev->completion_tokens > ch->cb_tokens ? ev->completion_tokens : ch->cb_tokens;
    ch->spec_drafted = ev->spec_drafted;
    ch->spec_accepted = ev->spec_accepted;
    di_srv_metrics_finish(m, ev->finish, toks);
    if (++sub->n_done == g->n_per) {
      release = 1;
      int pt = sub->prompt_tokens ? sub->prompt_tokens : (int)sub->n_prompt;
      double tpot = sub->n_tokens > 1 ? (now - g->t_first) / (sub->n_tokens - 1) : -1;
      di_srv_metrics_request(m, pt, sub->cached_tokens, g->queue_s, -1, tpot,
                             now - g->t_start);
      engine_released(g);
    }
  }
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
  if (stalled == 1) di_srv_guard_cancel_later(g->s, g);
  if (stalled == 2) di_srv_guard_pause_later(g->s, g);
  if (release) di_srv_gen_unref(g);
}

bool di_srv_gen_submit(di_srv_gen *g, di_srv_err *e) {
  di_server *s = g->s;
  /* Admission counts sequences (prompts x n), what the engine schedules: a
   * request of 64 prompts with n = 2 holds 128 slots, not one. */
  int limit = s->be.max_seqs + s->o.max_queue, need = g->n_subs * g->n_per;
  int before = atomic_fetch_add(&s->inflight, need);
  if (before + need > limit) {
    atomic_fetch_sub(&s->inflight, need);
    di_srv_metrics_rejected(&s->metrics);
    di_srv_fail(e, 429, "rate_limit_error", "rate_limit_exceeded",
                "the server is at capacity: this request needs %d sequences (prompts x n), %d of %d are "
                "taken (--max-seqs + --max-queue); retry later",
                need, before, limit);
    e->retry_after = 1;
    return false;
  }
  /* A token held while submitting, so an early finish of sub 0 cannot
   * release the admission before sub 1 is in. */
  pthread_mutex_lock(&g->mu);
  g->engine_live = 1;
  pthread_mutex_unlock(&g->mu);
  g->t_submit = di_srv_now();
  g->queue_s = -1;
  bool ok = true;
  for (int k = 0; k < g->n_subs && ok; k++) {
    di_srv_sub *sub = &g->subs[k];
    di_request_params p = g->params;
    p.prompt_ids = sub->prompt_ids;
    p.n_prompt = sub->n_prompt;
    p.max_tokens = sub->max_tokens;
    p.n = g->n_per;
    p.cb = on_event;
    p.user = sub;
    /* the forks of one prompt are separate requests: each its own sample stream */
    if (sub->fork) p.sampling.seed = mix64(p.sampling.seed + (uint64_t)sub->fork);
    pthread_mutex_lock(&g->mu);
    g->refs++;
    g->engine_live++;
    pthread_mutex_unlock(&g->mu);
    char err[256] = "";
    uint64_t id = 0;
    di_code rc;
    if (sub->toolcon) {
      di_srv_tokcon tc;
      di_srv_toolcon_bind(sub->toolcon, &tc);
      rc = s->be.submit_tokcon(s->be.ctx, &p, &tc, &id, err, sizeof err);
    } else {
      rc = sub->matcher ? s->be.submit_constrained(s->be.ctx, &p, sub->matcher, &id, err, sizeof err)
                        : s->be.submit(s->be.ctx, &p, &id, err, sizeof err);
    }
    pthread_mutex_lock(&g->mu);
    if (rc == DI_OK) {
      sub->id = id;
      sub->submitted = 1;
    } else {
      g->refs--; /* the creator's reference is still held: never reaches 0 here */
      engine_released(g);
    }
    pthread_mutex_unlock(&g->mu);
    if (rc != DI_OK) {
      ok = false;
      if (rc == DI_ERR_FULL) {
        di_srv_metrics_rejected(&s->metrics);
        di_srv_fail(e, 429, "rate_limit_error", "rate_limit_exceeded", "%s", err[0] ? err : "engine queue full");
        e->retry_after = 1;
      } else if (rc == DI_ERR_INVALID || rc == DI_ERR_RANGE || rc == DI_ERR_UNSUPPORTED) {
        di_srv_bad(e, NULL, "%s", err[0] ? err : di_code_name(rc));
      } else {
        di_srv_fail(e, 500, "server_error", NULL, "engine: %s", err[0] ? err : di_code_name(rc));
      }
    }
  }
  pthread_mutex_lock(&g->mu);
  engine_released(g);
  pthread_mutex_unlock(&g->mu);
  if (!ok) di_srv_gen_cancel(g);
  return ok;
}

bool di_srv_sub_copy_prompt(di_srv_gen *g, int k, int from, di_srv_err *e) {
  di_srv_sub *d = &g->subs[k], *o = &g->subs[from];
  d->prompt_ids = malloc((o->n_prompt ? o->n_prompt : 1) * sizeof *d->prompt_ids);
  if (!d->prompt_ids || (o->echo && !(d->echo = strdup(o->echo))))
    return di_srv_fail(e, 500, "server_error", NULL, "out of memory");
  if (o->n_prompt) memcpy(d->prompt_ids, o->prompt_ids, o->n_prompt * sizeof *d->prompt_ids);
  d->n_prompt = o->n_prompt;
  d->max_tokens = o->max_tokens;
  d->fork = k - from;
  return true;
}

bool di_srv_gen_constrain(di_srv_gen *g, const di_srv_constraint *c, di_srv_err *e) {
  if (!c->on) return true;
  if (g->n_per != 1) return di_srv_fail(e, 500, "server_error", NULL, "a constrained request needs one completion per submission");
  if (!di_srv_constraint_matcher(&g->s->be, c, &g->subs[0].matcher, e)) return false;
  for (int k = 1; k < g->n_subs; k++)
    if (!(g->subs[k].matcher = di_gmatcher_fork(g->subs[0].matcher)))
      return di_srv_fail(e, 500, "server_error", NULL, "out of memory");
  return true;
}

void di_srv_gen_cancel(di_srv_gen *g) {
  uint64_t ids[64];
  int n = 0;
  pthread_mutex_lock(&g->mu);
  g->cancelled = 1;
  pthread_mutex_unlock(&g->mu);
  for (int k = 0; k < g->n_subs; k++) {
    pthread_mutex_lock(&g->mu);
    int live = g->subs[k].submitted && g->subs[k].n_done < g->n_per;
    uint64_t id = g->subs[k].id;
    pthread_mutex_unlock(&g->mu);
    if (live) ids[n++] = id;
    if (n == 64 || (k == g->n_subs - 1 && n)) {
      for (int i = 0; i < n; i++) g->s->be.cancel(g->s->be.ctx, ids[i]);
      n = 0;
    }
  }
}

void di_srv_gen_sync_pause(di_srv_gen *g) {
  pthread_mutex_lock(&g->pause_mu);
  pthread_mutex_lock(&g->mu);
  int want = g->paused && !g->cancelled;
  pthread_mutex_unlock(&g->mu);
  if (want != g->engine_paused) {
    for (int k = 0; k < g->n_subs; k++) {
      pthread_mutex_lock(&g->mu);
      int live = g->subs[k].submitted && g->subs[k].n_done < g->n_per;
      uint64_t id = g->subs[k].id;
      pthread_mutex_unlock(&g->mu);
      if (live) g->s->be.pause(g->s->be.ctx, id, want);
    }
    g->engine_paused = want;
  }
  pthread_mutex_unlock(&g->pause_mu);
}

int di_srv_gen_pause_state(di_srv_gen *g, double now, double stall_s) {
  pthread_mutex_lock(&g->mu);
  int st = !g->paused || g->cancelled ? 0 : now - g->paused_at > stall_s ? 2 : 1;
  pthread_mutex_unlock(&g->mu);
  return st;
}

void di_srv_gen_stall(di_srv_gen *g) {
  pthread_mutex_lock(&g->mu);
  g->overflow = 1;
  pthread_mutex_unlock(&g->mu);
  di_srv_gen_cancel(g);
}

di_srv_evt *di_srv_gen_pop(di_srv_gen *g, int ms) {
  pthread_mutex_lock(&g->mu);
  if (!g->head && ms > 0) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    ts.tv_sec += ms / 1000 + ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&g->cv, &g->mu, &ts);
  }
  di_srv_evt *v = g->head;
  if (v) {
    g->queued_bytes -= v->bytes;
    g->head = v->next;
    if (!g->head) g->tail = NULL;
    v->next = NULL;
  }
  int resume = g->paused && !g->overflow && g->queued_bytes <= g->s->o.stream_buffer / 2;
  if (resume) g->paused = 0; /* the client reads again */
  pthread_mutex_unlock(&g->mu);
  if (resume) di_srv_gen_sync_pause(g);
  return v;
}

const char *di_srv_finish_name(di_finish f) {
  switch (f) {
    case DI_FINISH_STOP: return "stop";
    case DI_FINISH_LENGTH: return "length";
    case DI_FINISH_CANCELLED: return "cancelled";
    case DI_FINISH_ERROR: return "error";
    default: return NULL;
  }
}

void di_srv_gen_apply(di_srv_gen *g, di_srv_evt *v) {
  if (v->choice < 0 || v->choice >= g->n_choices) return;
  di_srv_choice *ch = &g->choices[v->choice];
  if (ch->finish != DI_FINISH_NONE) return;
  if (v->token >= 0) ch->completion_tokens++;
  if (v->finish == DI_FINISH_ERROR && v->error && !ch->error) ch->error = strdup(v->error);
  if (g->kind == DI_SRV_CHAT) di_srv_chat_apply(g, ch, v->choice, v);
  else di_srv_cmpl_apply(g, ch, v->choice, v);
  if (v->finish != DI_FINISH_NONE) {
    ch->finish = v->finish;
    g->n_final++;
  }
}

int di_srv_gen_done(di_srv_gen *g) {
  pthread_mutex_lock(&g->mu);
  int lost = g->lost;
  pthread_mutex_unlock(&g->mu);
  return lost || g->n_final == g->n_choices;
}

json_t *di_srv_gen_usage(di_srv_gen *g) {
  long long pt = 0, cached = 0, replayed = 0, ct = 0, rt = 0, drafted = 0, accepted = 0;
  pthread_mutex_lock(&g->mu);
  for (int k = 0; k < g->n_subs; k++) {
    pt += g->subs[k].prompt_tokens ? g->subs[k].prompt_tokens : (long long)g->subs[k].n_prompt;
    cached += g->subs[k].cached_tokens;
    replayed += g->subs[k].replayed_tokens;
  }
  for (int i = 0; i < g->n_choices; i++) {
    drafted += g->choices[i].spec_drafted;
    accepted += g->choices[i].spec_accepted;
  }
  pthread_mutex_unlock(&g->mu);
  for (int i = 0; i < g->n_choices; i++) {
    ct += g->choices[i].completion_tokens;
    rt += g->choices[i].reasoning_tokens;
  }
  /* replayed_tokens (extension): prompt positions recomputed by bounded replay
   * to rebuild sliding-window state; not among the cached ones */
  json_t *u = json_pack("{s:I,s:I,s:I,s:{s:I,s:I},s:{s:I},s:I,s:I}", "prompt_tokens", pt,
                         "completion_tokens", ct, "total_tokens", pt + ct, "prompt_tokens_details",
                         "cached_tokens", cached, "replayed_tokens", replayed, "completion_tokens_details", "reasoning_tokens", rt,
                         "prompt_cache_hit_tokens", cached, "prompt_cache_miss_tokens", pt - cached);
  /* extension: what speculative decoding drafted and the target accepted */
  if (u && drafted > 0)
    json_object_set_new(u, "speculative", json_pack("{s:I,s:I}", "draft_tokens", drafted, "accepted_tokens", accepted));
  return u;
}

/* Checks the client between events without waiting longer than this. */
#define POLL_MS 100

enum MHD_Result di_srv_gen_answer(di_srv_req *r, di_srv_gen *g) {
  if (g->stream) return di_srv_stream_start(r, g);
  double last_check = di_srv_now();
  while (!di_srv_gen_done(g)) {
    if (atomic_load(&r->s->cancel_all) && !g->shutdown) {
      g->shutdown = 1;
      di_srv_gen_cancel(g);
    }
    di_srv_evt *v = di_srv_gen_pop(g, POLL_MS);
    if (v) {
      di_srv_gen_apply(g, v);
      di_srv_evt_free(v);
    }
    double now = di_srv_now();
    if (!v || now - last_check >= POLL_MS / 1000.0) {
      last_check = now;
      if (di_srv_client_left(r->c, &r->probed, NULL) || atomic_load(&r->s->stopping)) {
        di_srv_gen_cancel(g);
        return MHD_NO;
      }
    }
  }
  di_srv_err e;
  if (g->lost) {
    di_srv_fail(&e, 500, "server_error", NULL, "out of memory while collecting the completion");
    return di_srv_reply_err(r, &e);
  }
  for (int i = 0; i < g->n_choices; i++)
    if (g->shutdown && g->choices[i].finish == DI_FINISH_CANCELLED) {
      di_srv_fail(&e, 503, "service_unavailable", "server_shutdown",
                  "the server is shutting down; the request was cancelled");
      e.retry_after = 5;
      return di_srv_reply_err(r, &e);
    }
  for (int i = 0; i < g->n_choices; i++)
    if (g->choices[i].finish == DI_FINISH_ERROR || g->choices[i].finish == DI_FINISH_CANCELLED) {
      di_srv_fail(&e, 500, "server_error", NULL, "generation failed: %s",
                  g->choices[i].error ? g->choices[i].error : di_srv_finish_name(g->choices[i].finish));
      return di_srv_reply_err(r, &e);
    }
  json_t *body = g->kind == DI_SRV_CHAT ? di_srv_chat_result(g) : di_srv_cmpl_result(g);
  return di_srv_reply_json(r, 200, body);
}
