/* A fake backend for the HTTP server tests: bytes are tokens (id = byte,
 * BOS = 256, vocabulary 260), and a stepping thread "generates" a fixed
 * script per request so the HTTP/JSON/SSE/metrics layers can be tested
 * without a model. Prompt markers change the script:
 *   THINK  -> "<think>plan</think>\n\nanswer"
 *   SLOW   -> one token every 40 ms
 *   WAIT   -> the first token only after 400 ms (keep-alive comments)
 * otherwise the output is "hello world" repeated, up to max_tokens. */
#ifndef DI_TEST_SERVER_FAKE_H
#define DI_TEST_SERVER_FAKE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/server.h"

#define FAKE_BOS 256
#define FAKE_NVOCAB 260
#define FAKE_MAXREQ 64

typedef struct fake_req {
  int used;
  uint64_t id;
  di_request_params p;
  const char *script;
  int pos[8], done[8], n, slow, wait_ms, cancelled, prompt_tokens;
  double t0, last;
} fake_req;

typedef struct fake_engine {
  pthread_mutex_t mu;
  pthread_t th;
  atomic_int stop, ready;
  fake_req reqs[FAKE_MAXREQ];
  uint64_t next_id;
  int cancels, submits, finished;
  di_request_params last; /* copy of the last submitted params */
  char last_stop0[64];
  int32_t last_bias0;
  int32_t last_prompt[4096];
  size_t last_n_prompt;
} fake_engine;

static double fake_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int fake_has(const int32_t *ids, size_t n, const char *marker) {
  size_t m = strlen(marker);
  for (size_t i = 0; i + m <= n; i++) {
    size_t k = 0;
    while (k < m && ids[i + k] == (unsigned char)marker[k]) k++;
    if (k == m) return 1;
  }
  return 0;
}

static void *fake_loop(void *arg) {
  fake_engine *f = arg;
  while (!atomic_load(&f->stop)) {
    pthread_mutex_lock(&f->mu);
    double now = fake_now();
    for (int r = 0; r < FAKE_MAXREQ; r++) {
      fake_req *q = &f->reqs[r];
      if (!q->used) continue;
      if (!q->cancelled && (now - q->t0) * 1000 < q->wait_ms) continue;
      if (!q->cancelled && q->slow && now - q->last < 0.04) continue;
      q->last = now;
      int live = 0;
      for (int i = 0; i < q->n; i++) {
        if (q->done[i]) continue;
        di_event ev = {.request_id = q->id, .index = i, .token = -1, .prompt_tokens = q->prompt_tokens,
                       .cached_tokens = q->prompt_tokens / 2, .completion_tokens = q->pos[i]};
        size_t slen = strlen(q->script);
        int max = q->p.max_tokens;
        if (q->cancelled) {
          ev.finish = DI_FINISH_CANCELLED;
        } else if (q->pos[i] >= max) {
          ev.finish = DI_FINISH_LENGTH;
        } else if (!strcmp(q->script, "hello world") || (size_t)q->pos[i] < slen) {
          char c = q->script[q->pos[i] % slen];
          int32_t tops[3] = {(unsigned char)c, 'x', 'y'};
          float tlp[3] = {-0.1f, -2.5f, -3.0f};
          ev.token = (unsigned char)c;
          ev.text = &q->script[q->pos[i] % slen];
          ev.text_len = 1;
          ev.logprob = -0.1f;
          if (q->p.logprobs) {
            ev.n_top = q->p.top_logprobs < 3 ? q->p.top_logprobs : 3;
            ev.top_ids = tops;
            ev.top_logprobs = tlp;
          }
          q->pos[i]++;
          ev.completion_tokens = q->pos[i];
          q->p.cb(&ev, q->p.user);
          live = 1;
          continue;
        } else {
          ev.finish = DI_FINISH_STOP;
        }
        q->done[i] = 1;
        f->finished++;
        q->p.cb(&ev, q->p.user);
      }
      for (int i = 0; i < q->n; i++) live |= !q->done[i];
      if (!live) q->used = 0;
    }
    pthread_mutex_unlock(&f->mu);
    usleep(1000);
  }
  return NULL;
}

static int fake_ready(void *ctx) { return atomic_load(&((fake_engine *)ctx)->ready); }

static di_code fake_submit(void *ctx, const di_request_params *p, uint64_t *id, char *err, size_t errlen) {
  fake_engine *f = ctx;
  pthread_mutex_lock(&f->mu);
  int slot = -1;
  for (int r = 0; r < FAKE_MAXREQ && slot < 0; r++)
    if (!f->reqs[r].used) slot = r;
  if (slot < 0) {
    pthread_mutex_unlock(&f->mu);
    snprintf(err, errlen, "fake engine full");
    return DI_ERR_FULL;
  }
  fake_req *q = &f->reqs[slot];
  memset(q, 0, sizeof *q);
  q->used = 1;
  q->id = ++f->next_id;
  q->p = *p;
  q->n = p->n > 0 ? p->n : 1;
  if (q->n > 8) q->n = 8;
  q->prompt_tokens = (int)p->n_prompt;
  q->script = fake_has(p->prompt_ids, p->n_prompt, "THINK") ? "<think>plan</think>\n\nanswer" : "hello world";
  q->slow = fake_has(p->prompt_ids, p->n_prompt, "SLOW");
  q->wait_ms = fake_has(p->prompt_ids, p->n_prompt, "WAIT") ? 400 : 0;
  q->t0 = fake_now();
  f->submits++;
  f->last = *p;
  f->last_stop0[0] = 0;
  f->last_bias0 = p->sampling.n_logit_bias ? p->sampling.logit_bias_ids[0] : -1;
  if (p->n_stop > 0) snprintf(f->last_stop0, sizeof f->last_stop0, "%s", p->stop[0]);
  f->last_n_prompt = p->n_prompt < 4096 ? p->n_prompt : 4096;
  memcpy(f->last_prompt, p->prompt_ids, f->last_n_prompt * sizeof(int32_t));
  *id = q->id;
  pthread_mutex_unlock(&f->mu);
  return DI_OK;
}

static di_code fake_cancel(void *ctx, uint64_t id) {
  fake_engine *f = ctx;
  pthread_mutex_lock(&f->mu);
  for (int r = 0; r < FAKE_MAXREQ; r++)
    if (f->reqs[r].used && f->reqs[r].id == id && !f->reqs[r].cancelled) {
      f->reqs[r].cancelled = 1;
      f->cancels++;
    }
  pthread_mutex_unlock(&f->mu);
  return DI_OK;
}

static void fake_stats(void *ctx, di_engine_stats *s) {
  fake_engine *f = ctx;
  memset(s, 0, sizeof *s);
  pthread_mutex_lock(&f->mu);
  for (int r = 0; r < FAKE_MAXREQ; r++) s->running += f->reqs[r].used;
  s->finished = (uint64_t)f->finished;
  pthread_mutex_unlock(&f->mu);
  s->kv_blocks_total = 100;
  s->kv_blocks_used = s->running * 2;
  s->kv_blocks_high_water = 10;
}

static di_code fake_tokenize(void *ctx, const char *text, size_t len, int add_special, int parse_special,
                             int32_t **ids, size_t *n, di_status *st) {
  *ids = malloc((len + 1) * sizeof **ids);
  if (!*ids) return di_errorf(st, DI_ERR_NOMEM, "oom");
  size_t k = 0;
  if (add_special) (*ids)[k++] = FAKE_BOS;
  for (size_t i = 0; i < len; i++) (*ids)[k++] = (unsigned char)text[i];
  *n = k;
  return DI_OK;
}

static di_code fake_detokenize(void *ctx, const int32_t *ids, size_t n, char **text, size_t *len, di_status *st) {
  *text = malloc(n + 1);
  if (!*text) return di_errorf(st, DI_ERR_NOMEM, "oom");
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= FAKE_NVOCAB) {
      free(*text);
      return di_errorf(st, DI_ERR_RANGE, "token id %d at index %zu is out of range", ids[i], i);
    }
    if (ids[i] < 256) (*text)[k++] = (char)ids[i];
  }
  (*text)[k] = 0;
  *len = k;
  return DI_OK;
}

static int fake_token_bytes(void *ctx, int32_t id, char *buf, size_t cap) {
  if (id < 0 || id >= 256 || cap < 1) return id >= 256 && id < FAKE_NVOCAB ? 0 : -1;
  buf[0] = (char)id;
  return 1;
}

static di_code fake_render(void *ctx, const json_t *msgs, const json_t *tools, int cont, int32_t **ids,
                           size_t *n_ids, int *think_open, di_status *st) {
  char text[8192];
  size_t k = 0, n = json_array_size(msgs);
  for (size_t i = 0; i < n && k < sizeof text; i++) {
    json_t *m = json_array_get(msgs, i);
    const char *c = json_string_value(json_object_get(m, "content"));
    k += (size_t)snprintf(text + k, sizeof text - k, cont && i == n - 1 ? "%s: %s" : "%s: %s\n",
                          json_string_value(json_object_get(m, "role")), c ? c : "");
  }
  /* A tool-aware template: the tool names reach the prompt. */
  for (size_t i = 0; i < json_array_size(tools) && k < sizeof text; i++)
    k += (size_t)snprintf(text + k, sizeof text - k, "tool: %s\n",
                          json_string_value(json_object_get(json_object_get(json_array_get(tools, i), "function"), "name")));
  if (!cont && k < sizeof text) k += (size_t)snprintf(text + k, sizeof text - k, "assistant: ");
  if (k >= sizeof text) return di_errorf(st, DI_ERR_RANGE, "fake prompt too long");
  *think_open = 0;
  return fake_tokenize(ctx, text, k, 1, 0, ids, n_ids, st);
}

static di_code fake_fim(void *ctx, const char *prefix, const char *suffix, int32_t **ids, size_t *n, di_status *st) {
  return di_errorf(st, DI_ERR_UNSUPPORTED, "no FIM tokens");
}

static void fake_start(fake_engine *f, di_srv_backend *be, int n_ctx, int max_seqs) {
  memset(f, 0, sizeof *f);
  pthread_mutex_init(&f->mu, NULL);
  atomic_store(&f->ready, 1);
  pthread_create(&f->th, NULL, fake_loop, f);
  memset(be, 0, sizeof *be);
  be->ctx = f;
  be->ready = fake_ready;
  be->submit = fake_submit;
  be->cancel = fake_cancel;
  be->stats = fake_stats;
  be->tokenize = fake_tokenize;
  be->detokenize = fake_detokenize;
  be->token_bytes = fake_token_bytes;
  be->render_chat = fake_render;
  be->fim = fake_fim;
  be->n_ctx = n_ctx;
  be->n_vocab = FAKE_NVOCAB;
  be->max_seqs = max_seqs;
}

static void fake_stop(fake_engine *f) {
  atomic_store(&f->stop, 1);
  pthread_join(f->th, NULL);
}

#endif
