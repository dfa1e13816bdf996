/* The HTTP server against a fake backend (server_fake.h): routing, auth,
 * body limits, JSON validation, chat/completions shapes, SSE, cancellation
 * on disconnect, admission control and the metrics exposition.
 *
 * `test_server_http serve PORT [--api-key K] [--max-body N] [--request-timeout S]`
 * runs the fake server until stdin closes, for the raw-HTTP Python tests. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "server/internal.h"
#include "server_fake.h"

static int g_port;

static int connect_port(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct timeval tv = {.tv_sec = 10};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void send_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return;
    p += k;
    n -= (size_t)k;
  }
}

typedef struct resp {
  int status;
  char head[4096];
  char *body; /* de-chunked */
  size_t len;
} resp;

/* Test-side reading of one "Connection: close" response. */
static void read_resp(int fd, resp *r) {
  size_t cap = 1 << 16, n = 0;
  char *raw = malloc(cap);
  for (;;) {
    if (n + 4096 > cap) raw = realloc(raw, cap *= 2);
    ssize_t k = recv(fd, raw + n, cap - n - 1, 0);
    if (k <= 0) break;
    n += (size_t)k;
  }
  raw[n] = 0;
  memset(r, 0, sizeof *r);
  sscanf(raw, "HTTP/1.%*d %d", &r->status);
  char *sep = strstr(raw, "\r\n\r\n");
  size_t hl = sep ? (size_t)(sep - raw) : n;
  snprintf(r->head, sizeof r->head, "%.*s", (int)(hl < sizeof r->head - 1 ? hl : sizeof r->head - 1), raw);
  char *b = sep ? sep + 4 : raw + n;
  r->body = malloc(n + 1);
  if (strcasestr(r->head, "Transfer-Encoding: chunked")) {
    char *p = b;
    for (;;) {
      unsigned long sz = strtoul(p, &p, 16);
      p = strstr(p, "\r\n");
      if (!p || sz == 0) break;
      p += 2;
      if ((size_t)(p - raw) + sz > n) break;
      memcpy(r->body + r->len, p, sz);
      r->len += sz;
      p += sz + 2;
    }
  } else {
    r->len = n - (size_t)(b - raw);
    memcpy(r->body, b, r->len);
  }
  r->body[r->len] = 0;
  free(raw);
}

static void request(const char *method, const char *path, const char *hdrs, const char *body, size_t blen,
                    resp *r) {
  int fd = connect_port(g_port);
  char head[1024];
  int hn = snprintf(head, sizeof head,
                    "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%sContent-Length: %zu\r\n\r\n", method,
                    path, hdrs ? hdrs : "", blen);
  send_all(fd, head, (size_t)hn);
  if (blen) send_all(fd, body, blen);
  read_resp(fd, r);
  close(fd);
}

static void post(const char *path, const char *json, resp *r) {
  request("POST", path, "Authorization: Bearer sk-test\r\n", json, strlen(json), r);
}

static json_t *body_json(const resp *r) { return json_loadb(r->body, r->len, 0, NULL); }

static const char *err_param(json_t *j) {
  return json_string_value(json_object_get(json_object_get(j, "error"), "param"));
}

static void expect_err(const char *path, const char *json, int status, const char *param) {
  resp r;
  post(path, json, &r);
  json_t *j = body_json(&r);
  CHECKF(r.status == status, "%s -> %d %s", json, r.status, r.body);
  CHECKF(j && json_is_object(json_object_get(j, "error")), "%s", r.body);
  if (param) CHECKF(err_param(j) && !strcmp(err_param(j), param), "%s: param %s", json, r.body);
  json_decref(j);
  free(r.body);
}

static fake_engine F;

static void test_basics(void) {
  resp r;
  atomic_store(&F.ready, 0);
  request("GET", "/health", NULL, "", 0, &r);
  CHECK(r.status == 503 && strcasestr(r.head, "Retry-After"));
  free(r.body);
  post("/v1/chat/completions", "{}", &r);
  CHECK(r.status == 503);
  free(r.body);
  atomic_store(&F.ready, 1);
  request("GET", "/health", NULL, "", 0, &r);
  CHECK(r.status == 200);
  free(r.body);
  request("GET", "/v1/models", "Authorization: Bearer sk-test\r\n", "", 0, &r);
  CHECK(r.status == 200 && strstr(r.body, "\"id\":\"fake-model\""));
  free(r.body);
  request("GET", "/v1/models/fake-model", "Authorization: Bearer sk-test\r\n", "", 0, &r);
  CHECK(r.status == 200);
  free(r.body);
  request("GET", "/v1/models/other", "Authorization: Bearer sk-test\r\n", "", 0, &r);
  CHECK(r.status == 404);
  free(r.body);
  request("GET", "/v1/models", NULL, "", 0, &r);
  CHECK(r.status == 401 && strstr(r.body, "invalid_api_key"));
  free(r.body);
  request("GET", "/v1/models", "Authorization: Bearer sk-tesT\r\n", "", 0, &r);
  CHECK(r.status == 401);
  free(r.body);
  request("GET", "/v1/models", "Authorization: Bearer sk-test-longer\r\n", "", 0, &r);
  CHECK(r.status == 401);
  free(r.body);
  request("GET", "/nope", NULL, "", 0, &r);
  CHECK(r.status == 404 && strstr(r.body, "\"error\""));
  free(r.body);
  request("GET", "/v1/chat/completions", "Authorization: Bearer sk-test\r\n", "", 0, &r);
  CHECK(r.status == 405);
  free(r.body);
}

static void test_bodies(void) {
  expect_err("/v1/chat/completions", "{\"messages\": [", 400, NULL);
  expect_err("/v1/chat/completions", "[1,2]", 400, NULL);
  expect_err("/v1/chat/completions", "", 400, NULL);
  resp r;
  const char bad[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\xff\xfe\"}]}";
  post("/v1/chat/completions", bad, &r);
  CHECKF(r.status == 400 && strstr(r.body, "UTF-8") && strstr(r.body, "offset 40"), "%s", r.body);
  free(r.body);
  /* An escaped lone surrogate is invalid too (jansson rejects it). */
  expect_err("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"\\ud800\"}]}", 400, NULL);
  expect_err("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", 400, NULL);
  size_t big = 300 << 10;
  char *huge = malloc(big);
  memset(huge, 'a', big);
  request("POST", "/v1/chat/completions", "Authorization: Bearer sk-test\r\n", huge, big, &r);
  CHECKF(r.status == 413, "%d", r.status);
  free(r.body);
  free(huge);
}

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static void test_validation(void) {
  const char *cp = "/v1/chat/completions";
  expect_err(cp, "{\"model\":\"nope\"," MSG "}", 404, "model");
  expect_err(cp, "{}", 400, "messages");
  expect_err(cp, "{\"messages\":[]}", 400, "messages");
  expect_err(cp, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400, "messages[0].role");
  expect_err(cp, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content");
  expect_err(cp, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400, "messages[0].content");
  expect_err(cp, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"prefix\":true}]}", 400, "messages[0].prefix");
  expect_err(cp, "{\"temperature\":3," MSG "}", 400, "temperature");
  expect_err(cp, "{\"temperature\":\"hot\"," MSG "}", 400, "temperature");
  expect_err(cp, "{\"top_p\":0," MSG "}", 400, "top_p");
  expect_err(cp, "{\"n\":0," MSG "}", 400, "n");
  expect_err(cp, "{\"n\":1.5," MSG "}", 400, "n");
  expect_err(cp, "{\"max_tokens\":0," MSG "}", 400, "max_tokens");
  expect_err(cp, "{\"presence_penalty\":-3," MSG "}", 400, "presence_penalty");
  expect_err(cp, "{\"stop\":7," MSG "}", 400, "stop");
  expect_err(cp, "{\"stop\":[\"\"]," MSG "}", 400, "stop");
  expect_err(cp, "{\"logit_bias\":{\"abc\":1}," MSG "}", 400, "logit_bias");
  expect_err(cp, "{\"logit_bias\":{\"9999\":1}," MSG "}", 400, "logit_bias");
  expect_err(cp, "{\"logit_bias\":{\"5\":101}," MSG "}", 400, "logit_bias");
  expect_err(cp, "{\"top_logprobs\":3," MSG "}", 400, "top_logprobs");
  expect_err(cp, "{\"stream_options\":{\"include_usage\":true}," MSG "}", 400, "stream_options");
  expect_err(cp, "{\"stream\":\"yes\"," MSG "}", 400, "stream");
  expect_err(cp, "{\"response_format\":{\"type\":\"yaml\"}," MSG "}", 400, "response_format.type");
  expect_err(cp, "{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{}}}," MSG "}", 400,
             "response_format.json_schema.name");
  expect_err(cp, "{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"strict\":1}}," MSG "}",
             400, "response_format.json_schema.strict");
  expect_err(cp, "{\"response_format\":{\"type\":\"json_object\"},\"regex\":\"a\"," MSG "}", 400, "regex");
  expect_err(cp, "{\"grammar\":\"root ::= \\\"a\\\"\",\"regex\":\"a\"," MSG "}", 400, "regex");
  expect_err(cp, "{\"regex\":\"\"," MSG "}", 400, "regex");
  expect_err(cp, "{\"json_whitespace\":\"tabs\"," MSG "}", 400, "json_whitespace");
  /* the fake engine cannot constrain: a 400, never an unconstrained answer */
  expect_err(cp, "{\"response_format\":{\"type\":\"json_object\"}," MSG "}", 400, "response_format");
  expect_err(cp, "{\"max_tokens\":250," MSG "}", 400, "messages");
  resp r;
  post(cp, "{\"max_tokens\":250," MSG "}", &r);
  CHECKF(strstr(r.body, "context_length_exceeded") && strstr(r.body, "256") && strstr(r.body, "250"), "%s", r.body);
  free(r.body);
  const char *co = "/v1/completions";
  expect_err(co, "{}", 400, "prompt");
  expect_err(co, "{\"prompt\":[1,\"a\"]}", 400, "prompt");
  expect_err(co, "{\"prompt\":[[1,2],[3,9999]]}", 400, "prompt");
  expect_err(co, "{\"prompt\":\"x\",\"suffix\":\"y\"}", 400, "suffix");
  expect_err(co, "{\"prompt\":\"x\",\"logprobs\":21}", 400, "logprobs");
  expect_err(co, "{\"prompt\":\"x\",\"best_of\":3}", 400, "best_of");
  expect_err(co, "{\"prompt\":\"x\",\"grammar\":\"root ::= \\\"a\\\"\"}", 400, "grammar");
  expect_err("/tokenize", "{\"prompt\":1}", 400, "prompt");
  expect_err("/detokenize", "{\"tokens\":[1,-1]}", 400, "tokens");
}

static void test_chat(void) {
  resp r;
  post("/v1/chat/completions",
       "{\"model\":\"fake-model\",\"max_tokens\":5,\"temperature\":0.5,\"seed\":42,\"stop\":[\"END\"],"
       "\"logit_bias\":{\"65\":-5}," MSG "}",
       &r);
  json_t *j = body_json(&r);
  CHECKF(r.status == 200, "%d %s", r.status, r.body);
  json_t *ch0 = json_array_get(json_object_get(j, "choices"), 0);
  const char *content = json_string_value(json_object_get(json_object_get(ch0, "message"), "content"));
  CHECKF(content && !strcmp(content, "hello"), "%s", r.body);
  CHECK(!strcmp(json_string_value(json_object_get(ch0, "finish_reason")), "length"));
  CHECK(!strcmp(json_string_value(json_object_get(j, "object")), "chat.completion"));
  json_t *u = json_object_get(j, "usage");
  /* fake prompt: BOS + "user: hi\nassistant: " = 1 + 20 tokens; cached = half */
  CHECKF(json_integer_value(json_object_get(u, "prompt_tokens")) == 21, "%s", r.body);
  CHECK(json_integer_value(json_object_get(u, "completion_tokens")) == 5);
  CHECK(json_integer_value(json_object_get(u, "total_tokens")) == 26);
  CHECK(json_integer_value(json_object_get(u, "prompt_cache_hit_tokens")) == 10);
  CHECK(json_integer_value(json_object_get(u, "prompt_cache_miss_tokens")) == 11);
  CHECK(F.last.sampling.seed == 42 && F.last.sampling.temperature == 0.5f && F.last.max_tokens == 5);
  CHECK(!strcmp(F.last_stop0, "END") && F.last.sampling.n_logit_bias == 1 &&
        F.last_bias0 == 65);
  json_decref(j);
  free(r.body);

  /* n=2, logprobs, content parts */
  post("/v1/chat/completions",
       "{\"n\":2,\"max_tokens\":3,\"logprobs\":true,\"top_logprobs\":2,\"messages\":[{\"role\":\"user\","
       "\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}]}",
       &r);
  j = body_json(&r);
  CHECKF(json_array_size(json_object_get(j, "choices")) == 2, "%s", r.body);
  json_t *lp = json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 1), "logprobs"), "content");
  CHECKF(json_array_size(lp) == 3, "%s", r.body);
  json_t *e0 = json_array_get(lp, 0);
  CHECK(!strcmp(json_string_value(json_object_get(e0, "token")), "h"));
  CHECK(json_array_size(json_object_get(e0, "top_logprobs")) == 2);
  CHECK(json_integer_value(json_array_get(json_object_get(e0, "bytes"), 0)) == 'h');
  CHECK(fake_has(F.last_prompt, F.last_n_prompt, "user: ab\n"));
  json_decref(j);
  free(r.body);

  /* reasoning split */
  post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"THINK\"}]}", &r);
  j = body_json(&r);
  json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
  CHECKF(!strcmp(json_string_value(json_object_get(msg, "content")), "answer"), "%s", r.body);
  CHECKF(!strcmp(json_string_value(json_object_get(msg, "reasoning_content")), "plan"), "%s", r.body);
  CHECK(json_integer_value(json_object_get(json_object_get(json_object_get(j, "usage"), "completion_tokens_details"),
                                           "reasoning_tokens")) >= 4);
  json_decref(j);
  free(r.body);

  /* prefix completion: the last assistant message is continued */
  post("/v1/chat/completions",
       "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\","
       "\"content\":\"Sure\",\"prefix\":true}]}",
       &r);
  CHECKF(r.status == 200, "%s", r.body);
  CHECK(F.last_n_prompt > 4 && F.last_prompt[F.last_n_prompt - 1] == 'e');
  free(r.body);
}

/* Payloads of "data:" lines, in order. */
static int sse_events(const char *body, json_t **ev, int max, int *done, int *keepalive) {
  int n = 0;
  *done = *keepalive = 0;
  for (const char *p = body; p && *p;) {
    const char *nl = strstr(p, "\n\n");
    if (!nl) break;
    if (!strncmp(p, "data: [DONE]", 12)) *done = 1;
    else if (!strncmp(p, "data: ", 6) && n < max) ev[n++] = json_loadb(p + 6, (size_t)(nl - p - 6), 0, NULL);
    else if (!strncmp(p, ": keep-alive", 12)) (*keepalive)++;
    p = nl + 2;
  }
  return n;
}

static void test_stream(void) {
  resp r;
  post("/v1/chat/completions",
       "{\"stream\":true,\"stream_options\":{\"include_usage\":true},\"max_tokens\":4,\"messages\":[{\"role\":"
       "\"user\",\"content\":\"WAIT\"}]}",
       &r);
  CHECK(r.status == 200 && strcasestr(r.head, "text/event-stream"));
  json_t *ev[64];
  int done, ka;
  int n = sse_events(r.body, ev, 64, &done, &ka);
  CHECKF(done && ka >= 1 && n == 1 + 4 + 1 + 1, "n=%d done=%d ka=%d\n%s", n, done, ka, r.body);
  if (n == 7) {
    json_t *d0 = json_object_get(json_array_get(json_object_get(ev[0], "choices"), 0), "delta");
    CHECK(!strcmp(json_string_value(json_object_get(d0, "role")), "assistant"));
    CHECK(!strcmp(json_string_value(json_object_get(ev[0], "object")), "chat.completion.chunk"));
    CHECK(json_is_null(json_object_get(ev[0], "usage")));
    json_t *d1 = json_object_get(json_array_get(json_object_get(ev[1], "choices"), 0), "delta");
    CHECK(!strcmp(json_string_value(json_object_get(d1, "content")), "h"));
    json_t *c5 = json_array_get(json_object_get(ev[5], "choices"), 0);
    CHECK(!strcmp(json_string_value(json_object_get(c5, "finish_reason")), "length"));
    CHECK(json_array_size(json_object_get(ev[6], "choices")) == 0);
    CHECK(json_integer_value(json_object_get(json_object_get(ev[6], "usage"), "completion_tokens")) == 4);
  }
  for (int i = 0; i < n; i++) json_decref(ev[i]);
  free(r.body);

  /* streamed reasoning: reasoning_content deltas, then content */
  post("/v1/chat/completions", "{\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"THINK\"}]}", &r);
  n = sse_events(r.body, ev, 64, &done, &ka);
  di_srv_buf rs = {0}, cs = {0};
  for (int i = 0; i < n; i++) {
    json_t *d = json_object_get(json_array_get(json_object_get(ev[i], "choices"), 0), "delta");
    const char *x = json_string_value(json_object_get(d, "reasoning_content"));
    if (x) di_srv_buf_puts(&rs, x);
    x = json_string_value(json_object_get(d, "content"));
    if (x) di_srv_buf_puts(&cs, x);
    json_decref(ev[i]);
  }
  CHECKF(rs.p && !strcmp(rs.p, "plan") && cs.p && !strcmp(cs.p, "answer"), "%s", r.body);
  di_srv_buf_free(&rs);
  di_srv_buf_free(&cs);
  free(r.body);

  /* completions stream */
  post("/v1/completions", "{\"prompt\":\"x\",\"stream\":true,\"max_tokens\":3}", &r);
  n = sse_events(r.body, ev, 64, &done, &ka);
  CHECKF(done && n == 4 && !strcmp(json_string_value(json_object_get(ev[0], "object")), "text_completion"),
         "%s", r.body);
  for (int i = 0; i < n; i++) json_decref(ev[i]);
  free(r.body);
}

static void test_completions(void) {
  resp r;
  post("/v1/completions", "{\"prompt\":[\"a\",\"b\"],\"n\":2,\"max_tokens\":2,\"echo\":true,\"logprobs\":1}", &r);
  json_t *j = body_json(&r);
  json_t *cs = json_object_get(j, "choices");
  CHECKF(r.status == 200 && json_array_size(cs) == 4, "%s", r.body);
  CHECK(!strcmp(json_string_value(json_object_get(json_array_get(cs, 2), "text")), "bhe"));
  json_t *lp = json_object_get(json_array_get(cs, 0), "logprobs");
  CHECKF(json_array_size(json_object_get(lp, "tokens")) == 4, "%s", r.body); /* BOS, a, h, e */
  CHECK(json_is_null(json_array_get(json_object_get(lp, "token_logprobs"), 0)));
  CHECK(json_integer_value(json_array_get(json_object_get(lp, "text_offset"), 3)) == 2);
  CHECK(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")) == 4);
  json_decref(j);
  free(r.body);
  post("/v1/completions", "{\"prompt\":[104,105],\"max_tokens\":2}", &r);
  CHECKF(r.status == 200 && F.last_n_prompt == 2 && F.last_prompt[0] == 104, "%s", r.body);
  free(r.body);
  post("/tokenize", "{\"prompt\":\"ab\"}", &r);
  CHECKF(strstr(r.body, "\"tokens\":[256,97,98]"), "%s", r.body);
  free(r.body);
  post("/detokenize", "{\"tokens\":[104,105]}", &r);
  CHECKF(strstr(r.body, "\"prompt\":\"hi\""), "%s", r.body);
  free(r.body);
}

static void test_disconnect_and_queue(di_server *s) {
  int cancels = F.cancels;
  int fd = connect_port(g_port);
  const char *body = "{\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"SLOW\"}]}";
  char head[512];
  int hn = snprintf(head, sizeof head,
                    "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-test\r\n"
                    "Content-Length: %zu\r\n\r\n%s",
                    strlen(body), body);
  send_all(fd, head, (size_t)hn);
  char buf[512];
  CHECK(recv(fd, buf, sizeof buf, 0) > 0);
  /* max_seqs 2 + max_queue 2: the slow stream holds one slot; three more fill it. */
  int fd2 = connect_port(g_port), fd3 = connect_port(g_port), fd4 = connect_port(g_port);
  send_all(fd2, head, (size_t)hn);
  send_all(fd3, head, (size_t)hn);
  send_all(fd4, head, (size_t)hn);
  CHECK(recv(fd2, buf, sizeof buf, 0) > 0 && recv(fd3, buf, sizeof buf, 0) > 0 && recv(fd4, buf, sizeof buf, 0) > 0);
  resp r;
  post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &r);
  CHECKF(r.status == 429 && strcasestr(r.head, "Retry-After: 1"), "%d %s", r.status, r.body);
  free(r.body);
  close(fd);
  close(fd2);
  close(fd3);
  close(fd4);
  for (int i = 0; i < 100 && F.cancels < cancels + 4; i++) usleep(10000);
  CHECKF(F.cancels == cancels + 4, "cancels %d", F.cancels - cancels);
  for (int i = 0; i < 100 && atomic_load(&s->inflight); i++) usleep(10000);
  CHECK(atomic_load(&s->inflight) == 0);
  size_t len;
  char *m = di_server_metrics_text(s, &len);
  CHECKF(m && strstr(m, "deepinfer:request_success_total{finished_reason=\"cancelled\"} 4"), "%s", m);
  CHECK(m && strstr(m, "deepinfer:request_rejected_total 1"));
  free(m);
}

static void test_metrics(di_server *s) {
  resp r;
  request("GET", "/metrics", NULL, "", 0, &r);
  CHECK(r.status == 200 && strstr(r.body, "deepinfer:time_to_first_token_seconds_bucket"));
  CHECK(strstr(r.body, "deepinfer:http_requests_total{code=\"400\"}"));
  char mpath[64], ppath[64], cmd[256];
  snprintf(mpath, sizeof mpath, "/tmp/di_server_metrics.%d.txt", (int)getpid());
  snprintf(ppath, sizeof ppath, "/tmp/di_server_promtool.%d.txt", (int)getpid());
  FILE *f = fopen(mpath, "w");
  if (f) {
    fwrite(r.body, 1, r.len, f);
    fclose(f);
  }
  /* promtool's linter reserves ':' for recording rules, but the vLLM-style
   * names are the contract (docs/METRICS.md): that one complaint is allowed,
   * any other problem (or a parse error, exit 1) fails. */
  if (system("command -v promtool >/dev/null 2>&1") == 0) {
    snprintf(cmd, sizeof cmd, "promtool check metrics < %s > %s 2>&1", mpath, ppath);
    int rc = system(cmd);
    CHECKF(WEXITSTATUS(rc) == 0 || WEXITSTATUS(rc) == 3, "promtool check metrics: exit %d", WEXITSTATUS(rc));
    FILE *pf = fopen(ppath, "r");
    char line[512];
    while (pf && fgets(line, sizeof line, pf))
      CHECKF(strstr(line, "should not contain ':'"), "promtool: %s", line);
    if (pf) fclose(pf);
    remove(ppath);
  }
  remove(mpath);
  free(r.body);
}

typedef struct think_out {
  char r[128], c[128];
} think_out;

static void think_sink(void *user, int reasoning, const char *s, size_t n) {
  think_out *o = user;
  strncat(reasoning ? o->r : o->c, s, n);
}

/* Split results must not depend on how the text is cut into deltas. */
static void test_think(void) {
  const struct {
    const char *text;
    int open;
    const char *r, *c;
  } cases[] = {
      {"<think>a<b</think>\n\nanswer", 0, "a<b", "answer"},
      {"plain <think> text", 0, "", "plain <think> text"},
      {"reason</think>ans", 1, "reason", "ans"},
      {"<thin", 0, "", "<thin"},
      {"<think>unfinished</thi", 0, "unfinished</thi", ""},
      {"</think", 0, "", "</think"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (size_t step = 1; step <= strlen(cases[i].text); step++) {
      think_out o = {{0}, {0}};
      di_srv_think t;
      di_srv_think_init(&t, cases[i].open);
      size_t n = strlen(cases[i].text);
      for (size_t k = 0; k < n; k += step) {
        size_t m = k + step < n ? step : n - k;
        di_srv_think_feed(&t, cases[i].text + k, m, k + m == n, think_sink, &o);
      }
      CHECKF(!strcmp(o.r, cases[i].r) && !strcmp(o.c, cases[i].c), "case %zu step %zu: r='%s' c='%s'", i, step,
             o.r, o.c);
    }
}

static int serve_main(int argc, char **argv) {
  di_server_opts o;
  di_server_opts_default(&o);
  o.port = atoi(argv[2]);
  o.model_name = "fake-model";
  for (int i = 3; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--api-key")) o.api_key = argv[i + 1];
    if (!strcmp(argv[i], "--max-body")) o.max_body = strtoull(argv[i + 1], NULL, 10);
    if (!strcmp(argv[i], "--request-timeout")) o.request_timeout = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--max-connections")) o.max_connections = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--max-connections-per-ip")) o.max_connections_per_ip = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--header-timeout")) o.header_timeout = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--max-queue")) o.max_queue = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--stream-buffer")) o.stream_buffer = strtoull(argv[i + 1], NULL, 10);
    if (!strcmp(argv[i], "--stream-stall-timeout")) o.stream_stall_timeout = atof(argv[i + 1]);
  }
  di_srv_backend be;
  fake_start(&F, &be, 256, 4);
  di_server *s = NULL;
  di_status st = {0};
  if (di_server_start(&o, &be, &s, &st) != DI_OK) {
    fprintf(stderr, "%s\n", st.msg);
    return 2;
  }
  fprintf(stderr, "listening on http://127.0.0.1:%d\n", di_server_port(s));
  char c;
  while (read(0, &c, 1) > 0) {
  }
  di_server_stop(s);
  fake_stop(&F);
  return 0;
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc >= 3 && !strcmp(argv[1], "serve")) return serve_main(argc, argv);
  di_srv_backend be;
  fake_start(&F, &be, 256, 2);
  di_server_opts o;
  di_server_opts_default(&o);
  o.port = 0;
  o.api_key = "sk-test";
  o.model_name = "fake-model";
  o.max_body = 64 << 10;
  o.max_queue = 2;
  o.keepalive_ms = 100;
  o.quiet = 1;
  di_server *s = NULL;
  di_status st = {0};
  CHECKF(di_server_start(&o, &be, &s, &st) == DI_OK, "%s", st.msg);
  if (!s) return di_test_finish("test_server_http");
  g_port = di_server_port(s);
  test_think();
  test_basics();
  test_bodies();
  test_validation();
  test_chat();
  test_stream();
  test_completions();
  test_disconnect_and_queue(s);
  test_metrics(s);
  di_server_stop(s);
  fake_stop(&F);
  return di_test_finish("test_server_http");
}
