/* Request intake: validation of a request's parameters against the engine,
 * its prompt's tokens, the request and its sequences built on the caller's
 * thread, and the hand-over (inbox, cancel / pause commands) to the stepping
 * thread, which takes them in drain_inbox (engine.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

static di_code validate(const di_engine *e, const di_request_params *p, di_status *st) {
  if (p->max_tokens < 0) return di_errorf(st, DI_ERR_INVALID, "max_tokens must be >= 0 (got %d)", p->max_tokens);
  if (p->n < 0) return di_errorf(st, DI_ERR_INVALID, "n must be >= 1 (got %d)", p->n);
  if (p->n > e->max_seqs)
    return di_errorf(st, DI_ERR_INVALID, "n = %d exceeds the engine's max_seqs (%d)", p->n, e->max_seqs);
  if (p->logprobs < 0 || p->top_logprobs < 0 || p->top_logprobs > DI_MAX_TOP_LOGPROBS)
    return di_errorf(st, DI_ERR_INVALID, "top_logprobs must be in [0, %d] (got %d)", DI_MAX_TOP_LOGPROBS,
                     p->top_logprobs);
  if (p->n_stop < 0 || (p->n_stop > 0 && !p->stop)) return di_errorf(st, DI_ERR_INVALID, "stop: bad array");
  if (p->n_stop > 0 && !e->be.detok_new)
    return di_errorf(st, DI_ERR_UNSUPPORTED, "stop strings need a tokenizer, and this engine has none");
  for (int i = 0; i < p->n_stop; i++)
    if (!p->stop[i] || !p->stop[i][0]) return di_errorf(st, DI_ERR_INVALID, "stop[%d] is empty", i);
  if (p->n_stop_ids < 0 || (p->n_stop_ids > 0 && !p->stop_ids)) return di_errorf(st, DI_ERR_INVALID, "stop_ids: bad array");
  for (int i = 0; i < p->n_stop_ids; i++)
    if (p->stop_ids[i] < 0 || p->stop_ids[i] >= e->be.n_vocab)
      return di_errorf(st, DI_ERR_RANGE, "stop_ids[%d] = %d is outside the vocabulary [0, %d)", i, p->stop_ids[i],
                       e->be.n_vocab);
  if (!p->cb) return di_errorf(st, DI_ERR_INVALID, "a request needs an event callback");
  if (p->logits_cb && p->n > 1) return di_errorf(st, DI_ERR_INVALID, "logits_cb needs n = 1 (got n = %d)", p->n);
  return di_sampling_validate(&p->sampling, e->be.n_vocab, st);
}

static di_code prompt_tokens(const di_engine *e, const di_request_params *p, di_req *r, di_status *st) {
  if (p->prompt_ids && p->prompt_text) return di_errorf(st, DI_ERR_INVALID, "give prompt ids or prompt text, not both");
  if (p->prompt_text) {
    if (!e->be.encode) return di_errorf(st, DI_ERR_UNSUPPORTED, "text prompts need a tokenizer, and this engine has none");
    size_t n = 0;
    if (e->be.encode(e->be.user, p->prompt_text, p->prompt_text_len, false, &r->prompt, &n, st) != DI_OK)
      return di_error_wrap(st, "prompt: ");
    if (n > (size_t)e->ctx) return di_errorf(st, DI_ERR_RANGE, "prompt has %zu tokens; the context is %d", n, e->ctx);
    r->n_prompt = (int)n;
  } else {
    if (p->n_prompt > (size_t)e->ctx)
      return di_errorf(st, DI_ERR_RANGE, "prompt has %zu tokens; the context is %d", p->n_prompt, e->ctx);
    if (p->n_prompt && !p->prompt_ids) return di_errorf(st, DI_ERR_INVALID, "prompt_ids is NULL");
    r->prompt = malloc((p->n_prompt ? p->n_prompt : 1) * sizeof *r->prompt);
    if (!r->prompt) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < p->n_prompt; i++) {
      if (p->prompt_ids[i] < 0 || p->prompt_ids[i] >= e->be.n_vocab)
        return di_errorf(st, DI_ERR_RANGE, "prompt token %zu: id %d is outside the vocabulary [0, %d)", i,
                         p->prompt_ids[i], e->be.n_vocab);
      r->prompt[i] = p->prompt_ids[i];
    }
    r->n_prompt = (int)p->n_prompt;
  }
  if (r->n_prompt == 0) return di_errorf(st, DI_ERR_INVALID, "the prompt is empty");
  if (r->n_prompt >= e->ctx)
    return di_errorf(st, DI_ERR_RANGE, "prompt has %d tokens; the context is %d (no room to generate)", r->n_prompt,
                     e->ctx);
  int bs = e->pool->block_size;
  /* (every layer sliding: the windows are all it keeps, checked at start-up) */
  if (e->be.policy != DI_KV_POLICY_WINDOW && (r->n_prompt + 1 + bs - 1) / bs > e->pool->n_blocks)
    return di_errorf(st, DI_ERR_RANGE, "prompt has %d tokens; the whole KV pool holds %d", r->n_prompt,
                     e->pool->n_blocks * bs - 1);
  return DI_OK;
}

static void *dup_array(const void *src, size_t n, size_t elt) {
  void *d = malloc(n ? n * elt : 1);
  if (d && n) memcpy(d, src, n * elt);
  return d;
}

static di_code build_request(di_engine *e, const di_request_params *p, di_req *r, di_status *st) {
  r->p = *p;
  r->n = p->n > 0 ? p->n : 1;
  r->priority = p->priority;
  if (prompt_tokens(e, p, r, st) != DI_OK) return st->code;
  r->p.prompt_ids = NULL;
  r->p.prompt_text = NULL;
  r->stop = calloc((size_t)p->n_stop + 1, sizeof *r->stop);
  r->stop_len = calloc((size_t)p->n_stop + 1, sizeof *r->stop_len);
  r->stop_ids = dup_array(p->stop_ids, (size_t)p->n_stop_ids, sizeof *r->stop_ids);
  r->bias_ids = dup_array(p->sampling.logit_bias_ids, (size_t)p->sampling.n_logit_bias, sizeof *r->bias_ids);
  r->bias_vals = dup_array(p->sampling.logit_bias_values, (size_t)p->sampling.n_logit_bias, sizeof *r->bias_vals);
  r->seqs = calloc((size_t)r->n, sizeof *r->seqs);
  if (!r->stop || !r->stop_len || !r->stop_ids || !r->bias_ids || !r->bias_vals || !r->seqs)
    return di_errorf(st, DI_ERR_NOMEM, "out of memory");
  for (int i = 0; i < p->n_stop; i++) {
    r->stop_len[i] = strlen(p->stop[i]);
    if (!(r->stop[i] = dup_array(p->stop[i], r->stop_len[i] + 1, 1))) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
  }
  r->p.stop = (const char *const *)r->stop;
  r->p.stop_ids = r->stop_ids;
  r->p.sampling.logit_bias_ids = r->bias_ids;
  r->p.sampling.logit_bias_values = r->bias_vals;
  int cap = r->p.max_tokens > 0 && r->n_prompt + r->p.max_tokens < e->ctx ? r->n_prompt + r->p.max_tokens : e->ctx;
  for (int i = 0; i < r->n; i++) {
    di_seq *s = calloc(1, sizeof *s);
    if (!s) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
    r->seqs[i] = s;
    s->req = r;
    s->index = i;
    s->cap = cap;
    s->tokens = malloc((size_t)cap * sizeof *s->tokens);
    if (!s->tokens || di_kv_table_init(&s->table, e->pool->block_size, cap, st) != DI_OK)
      return di_errorf(st, DI_ERR_NOMEM, "out of memory");
    s->table.align = e->be.align;
    for (int k = 0; k < e->be.n_swa_tables; k++) {
      if (di_kv_table_init(&s->swa[k], e->pool->block_size, cap, st) != DI_OK)
        return di_errorf(st, DI_ERR_NOMEM, "out of memory");
      s->swa[k].root ^= (uint64_t)(k + 1) * 0xD6E8FEB86659FD93ull; /* its own prefix-cache names */
      s->swa[k].group = DI_KV_GROUP_WINDOW;
      s->swa[k].window = di_engine_swa_window(&e->be, k);
      s->swa[k].tip_margin = di_kv_tip_margin(e->be.window, e->pool->block_size);
      s->swa[k].ckpt = e->swa_ckpt;
      s->swa[k].tip = r->n_prompt;
      s->swa[k].sparse = e->be.window_sparse;
    }
    if (e->be.policy == DI_KV_POLICY_WINDOW && e->be.window > 0) {
      s->table.group = DI_KV_GROUP_WINDOW;
      s->table.window = e->be.window;
      s->table.ckpt = e->swa_ckpt;
      s->table.tip = r->n_prompt;
    }
    s->rng = di_sampler_seed(p->sampling.seed, i);
    s->logits_row = -1;
  }
  di_seq *s0 = r->seqs[0];
  memcpy(s0->tokens, r->prompt, (size_t)r->n_prompt * sizeof *s0->tokens);
  s0->len = r->n_prompt;
  r->n_seqs = 1;
  return DI_OK;
}

static void set_err(char *err, size_t errlen, const di_status *st) {
  if (err && errlen) snprintf(err, errlen, "%s", st->msg);
}

di_code di_engine_submit(di_engine *e, const di_request_params *p, uint64_t *id, char *err, size_t errlen) {
  return di_engine_submit_constrained(e, p, NULL, id, err, errlen);
}

di_code di_engine_submit_constrained(di_engine *e, const di_request_params *p, const di_constraint *c, uint64_t *id,
                                     char *err, size_t errlen) {
  di_status st = {0};
  if (!e || !p) return DI_ERR_INVALID;
  if (validate(e, p, &st) != DI_OK || (c && p->n > 1 && di_errorf(&st, DI_ERR_INVALID, "a constraint needs n = 1"))) {
    set_err(err, errlen, &st);
    return st.code;
  }
  di_req *r = calloc(1, sizeof *r);
  if (!r) {
    di_errorf(&st, DI_ERR_NOMEM, "out of memory");
  } else if (build_request(e, p, r, &st) != DI_OK) {
    di_engine_req_free(e, r);
    r = NULL;
  }
  if (!r) {
    set_err(err, errlen, &st);
    return st.code;
  }
  if (c) r->constraint = *c;
  r->t_submit = di_engine_now();
  pthread_mutex_lock(&e->mu);
  r->id = e->next_id++;
  r->arrival = e->next_arrival++;
  if (e->inbox_tail) e->inbox_tail->next = r; else e->inbox_head = r;
  e->inbox_tail = r;
  e->n_unfinished++;
  pthread_cond_signal(&e->cv);
  pthread_mutex_unlock(&e->mu);
  if (id) *id = r->id;
  return DI_OK;
}

static di_code queue_cmd(di_engine *e, uint64_t id, di_engine_cmd_op op) {
  pthread_mutex_lock(&e->mu);
  di_code rc = DI_OK;
  if (id == 0 || id >= e->next_id) {
    rc = DI_ERR_INVALID;
  } else {
    if (e->n_cmds == e->cap_cmds) {
      int cap = e->cap_cmds ? e->cap_cmds * 2 : 16;
      di_engine_cmd *v = realloc(e->cmds, (size_t)cap * sizeof *v);
      if (v) {
        e->cmds = v;
        e->cap_cmds = cap;
      }
    }
    if (e->n_cmds < e->cap_cmds) e->cmds[e->n_cmds++] = (di_engine_cmd){id, op}; else rc = DI_ERR_NOMEM;
    pthread_cond_signal(&e->cv);
  }
  pthread_mutex_unlock(&e->mu);
  return rc;
}

di_code di_engine_cancel(di_engine *e, uint64_t id) { return queue_cmd(e, id, DI_CMD_CANCEL); }

di_code di_engine_pause(di_engine *e, uint64_t id, int pause) {
  return queue_cmd(e, id, pause ? DI_CMD_PAUSE : DI_CMD_RESUME);
}
