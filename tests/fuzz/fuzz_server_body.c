/* libFuzzer target: HTTP request bodies through the real server, without a
 * model. The server runs in-process on a loopback port over a backend that
 * tokenizes bytes, renders messages (and tools) as text and finishes every
 * submission at once; each input is POSTed as is to the endpoint its first
 * byte selects. Whatever the body, the answer must be one HTTP response
 * whose body is JSON (a result or an OpenAI-style error), or an SSE stream
 * ending in [DONE]; crashes, leaks and sanitizer reports are what the fuzzer
 * looks for beyond that. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "server/server.h"

#define VOCAB 260

static di_code b_submit(void *ctx, const di_request_params *p, uint64_t *id, char *err, size_t errlen) {
  static uint64_t next = 1;
  *id = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < (p->n > 0 ? p->n : 1); i++) {
    di_event ev = {.request_id = *id, .index = i, .token = 'o', .text = "o", .text_len = 1, .logprob = -0.5f,
                   .prompt_tokens = (int)p->n_prompt, .completion_tokens = 1, .queue_seconds = 0};
    p->cb(&ev, p->user);
    di_event fin = {.request_id = *id, .index = i, .token = -1, .finish = DI_FINISH_STOP,
                    .prompt_tokens = (int)p->n_prompt, .completion_tokens = 1, .queue_seconds = 0};
    p->cb(&fin, p->user);
  }
  return DI_OK;
}

static di_code b_cancel(void *ctx, uint64_t id) { return DI_OK; }
static int b_ready(void *ctx) { return 1; }
static void b_stats(void *ctx, di_engine_stats *s) { memset(s, 0, sizeof *s); }

static di_code b_tokenize(void *ctx, const char *text, size_t len, int add_special, int parse_special, int32_t **ids,
                          size_t *n, di_status *st) {
  *ids = malloc((len + 1) * sizeof **ids);
  if (!*ids) return di_errorf(st, DI_ERR_NOMEM, "oom");
  size_t k = 0;
  if (add_special) (*ids)[k++] = 256;
  for (size_t i = 0; i < len; i++) (*ids)[k++] = (unsigned char)text[i];
  *n = k;
  return DI_OK;
}

static di_code b_detokenize(void *ctx, const int32_t *ids, size_t n, char **text, size_t *len, di_status *st) {
  *text = malloc(n + 1);
  if (!*text) return di_errorf(st, DI_ERR_NOMEM, "oom");
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (ids[i] >= 0 && ids[i] < 256) (*text)[k++] = (char)ids[i];
  (*text)[k] = 0;
  *len = k;
  return DI_OK;
}

static int b_token_bytes(void *ctx, int32_t id, char *buf, size_t cap) {
  if (id < 0 || id >= 256 || cap < 1) return id >= 256 && id < VOCAB ? 0 : -1;
  buf[0] = (char)id;
  return 1;
}

static di_code b_render(void *ctx, const json_t *msgs, const json_t *tools, int cont, int32_t **ids, size_t *n_ids,
                        int *think_open, di_status *st) {
  char *a = json_dumps(msgs, JSON_COMPACT), *b = tools ? json_dumps(tools, JSON_COMPACT) : NULL;
  size_t la = a ? strlen(a) : 0, lb = b ? strlen(b) : 0;
  char *text = malloc(la + lb + 2);
  if (!text) {
    free(a);
    free(b);
    return di_errorf(st, DI_ERR_NOMEM, "oom");
  }
  memcpy(text, a ? a : "", la);
  text[la] = '\n';
  memcpy(text + la + 1, b ? b : "", lb);
  free(a);
  free(b);
  *think_open = 0;
  di_code rc = b_tokenize(ctx, text, la + 1 + lb, 1, 0, ids, n_ids, st);
  free(text);
  return rc;
}

static di_code b_fim(void *ctx, const char *prefix, const char *suffix, int32_t **ids, size_t *n, di_status *st) {
  return di_errorf(st, DI_ERR_UNSUPPORTED, "no FIM tokens");
}

static di_server *g_srv;
static int g_port;

static void start(void) {
  signal(SIGPIPE, SIG_IGN);
  di_srv_backend be = {.ready = b_ready, .submit = b_submit, .cancel = b_cancel, .stats = b_stats,
                       .tokenize = b_tokenize, .detokenize = b_detokenize, .token_bytes = b_token_bytes,
                       .render_chat = b_render, .fim = b_fim, .n_ctx = 1 << 16, .n_vocab = VOCAB, .max_seqs = 8};
  di_server_opts o;
  di_server_opts_default(&o);
  o.port = 0;
  o.model_name = "m";
  o.quiet = 1;
  o.max_body = 1 << 20;
  di_status st = {0};
  if (di_server_start(&o, &be, &g_srv, &st) != DI_OK) {
    fprintf(stderr, "fuzz_server_body: %s\n", st.msg);
    abort();
  }
  g_port = di_server_port(g_srv);
}

static const char *const PATHS[] = {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"};

/* A connect that a signal interrupts goes on in the background: wait for it
 * (the signals are the server's and the fuzzer's own timers, not a failure). */
static bool connected_after_eintr(int fd) {
  struct pollfd pf = {.fd = fd, .events = POLLOUT};
  int r;
  while ((r = poll(&pf, 1, 5000)) < 0 && errno == EINTR) {
  }
  int err = 0;
  socklen_t len = sizeof err;
  if (r != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err) {
    errno = err ? err : ETIMEDOUT;
    return false;
  }
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_srv) start();
  if (size < 1) return 0;
  const char *path = PATHS[data[0] % 4];
  data++, size--;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct timeval tv = {.tv_sec = 5};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  /* Closing with a reset leaves no TIME_WAIT behind: the server closes first,
   * and its waiting sockets would otherwise hold one of the ~28K local ports
   * per run until a fast run (>1K runs/s for 30 s) has none left to connect. */
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && !(errno == EINTR && connected_after_eintr(fd))) {
    perror("fuzz_server_body: connect");
    abort();
  }
  char head[256];
  int hl = snprintf(head, sizeof head,
                    "POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                    "Content-Length: %zu\r\n\r\n",
                    path, size);
  if (send(fd, head, (size_t)hl, MSG_NOSIGNAL) != hl) abort();
  size_t off = 0;
  while (off < size) {
    ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL);
    if (w <= 0) break;
    off += (size_t)w;
  }
  char *resp = NULL;
  size_t rl = 0, cap = 0;
  for (;;) {
    if (rl + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 16384;
      char *p = realloc(resp, cap);
      if (!p) abort();
      resp = p;
    }
    ssize_t r = recv(fd, resp + rl, 4096, 0);
    if (r < 0 && errno == EINTR) continue; /* libFuzzer's own timers */
    if (r < 0) { /* no answer within 5 s: the server hung on this body */
      perror("fuzz_server_body: recv");
      abort();
    }
    if (r == 0) break;
    rl += (size_t)r;
  }
  close(fd);
  resp[rl] = 0;
  int status = 0;
  if (sscanf(resp, "HTTP/1.1 %d", &status) != 1 || status < 200 || status > 599) abort();
  char *body = strstr(resp, "\r\n\r\n");
  if (!body) abort();
  *body = 0; /* the headers alone: a body may quote "text/event-stream" (an echoed bad field) */
  const bool sse = strstr(resp, "text/event-stream") != NULL;
  body += 4;
  if (sse) {
    if (!strstr(body, "data: [DONE]")) abort();
  } else {
    json_t *j = json_loads(body, JSON_ALLOW_NUL, NULL); /* "\u0000" is valid JSON (token 0 echoed) */
    if (!json_is_object(j)) abort();
    if (status >= 400) {
      json_t *e = json_object_get(j, "error");
      if (!json_is_object(e) || !json_is_string(json_object_get(e, "message"))) abort();
    }
    json_decref(j);
  }
  free(resp);
  return 0;
}
