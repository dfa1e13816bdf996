/* Pollable streams: the same events as the callback API, queued for a
 * consumer that pulls them (di_stream_next) instead of being called on the
 * stepping thread. The engine and the consumer each hold a reference; the
 * last one to let go frees the stream, so freeing it early is safe (it also
 * cancels the request). */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deepinfer.h"

typedef struct di_stream_item {
  di_event ev;             /* text/top pointers point into this item */
  char *text;
  int32_t top_ids[20];
  float top_logprobs[20];
  char *error;
  struct di_stream_item *next;
} di_stream_item;

struct di_stream {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  di_stream_item *head, *tail, *current;
  int refs, n_open;        /* n_open: completions not finished yet */
  di_engine *e;
  uint64_t id;
};

static void stream_unref(di_stream *s) {
  pthread_mutex_lock(&s->mu);
  int left = --s->refs;
  pthread_mutex_unlock(&s->mu);
  if (left) return;
  for (di_stream_item *it = s->head, *n; it; it = n) {
    n = it->next;
    free(it->text);
    free(it->error);
    free(it);
  }
  if (s->current) {
    free(s->current->text);
    free(s->current->error);
    free(s->current);
  }
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

static void stream_cb(const di_event *ev, void *user) {
  di_stream *s = user;
  di_stream_item *it = calloc(1, sizeof *it);
  if (it) {
    it->ev = *ev;
    it->text = malloc(ev->text_len + 1);
    if (it->text) {
      memcpy(it->text, ev->text, ev->text_len);
      it->text[ev->text_len] = 0;
    }
    it->ev.text = it->text ? it->text : "";
    it->ev.text_len = it->text ? ev->text_len : 0;
    int n_top = ev->n_top < 20 ? ev->n_top : 20;
    if (n_top > 0) {
      memcpy(it->top_ids, ev->top_ids, (size_t)n_top * sizeof *it->top_ids);
      memcpy(it->top_logprobs, ev->top_logprobs, (size_t)n_top * sizeof *it->top_logprobs);
    }
    it->ev.n_top = n_top;
    it->ev.top_ids = it->top_ids;
    it->ev.top_logprobs = it->top_logprobs;
    it->error = ev->error ? strdup(ev->error) : NULL;
    it->ev.error = it->error;
  }
  pthread_mutex_lock(&s->mu);
  if (it) {
    if (s->tail) s->tail->next = it; else s->head = it;
    s->tail = it;
  }
  bool last = ev->finish != DI_FINISH_NONE && --s->n_open == 0;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  if (last) stream_unref(s); /* the engine's reference */
}

di_code di_engine_submit_stream(di_engine *e, const di_request_params *p, di_stream **out, char *err,
                                size_t errlen) {
  *out = NULL;
  if (p->cb) {
    if (err && errlen) strncpy(err, "a streamed request takes no callback", errlen - 1), err[errlen - 1] = 0;
    return DI_ERR_INVALID;
  }
  di_stream *s = calloc(1, sizeof *s);
  if (!s) return DI_ERR_NOMEM;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->refs = 2;
  s->n_open = p->n > 0 ? p->n : 1;
  s->e = e;
  di_request_params q = *p;
  q.cb = stream_cb;
  q.user = s;
  di_code rc = di_engine_submit(e, &q, &s->id, err, errlen);
  if (rc != DI_OK) {
    s->refs = 1;
    stream_unref(s);
    return rc;
  }
  *out = s;
  return DI_OK;
}

uint64_t di_stream_id(const di_stream *s) { return s->id; }

int di_stream_next(di_stream *s, di_event *ev, int timeout_ms) {
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += timeout_ms / 1000;
  dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (dl.tv_nsec >= 1000000000L) {
    dl.tv_sec++;
    dl.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&s->mu);
  if (s->current) { /* the previous event's memory lives until this call */
    free(s->current->text);
    free(s->current->error);
    free(s->current);
    s->current = NULL;
  }
  int rc = 0;
  for (;;) {
    if (s->head) {
      di_stream_item *it = s->head;
      s->head = it->next;
      if (!s->head) s->tail = NULL;
      s->current = it;
      *ev = it->ev;
      rc = 1;
      break;
    }
    if (s->n_open == 0) {
      rc = -1;
      break;
    }
    if (timeout_ms == 0) break;
    if (timeout_ms > 0) {
      if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT && !s->head) break;
    } else {
      pthread_cond_wait(&s->cv, &s->mu);
    }
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

void di_stream_free(di_stream *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  bool open = s->n_open > 0;
  pthread_mutex_unlock(&s->mu);
  if (open) di_engine_cancel(s->e, s->id);
  stream_unref(s);
}
