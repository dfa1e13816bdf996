/* Header deadlines. libmicrohttpd's connection timeout is an idle timeout:
 * a client sending one header byte every few seconds keeps its connection
 * (and, in thread-per-connection mode, a thread and a connection slot) for
 * ever, and enough of them lock everyone out, /health included. Every
 * connection is registered here from accept to close with the time by which
 * its request headers must be complete; a watchdog thread shuts down the
 * socket of any connection past it, and libmicrohttpd's own thread then sees
 * the end of the stream and closes it normally. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server/internal.h"

typedef struct guard_conn {
  struct guard_conn *prev, *next;
  int fd;
  double deadline; /* monotonic seconds; 0 = none (a request is being served) */
} guard_conn;

typedef struct guard_cancel { /* a stream to cancel, or one paused for a full buffer */
  struct guard_cancel *next;
  di_srv_gen *g;
} guard_cancel;

struct di_srv_guard {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t th;
  int stop;
  guard_conn *head;
  guard_cancel *cancels;
  guard_cancel *pauses; /* streams to pause in the engine (queued by its callback) */
  guard_cancel *paused; /* streams paused: cancelled past stall_s (only this thread touches the list) */
  double header_s, idle_s, stall_s;
  int draining; /* di_srv_guard_drain: idle connections are closed, not kept alive */
};

static void *watch(void *arg) {
  struct di_srv_guard *g = arg;
  pthread_mutex_lock(&g->mu);
  while (!g->stop) {
    double now = di_srv_now();
    for (guard_conn *k = g->head; k; k = k->next)
      if (k->deadline > 0 && now > k->deadline) {
        k->deadline = 0;
        /* The fd stays open (its owner closes it after CLOSED, which takes
         * this mutex first), so it cannot be another connection's yet. */
        shutdown(k->fd, SHUT_RDWR);
      }
    while (g->cancels) {
      guard_cancel *k = g->cancels;
      g->cancels = k->next;
      pthread_mutex_unlock(&g->mu);
      di_srv_gen_cancel(k->g);
      di_srv_gen_unref(k->g);
      free(k);
      pthread_mutex_lock(&g->mu);
    }
    while (g->pauses) {
      guard_cancel *k = g->pauses;
      g->pauses = k->next;
      pthread_mutex_unlock(&g->mu);
      di_srv_gen_sync_pause(k->g);
      pthread_mutex_lock(&g->mu);
      k->next = g->paused;
      g->paused = k;
    }
    for (guard_cancel **l = &g->paused; *l;) {
      guard_cancel *k = *l;
      int st = di_srv_gen_pause_state(k->g, now, g->stall_s);
      if (st == 1) {
        l = &k->next;
        continue;
      }
      *l = k->next;
      pthread_mutex_unlock(&g->mu);
      if (st == 2) di_srv_gen_stall(k->g); /* its client never came back */
      di_srv_gen_unref(k->g);
      free(k);
      pthread_mutex_lock(&g->mu);
    }
    if (g->stop) break;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += 200 * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&g->cv, &g->mu, &ts);
  }
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

di_code di_srv_guard_start(di_server *s, di_status *st) {
  struct di_srv_guard *g = calloc(1, sizeof *g);
  if (!g) return di_errorf(st, DI_ERR_NOMEM, "out of memory");
  g->header_s = s->o.header_timeout;
  g->idle_s = s->o.request_timeout;
  g->stall_s = s->o.stream_stall_timeout;
  pthread_mutex_init(&g->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&g->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (pthread_create(&g->th, NULL, watch, g) != 0) {
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
    return di_errorf(st, DI_ERR_IO, "cannot start the connection watchdog thread");
  }
  s->guard = g;
  return DI_OK;
}

void di_srv_guard_stop(di_server *s) {
  struct di_srv_guard *g = s->guard;
  if (!g) return;
  pthread_mutex_lock(&g->mu);
  g->stop = 1;
  pthread_cond_signal(&g->cv);
  pthread_mutex_unlock(&g->mu);
  pthread_join(g->th, NULL);
  for (guard_cancel *k = g->cancels, *nx; k; k = nx) {
    nx = k->next;
    di_srv_gen_cancel(k->g);
    di_srv_gen_unref(k->g);
    free(k);
  }
  for (int pass = 0; pass < 2; pass++)
    for (guard_cancel *k = pass ? g->paused : g->pauses, *nx; k; k = nx) {
      nx = k->next;
      di_srv_gen_unref(k->g);
      free(k);
    }
  for (guard_conn *k = g->head, *nx; k; k = nx) {
    nx = k->next;
    free(k);
  }
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  free(g);
  s->guard = NULL;
}

void di_srv_guard_notify(void *cls, struct MHD_Connection *c, void **socket_ctx,
                         enum MHD_ConnectionNotificationCode code) {
  di_server *s = cls;
  struct di_srv_guard *g = s->guard;
  if (!g) return;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    guard_conn *k = ci ? calloc(1, sizeof *k) : NULL;
    *socket_ctx = k;
    if (!k) return; /* unguarded; the idle timeout still applies */
    k->fd = ci->connect_fd;
    k->deadline = di_srv_now() + g->header_s;
    pthread_mutex_lock(&g->mu);
    k->next = g->head;
    if (g->head) g->head->prev = k;
    g->head = k;
    pthread_mutex_unlock(&g->mu);
  } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
    guard_conn *k = *socket_ctx;
    if (!k) return;
    pthread_mutex_lock(&g->mu);
    if (k->prev) k->prev->next = k->next;
    else g->head = k->next;
    if (k->next) k->next->prev = k->prev;
    pthread_mutex_unlock(&g->mu);
    free(k);
    *socket_ctx = NULL;
  }
}

static void set_deadline(di_server *s, struct MHD_Connection *c, double deadline) {
  struct di_srv_guard *g = s->guard;
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  guard_conn *k = ci ? ci->socket_context : NULL;
  if (!g || !k) return;
  pthread_mutex_lock(&g->mu);
  k->deadline = deadline;
  pthread_mutex_unlock(&g->mu);
}

void di_srv_guard_headers_done(di_server *s, struct MHD_Connection *c) { set_deadline(s, c, 0); }

/* A kept-alive connection may idle for the idle timeout, then must deliver
 * its next request's headers within the header timeout. */
void di_srv_guard_request_done(di_server *s, struct MHD_Connection *c) {
  struct di_srv_guard *g = s->guard;
  if (!g) return;
  pthread_mutex_lock(&g->mu);
  int draining = g->draining;
  pthread_mutex_unlock(&g->mu);
  set_deadline(s, c, draining ? di_srv_now() : di_srv_now() + g->idle_s + g->header_s);
  if (draining) pthread_cond_signal(&g->cv);
}

/* A draining server takes no new requests, so a kept-alive connection has
 * nothing left to wait for: closing it tells a client that reads until close
 * that its answer is complete, instead of holding it until the server stops
 * (while its other, unread streams fill their socket buffers and cannot even
 * be told of the drain's cancel). */
void di_srv_guard_drain(di_server *s) {
  struct di_srv_guard *g = s->guard;
  if (!g) return;
  pthread_mutex_lock(&g->mu);
  g->draining = 1;
  double now = di_srv_now();
  for (guard_conn *k = g->head; k; k = k->next)
    if (k->deadline > 0) k->deadline = now;
  pthread_cond_signal(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

/* Hands g (and its reference) to the watchdog's list `pauses` or `cancels`.
 * If it cannot, the stream stays bounded (its events are dropped) until its
 * client reads or leaves. */
static void defer(di_server *s, di_srv_gen *g, bool pause) {
  struct di_srv_guard *gd = s->guard;
  guard_cancel *k = gd ? malloc(sizeof *k) : NULL;
  if (!k) {
    pthread_mutex_lock(&g->mu);
    g->paused = 0;
    g->overflow = 1;
    pthread_mutex_unlock(&g->mu);
    di_srv_gen_unref(g);
    return;
  }
  k->g = g;
  pthread_mutex_lock(&gd->mu);
  guard_cancel **list = pause ? &gd->pauses : &gd->cancels;
  k->next = *list;
  *list = k;
  pthread_cond_signal(&gd->cv);
  pthread_mutex_unlock(&gd->mu);
}

void di_srv_guard_cancel_later(di_server *s, di_srv_gen *g) { defer(s, g, false); }
void di_srv_guard_pause_later(di_server *s, di_srv_gen *g) { defer(s, g, true); }
