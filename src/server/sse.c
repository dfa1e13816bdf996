/* Server-sent events: the response body comes from a content reader that
 * MHD calls on the connection's own thread (thread-per-connection mode), so
 * it may block on the request's event queue. It sends ": keep-alive"
 * comments while nothing is produced, notices a client that left within
 * POLL_MS and cancels its request so the engine frees its KV blocks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "server/internal.h"

#define POLL_MS 100

void di_srv_sse_put(di_srv_gen *g, json_t *j) {
  char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (!text) {
    g->out.oom = 1;
    return;
  }
  di_srv_buf_puts(&g->out, "data: ");
  di_srv_buf_puts(&g->out, text);
  di_srv_buf_puts(&g->out, "\n\n");
  free(text);
}

static void finish_stream(di_srv_gen *g) {
  for (int i = 0; i < g->n_choices; i++) {
    di_srv_choice *ch = &g->choices[i];
    if (ch->finish == DI_FINISH_ERROR || ch->finish == DI_FINISH_CANCELLED || g->lost) {
      di_srv_err e;
      if (g->overflow)
        di_srv_fail(&e, 500, "server_error", "stream_stalled",
                    "the client did not read the stream; more than %zu bytes were waiting, so the request "
                    "was cancelled",
                    g->s->o.stream_buffer);
      else if (g->shutdown)
        di_srv_fail(&e, 503, "service_unavailable", "server_shutdown",
                    "the server is shutting down; the request was cancelled");
      else
        di_srv_fail(&e, 500, "server_error", NULL, "generation failed: %s",
                    ch->error ? ch->error : g->lost ? "out of memory" : "cancelled");
      di_srv_sse_put(g, di_srv_err_json(&e));
      break;
    }
  }
  if (g->include_usage) {
    json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", g->id, "object",
                          g->kind == DI_SRV_CHAT ? "chat.completion.chunk" : "text_completion",
                          "created", (json_int_t)g->created, "model", g->s->model_name, "choices",
                          "usage", di_srv_gen_usage(g));
    if (j && g->kind == DI_SRV_CHAT) json_object_set_new(j, "system_fingerprint", json_string("deepinfer-" DI_VERSION));
    di_srv_sse_put(g, j);
  }
  di_srv_buf_puts(&g->out, "data: [DONE]\n\n");
  g->sent_done = 1;
}

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max) {
  di_srv_gen *g = cls;
  double last_check = di_srv_now();
  for (;;) {
    if (g->out.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
    if (g->out_off < g->out.len) {
      size_t n = g->out.len - g->out_off;
      if (n > max) n = max;
      memcpy(buf, g->out.p + g->out_off, n);
      g->out_off += n;
      if (g->out_off == g->out.len) g->out_off = g->out.len = 0;
      g->t_last_out = di_srv_now();
      return (ssize_t)n;
    }
    if (g->sent_done) return MHD_CONTENT_READER_END_OF_STREAM;
    if (di_srv_gen_done(g)) {
      finish_stream(g);
      continue;
    }
    if (atomic_load(&g->s->cancel_all) && !g->shutdown) {
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
      if (di_srv_client_left(g->c, &g->probed, &g->out) || atomic_load(&g->s->stopping)) {
        di_srv_gen_cancel(g);
        return MHD_CONTENT_READER_END_WITH_ERROR;
      }
      if (g->out.len == 0 && (now - g->t_last_out) * 1000.0 >= g->s->o.keepalive_ms)
        di_srv_buf_puts(&g->out, ": keep-alive\n\n");
    }
  }
}

static void reader_free(void *cls) {
  di_srv_gen *g = cls;
  if (!g->sent_done) di_srv_gen_cancel(g);
  di_srv_gen_unref(g);
}

enum MHD_Result di_srv_stream_start(di_srv_req *r, di_srv_gen *g) {
  if (g->kind == DI_SRV_CHAT) di_srv_chat_stream_open(g);
  g->t_last_out = di_srv_now();
  pthread_mutex_lock(&g->mu);
  g->refs++; /* the response's reference, dropped by reader_free */
  pthread_mutex_unlock(&g->mu);
  struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 << 10, reader, g, reader_free);
  if (!resp) {
    reader_free(g);
    return MHD_NO;
  }
  /* A small kernel send buffer: what a client leaves unread waits in the
   * stream's own bounded buffer (stream_buffer), not megabytes in the kernel. */
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->c, MHD_CONNECTION_INFO_CONNECTION_FD);
  int sndbuf = 16 << 10;
  if (ci) setsockopt(ci->connect_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  MHD_add_response_header(resp, "Content-Type", "text/event-stream; charset=utf-8");
  MHD_add_response_header(resp, "Cache-Control", "no-cache");
  MHD_add_response_header(resp, "X-Accel-Buffering", "no");
  return di_srv_queue(r, 200, resp);
}
