/* The HTTP layer: a libmicrohttpd daemon in thread-per-connection mode, so a
 * request may block its own thread while it waits for the engine (non-stream
 * answers, SSE content readers) without stalling anyone else. Bodies are
 * collected here under a size cap and a deadline; routing is in routes.c. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/internal.h"

/* Past this a too-large body is no longer drained (so the client can read
 * its 413) but cut off. */
#define DRAIN_LIMIT ((size_t)64 << 20)

void di_server_opts_default(di_server_opts *o) {
  memset(o, 0, sizeof *o);
  o->host = "127.0.0.1";
  o->port = 8080;
  o->model_name = "default";
  o->max_queue = 256;
  o->max_body = (size_t)4 << 20;
  o->request_timeout = 60;
  o->max_connections = 1024;
  o->max_connections_per_ip = 0;
  o->header_timeout = 10;
  o->stream_buffer = (size_t)1 << 20;
  o->stream_stall_timeout = 30;
  o->keepalive_ms = 5000;
  o->seed = -1;
}

int di_srv_client_left(struct MHD_Connection *c, int *probed, di_srv_buf *sse_out) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (!ci) return 0;
  struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
  if (poll(&p, 1, 0) <= 0) return 0;
  if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return 1; /* reset, or both sides closed */
  if (!(p.revents & POLLRDHUP)) return 0;
  /* Only a FIN so far: a half-close (still reading) or a full close. Sending
   * something tells them apart: a closed socket answers with a reset, seen
   * as POLLERR on a later check. */
  if (!*probed) {
    *probed = 1;
    if (sse_out) {
      di_srv_buf_puts(sse_out, ": keep-alive\n\n");
    } else {
      static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
      if (send(ci->connect_fd, cont, sizeof cont - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) return 1;
    }
  }
  return 0;
}

/* A draining server answers what it has and closes the connection (see
 * di_srv_guard_drain). */
enum MHD_Result di_srv_queue(di_srv_req *r, unsigned status, struct MHD_Response *resp) {
  if (r->close || atomic_load(&r->s->draining)) MHD_add_response_header(resp, "Connection", "close");
  r->status = (int)status;
  enum MHD_Result ret = MHD_queue_response(r->c, status, resp);
  MHD_destroy_response(resp);
  return ret;
}

enum MHD_Result di_srv_reply(di_srv_req *r, int status, const char *ctype, const char *body,
                             size_t len) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
  if (!resp) return MHD_NO;
  MHD_add_response_header(resp, "Content-Type", ctype);
  return di_srv_queue(r, (unsigned)status, resp);
}

enum MHD_Result di_srv_reply_json(di_srv_req *r, int status, json_t *body) {
  char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  if (!text) {
    static const char oom[] =
        "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
    return di_srv_reply(r, 500, "application/json", oom, sizeof oom - 1);
  }
  enum MHD_Result ret = di_srv_reply(r, status, "application/json", text, strlen(text));
  free(text);
  return ret;
}

enum MHD_Result di_srv_reply_err(di_srv_req *r, const di_srv_err *e) {
  if (e->status >= 500 && e->status != 503)
    fprintf(stderr, "deepinfer serve: internal error on %s %s: %s\n", r->method, r->url, e->msg);
  char *text = NULL;
  json_t *j = di_srv_err_json(e);
  if (j) text = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  const char *body = text ? text : "{\"error\":{\"message\":\"error\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
  free(text);
  if (!resp) return MHD_NO;
  MHD_add_response_header(resp, "Content-Type", "application/json");
  if (e->retry_after > 0) {
    char ra[16];
    snprintf(ra, sizeof ra, "%d", e->retry_after);
    MHD_add_response_header(resp, "Retry-After", ra);
  }
  if (e->status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
  return di_srv_queue(r, (unsigned)e->status, resp);
}

/* Framing checks on the headers (RFC 9112 section 6): a body is framed by
 * one Content-Length or by chunked Transfer-Encoding, never both, or the
 * bytes after it could be read as a second request (smuggling). */
/* libmicrohttpd answers a request line or header block that overflows its
 * per-connection memory pool itself, with an HTML page. The pool is set well
 * above the limits below so that requests past them reach on_request and get
 * OpenAI-style JSON errors; only headers past the pool itself (beyond any real
 * client's) still get libmicrohttpd's page. */
#define URL_LIMIT ((size_t)8 << 10)
#define HEADER_LIMIT ((size_t)32 << 10)
#define CONN_POOL ((size_t)128 << 10)

typedef struct hdr_count {
  int n_cl, n_te;
  size_t bytes;
} hdr_count;

static enum MHD_Result count_hdr(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
  hdr_count *h = cls;
  (void)kind;
  h->bytes += strlen(key) + (value ? strlen(value) : 0) + 4; /* "K: V\r\n" */
  if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) h->n_cl++;
  if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) h->n_te++;
  return MHD_YES;
}

static bool check_framing(di_srv_req *r, di_srv_err *e) {
  hdr_count h = {0};
  MHD_get_connection_values(r->c, MHD_HEADER_KIND, count_hdr, &h);
  const char *cl = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  const char *te = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
  size_t url_len = strlen(r->raw_url ? r->raw_url : r->url);
  if (url_len > URL_LIMIT)
    return di_srv_fail(e, 414, "invalid_request_error", "uri_too_long",
                       "the request target is %zu bytes; the limit is %zu", url_len, URL_LIMIT);
  if (h.bytes > HEADER_LIMIT)
    return di_srv_fail(e, 431, "invalid_request_error", "request_header_fields_too_large",
                       "the request headers are %zu bytes; the limit is %zu", h.bytes, HEADER_LIMIT);
  if (h.n_cl > 1)
    return di_srv_bad(e, NULL, "more than one Content-Length header");
  if (h.n_te > 1 || (te && strcasecmp(te, "chunked")))
    return di_srv_fail(e, 501, "invalid_request_error", "unsupported_transfer_encoding",
                       "only 'Transfer-Encoding: chunked' is supported");
  if (te && cl) return di_srv_bad(e, NULL, "both Content-Length and Transfer-Encoding");
  if (cl) {
    size_t i = 0;
    while (cl[i] >= '0' && cl[i] <= '9') i++;
    if (!i || cl[i] || i > 19) return di_srv_bad(e, NULL, "invalid Content-Length");
    if (strtoull(cl, NULL, 10) > r->s->o.max_body) r->too_large = 1;
  }
  return true;
}

static enum MHD_Result too_large(di_srv_req *r) {
  di_srv_err e;
  di_srv_fail(&e, 413, "invalid_request_error", "request_too_large",
              "request body exceeds the server's limit of %zu bytes (--max-body)", r->s->o.max_body);
  return di_srv_reply_err(r, &e);
}

/* True when the client waits for "100 Continue" before sending its body. */
static int expects_continue(di_srv_req *r) {
  const char *ex = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
  return ex && !strcasecmp(ex, "100-continue");
}

/* The headers alone decide framing, route, authentication and a declared
 * size past the limit. Framing errors are answered at once and the
 * connection closed (the body cannot be told from a next request). Other
 * refusals are answered at once too when the client waits for 100 Continue
 * (none is sent) or sends no body; otherwise the body is read and discarded,
 * never stored, so the client is not cut off mid-send and can read the
 * answer. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls) {
  di_server *s = cls;
  di_srv_req *r = *con_cls;
  (void)version;
  if (!r || !r->started) {
    if (!r) {
      r = calloc(1, sizeof *r);
      if (!r) return MHD_NO;
      r->s = s;
      r->t0 = di_srv_now();
      *con_cls = r;
    }
    r->started = 1;
    r->c = c;
    r->method = method;
    r->url = url;
    r->seq = atomic_fetch_add(&s->next_seq, 1);
    di_srv_guard_headers_done(s, c);
    di_srv_err e = {0};
    if (!check_framing(r, &e)) {
      r->close = 1;
      return di_srv_reply_err(r, &e);
    }
    if (r->too_large)
      di_srv_fail(&e, 413, "invalid_request_error", "request_too_large",
                  "request body exceeds the server's limit of %zu bytes (--max-body)", s->o.max_body);
    if (r->too_large || !di_srv_route_begin(r, &e)) {
      const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
      const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
      int has_body = te || (cl && strtoull(cl, NULL, 10) > 0);
      if (!has_body || expects_continue(r)) {
        r->close = has_body;
        return di_srv_reply_err(r, &e);
      }
      r->refused = malloc(sizeof *r->refused);
      if (!r->refused) return MHD_NO;
      *r->refused = e;
    }
    return MHD_YES;
  }
  if (*upload_size) {
    size_t n = *upload_size;
    *upload_size = 0;
    /* Slow-drip bodies (slowloris) get the request timeout as a deadline for
     * the whole body, not just between bytes. */
    if (di_srv_now() - r->t0 > s->o.request_timeout) return MHD_NO;
    if (r->refused || r->too_large || r->body.len + n > s->o.max_body) {
      r->too_large |= !r->refused;
      r->body.len += n; /* counts discarded bytes; the buffer is not used */
      if (r->body.len > DRAIN_LIMIT) goto refuse;
      return MHD_YES;
    }
    di_srv_buf_put(&r->body, upload_data, n);
    if (r->body.oom) {
      di_srv_err e;
      di_srv_fail(&e, 500, "server_error", NULL, "out of memory reading the body");
      return di_srv_reply_err(r, &e);
    }
    return MHD_YES;
  }
  if (!r->refused && !r->too_large) return di_srv_route(r);
refuse:
  if (r->refused) return di_srv_reply_err(r, r->refused);
  return too_large(r);
}

/* Called once the request line is in: the request object starts here so
 * that the target is seen as sent (a %00 decodes to a NUL that would cut the
 * path short). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
  di_server *s = cls;
  di_srv_req *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->s = s;
  r->c = c;
  r->t0 = di_srv_now();
  r->raw_url = strdup(uri ? uri : "");
  return r;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  di_server *s = cls;
  di_srv_req *r = *con_cls;
  if (!r) return;
  *con_cls = NULL;
  if (r->gen && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) di_srv_gen_cancel(r->gen);
  int status = r->status ? r->status : 499; /* 499: the client left before an answer */
  if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && status == 200) status = 499;
  di_srv_metrics_http(&s->metrics, status);
  if (!s->o.quiet) {
    int pt = 0, ct = 0, cached = 0;
    if (r->gen) {
      json_t *u = di_srv_gen_usage(r->gen);
      pt = (int)json_integer_value(json_object_get(u, "prompt_tokens"));
      ct = (int)json_integer_value(json_object_get(u, "completion_tokens"));
      cached = (int)json_integer_value(json_object_get(u, "prompt_cache_hit_tokens"));
      json_decref(u);
    }
    char url[256];
    di_srv_quote(url, sizeof url, r->url ? r->url : "", 200);
    fprintf(stderr, "deepinfer serve: req=%llu %s %s %d prompt=%d cached=%d completion=%d %.3fs%s\n",
            (unsigned long long)r->seq, r->method ? r->method : "-", url, status, pt, cached, ct,
            di_srv_now() - r->t0,
            toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed)");
  }
  if (r->gen) di_srv_gen_unref(r->gen);
  di_srv_buf_free(&r->body);
  free(r->raw_url);
  free(r->refused);
  free(r);
  di_srv_guard_request_done(s, c);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  di_server *s = cls;
  if (s->o.quiet) return;
  fputs("deepinfer serve: http: ", stderr);
  vfprintf(stderr, fmt, ap);
}

static void raise_fd_limit(int want) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  rlim_t need = (rlim_t)want + 64;
  if (rl.rlim_cur >= need) return;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
}

di_code di_server_start(const di_server_opts *o, const di_srv_backend *be, di_server **out,
                        di_status *st) {
  *out = NULL;
  if (o->max_body == 0 || o->request_timeout <= 0 || o->max_connections <= 0 || o->max_queue < 0 ||
      o->max_connections_per_ip < 0 || o->header_timeout <= 0 || o->stream_buffer == 0 ||
      !(o->stream_stall_timeout > 0))
    return di_errorf(st, DI_ERR_INVALID, "server options out of range");
  /* An empty key would make "Bearer " the password and every malformed
   * Authorization header a match: refuse it rather than fail open. */
  if (o->api_key && !o->api_key[0])
    return di_errorf(st, DI_ERR_INVALID, "the API key is empty (omit --api-key to run without one)");
  struct addrinfo hints = {.ai_flags = AI_PASSIVE, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  char port[16];
  snprintf(port, sizeof port, "%d", o->port);
  int gai = getaddrinfo(o->host, port, &hints, &ai);
  if (gai != 0 || !ai)
    return di_errorf(st, DI_ERR_INVALID, "cannot resolve host '%s': %s", o->host, gai_strerror(gai));
  di_server *s = calloc(1, sizeof *s);
  if (!s) {
    freeaddrinfo(ai);
    return di_errorf(st, DI_ERR_NOMEM, "out of memory");
  }
  s->o = *o;
  s->be = *be;
  s->model_name = strdup(o->model_name ? o->model_name : "default");
  if (o->api_key) {
    s->api_key = strdup(o->api_key);
    s->api_key_len = strlen(o->api_key);
  }
  if (s->o.keepalive_ms <= 0) s->o.keepalive_ms = 5000;
  s->created = (long)time(NULL);
  s->id_salt = o->seed >= 0 ? (uint64_t)o->seed : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
  di_srv_metrics_init(&s->metrics);
  raise_fd_limit(o->max_connections);
  di_srv_json_limits_init();
  if (di_srv_guard_start(s, st) != DI_OK) {
    di_srv_metrics_destroy(&s->metrics);
    free(s->model_name);
    free(s->api_key);
    free(s);
    freeaddrinfo(ai);
    return st->code;
  }
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                   MHD_USE_ERROR_LOG;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  s->d = MHD_start_daemon(
      flags, (uint16_t)o->port, NULL, NULL, &on_request, s, MHD_OPTION_EXTERNAL_LOGGER, &mhd_log, s,
      MHD_OPTION_SOCK_ADDR, ai->ai_addr,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
      (unsigned)o->request_timeout, MHD_OPTION_NOTIFY_COMPLETED, &on_completed, s,
      MHD_OPTION_URI_LOG_CALLBACK, &on_uri, s, MHD_OPTION_NOTIFY_CONNECTION, &di_srv_guard_notify, s,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)o->max_connections_per_ip,
      /* Small stacks: hundreds of idle keep-alive connections each hold a thread. */
      MHD_OPTION_THREAD_STACK_SIZE, (size_t)256 << 10, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, CONN_POOL, MHD_OPTION_END);
  freeaddrinfo(ai);
  if (!s->d) {
    di_srv_guard_stop(s);
    di_srv_metrics_destroy(&s->metrics);
    free(s->model_name);
    free(s->api_key);
    free(s);
    return di_errorf(st, DI_ERR_IO, "cannot listen on %s:%d (address in use or not permitted)",
                     o->host, o->port);
  }
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
  s->port = di ? di->port : o->port;
  snprintf(s->host, sizeof s->host, "%s", o->host);
  *out = s;
  return DI_OK;
}

int di_server_port(const di_server *s) { return s->port; }

bool di_server_drain(di_server *s, int drain_s, const sigset_t *sigs) {
  atomic_store(&s->draining, 1);
  di_srv_guard_drain(s);
  double deadline = di_srv_now() + drain_s;
  int cancelling = 0;
  for (;;) {
    if (atomic_load(&s->live_gens) == 0) return true;
    double now = di_srv_now();
    if (now >= deadline) {
      if (cancelling) return true; /* di_server_stop cuts what is left */
      /* Cancelled requests answer within a few engine steps. */
      atomic_store(&s->cancel_all, 1);
      cancelling = 1;
      deadline = now + 5;
    }
    struct timespec tick = {0, 50 * 1000000L};
    if (sigs) {
      if (sigtimedwait(sigs, NULL, &tick) > 0) return false;
    } else {
      nanosleep(&tick, NULL);
    }
  }
}

void di_server_set_model(di_server *s, int n_ctx, int n_vocab, int max_seqs) {
  s->be.n_ctx = n_ctx;
  s->be.n_vocab = n_vocab;
  s->be.max_seqs = max_seqs;
}

void di_server_stop(di_server *s) {
  if (!s) return;
  /* Waiting requests notice `stopping`, cancel and close; MHD joins them. */
  atomic_store(&s->stopping, 1);
  MHD_stop_daemon(s->d);
  di_srv_guard_stop(s);
  /* The engine still holds cancelled requests until their last event; their
   * contexts point at s, so s lives until they are gone (bounded wait; on
   * timeout s is leaked rather than freed under the engine's feet). */
  for (int i = 0; i < 500 && atomic_load(&s->live_gens) > 0; i++) usleep(10000);
  if (atomic_load(&s->live_gens) > 0) return;
  di_srv_metrics_destroy(&s->metrics);
  free(s->model_name);
  free(s->api_key);
  free(s);
}
