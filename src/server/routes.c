/* Routing, authentication, body parsing, and the small endpoints: /health,
 * /v1/models, /metrics, /tokenize, /detokenize. */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/internal.h"

typedef enum MHD_Result (*handler_fn)(di_srv_req *r, json_t *body);

/* Only "Bearer KEY" with exactly the key passes: any other scheme, an empty
 * token, or a value with an embedded NUL (len counts the header's real
 * bytes) fails. Constant time in the presented token: every byte of the key
 * is compared whatever the token's length or content. */
static int key_ok(const di_server *s, const char *hdr, size_t len) {
  if (!s->api_key) return 1;
  int scheme = hdr && len >= 7 && !strncasecmp(hdr, "Bearer ", 7) && strlen(hdr) == len;
  const char *tok = scheme ? hdr + 7 : "";
  size_t tl = scheme ? len - 7 : 0;
  volatile unsigned char diff = (unsigned char)(tl != s->api_key_len) | (unsigned char)!scheme;
  for (size_t i = 0; i < s->api_key_len; i++)
    diff |= (unsigned char)(s->api_key[i] ^ (i < tl ? tok[i] : 0));
  return diff == 0 && s->api_key_len > 0;
}

void di_srv_quote(char *dst, size_t cap, const char *src, size_t max_in) {
  static const char hex[] = "0123456789ABCDEF";
  size_t o = 0;
  for (size_t i = 0; src[i] && i < max_in && o + 4 < cap; i++) {
    unsigned char ch = (unsigned char)src[i];
    if (ch >= 0x20 && ch < 0x7f && ch != '%') {
      dst[o++] = (char)ch;
    } else {
      dst[o++] = '%';
      dst[o++] = hex[ch >> 4];
      dst[o++] = hex[ch & 15];
    }
  }
  if (cap) dst[o < cap ? o : cap - 1] = 0;
}

static int ready(const di_server *s) { return s->be.ready && s->be.ready(s->be.ctx); }

static enum MHD_Result loading(di_srv_req *r) {
  di_srv_err e;
  di_srv_fail(&e, 503, "service_unavailable", "model_loading", "the model is still loading");
  e.retry_after = 5;
  return di_srv_reply_err(r, &e);
}

static enum MHD_Result h_health(di_srv_req *r, json_t *body) {
  if (!ready(r->s)) return loading(r);
  if (atomic_load(&r->s->draining)) /* load balancers stop sending */
    return di_srv_reply_json(r, 503, json_pack("{s:s}", "status", "draining"));
  return di_srv_reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

static json_t *model_obj(const di_server *s) {
  return json_pack("{s:s,s:s,s:I,s:s,s:i}", "id", s->model_name, "object", "model", "created",
                   (json_int_t)s->created, "owned_by", "deepinfer", "max_model_len", s->be.n_ctx);
}

static enum MHD_Result h_models(di_srv_req *r, json_t *body) {
  return di_srv_reply_json(r, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", model_obj(r->s)));
}

static enum MHD_Result h_model(di_srv_req *r, json_t *body) {
  const char *id = r->url + strlen("/v1/models/");
  if (strcmp(id, r->s->model_name)) {
    di_srv_err e;
    char q[256];
    di_srv_quote(q, sizeof q, id, 200);
    di_srv_fail(&e, 404, "invalid_request_error", "model_not_found",
                "The model '%s' does not exist", q);
    snprintf(e.param, sizeof e.param, "model");
    return di_srv_reply_err(r, &e);
  }
  return di_srv_reply_json(r, 200, model_obj(r->s));
}

static enum MHD_Result h_metrics(di_srv_req *r, json_t *body) {
  size_t len = 0;
  char *text = di_server_metrics_text(r->s, &len);
  if (!text) return MHD_NO;
  enum MHD_Result ret = di_srv_reply(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
  free(text);
  return ret;
}

char *di_server_metrics_text(di_server *s, size_t *len) {
  di_engine_stats st;
  memset(&st, 0, sizeof st);
  int have = ready(s) && s->be.stats;
  if (have) s->be.stats(s->be.ctx, &st);
  return di_srv_metrics_render(&s->metrics, have ? &st : NULL, len);
}

static enum MHD_Result h_tokenize(di_srv_req *r, json_t *body) {
  di_srv_err e = {0};
  const char *prompt = NULL;
  int add_special = 1;
  if (!di_srv_get_str(body, "prompt", &prompt, &e) ||
      !di_srv_get_bool(body, "add_special_tokens", &add_special, &e))
    return di_srv_reply_err(r, &e);
  if (!prompt) {
    di_srv_bad(&e, "prompt", "'prompt' (a string) is required");
    return di_srv_reply_err(r, &e);
  }
  int32_t *ids = NULL;
  size_t n = 0;
  di_status st = {0};
  if (r->s->be.tokenize(r->s->be.ctx, prompt, strlen(prompt), add_special, 0, &ids, &n, &st) != DI_OK) {
    di_srv_bad(&e, "prompt", "%s", st.msg);
    return di_srv_reply_err(r, &e);
  }
  json_t *arr = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
  free(ids);
  return di_srv_reply_json(r, 200, json_pack("{s:o,s:I,s:i}", "tokens", arr, "count", (json_int_t)n,
                                             "max_model_len", r->s->be.n_ctx));
}

static enum MHD_Result h_detokenize(di_srv_req *r, json_t *body) {
  di_srv_err e = {0};
  json_t *arr = json_object_get(body, "tokens");
  if (!json_is_array(arr)) {
    di_srv_bad(&e, "tokens", "'tokens' (an array of token ids) is required");
    return di_srv_reply_err(r, &e);
  }
  size_t n = json_array_size(arr);
  int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
  if (!ids) return MHD_NO;
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(arr, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= r->s->be.n_vocab) {
      free(ids);
      di_srv_bad(&e, "tokens", "tokens[%zu] must be a token id in [0, %d)", i, r->s->be.n_vocab);
      return di_srv_reply_err(r, &e);
    }
    ids[i] = (int32_t)json_integer_value(v);
  }
  char *text = NULL;
  size_t len = 0;
  di_status st = {0};
  di_code rc = r->s->be.detokenize(r->s->be.ctx, ids, n, &text, &len, &st);
  free(ids);
  if (rc != DI_OK) {
    di_srv_bad(&e, "tokens", "%s", st.msg);
    return di_srv_reply_err(r, &e);
  }
  /* Ids may decode to a partial UTF-8 sequence; answer valid JSON regardless. */
  size_t bad = di_srv_utf8_invalid_at(text, len);
  json_t *s = json_stringn(text, bad == (size_t)-1 ? len : bad);
  free(text);
  return di_srv_reply_json(r, 200, json_pack("{s:o}", "prompt", s));
}

/* The page itself holds no secret; its API calls carry the key. */
static enum MHD_Result h_page(di_srv_req *r, json_t *body) {
  return di_srv_reply(r, 200, "text/html; charset=utf-8", di_srv_chat_page, di_srv_chat_page_len);
}

static const struct route {
  const char *method, *path;
  int prefix;      /* path is a prefix (/v1/models/{id}) */
  int auth, json, needs_ready;
  handler_fn fn;
} routes[] = {
    {"GET", "/", 0, 0, 0, 0, h_page},
    {"GET", "/health", 0, 0, 0, 0, h_health},
    {"GET", "/metrics", 0, 0, 0, 0, h_metrics},
    {"GET", "/v1/models", 0, 1, 0, 0, h_models},
    {"GET", "/v1/models/", 1, 1, 0, 0, h_model},
    {"POST", "/v1/chat/completions", 0, 1, 1, 1, di_srv_handle_chat},
    {"POST", "/v1/completions", 0, 1, 1, 1, di_srv_handle_completions},
    {"POST", "/tokenize", 0, 1, 1, 1, h_tokenize},
    {"POST", "/detokenize", 0, 1, 1, 1, h_detokenize},
};

static int path_is(const struct route *rt, const char *url) {
  return rt->prefix ? !strncmp(url, rt->path, strlen(rt->path)) && url[strlen(rt->path)]
                    : !strcmp(url, rt->path);
}

/* Memory for parsing one body is bounded: jansson allocates through these
 * functions, which count against a per-thread budget while this thread
 * parses a request (8 bytes per body byte plus 1 MiB: token-id arrays need
 * ~6, long strings ~3, while a 4 MiB body of nested empty arrays would need
 * ~35, over 140 MiB). Elsewhere they are plain malloc/free. */
static _Thread_local size_t tl_budget;
static _Thread_local int tl_limited, tl_over;

static void *counted_malloc(size_t n) {
  if (tl_limited) {
    if (n > tl_budget) {
      tl_over = 1;
      return NULL;
    }
    tl_budget -= n;
  }
  return malloc(n);
}

static pthread_once_t alloc_once = PTHREAD_ONCE_INIT;
static void install_alloc(void) { json_set_alloc_funcs(counted_malloc, free); }
void di_srv_json_limits_init(void) { pthread_once(&alloc_once, install_alloc); }

#define PARSE_TRIM_BYTES ((size_t)1 << 20)

/* Parses the body as one JSON object; invalid UTF-8 is named by offset
 * before JSON syntax, so the client learns which byte is at fault. */
static json_t *parse_body(di_srv_req *r, di_srv_err *e) {
  const char *p = r->body.p ? r->body.p : "";
  size_t n = r->body.len;
  size_t bad = di_srv_utf8_invalid_at(p, n);
  if (bad != (size_t)-1) {
    di_srv_bad(e, NULL, "request body is not valid UTF-8 (byte offset %zu)", bad);
    return NULL;
  }
  json_error_t je;
  size_t budget = n * 8 + ((size_t)1 << 20);
  tl_budget = budget;
  tl_over = 0;
  tl_limited = 1;
  json_t *j = json_loadb(p, n, 0, &je);
  tl_limited = 0;
  r->parse_bytes = budget - tl_budget;
  if (!j) {
    if (tl_over) {
      di_srv_fail(e, 413, "invalid_request_error", "request_too_complex",
                  "the JSON body needs more than %zu bytes of memory to parse (8 per body byte + 1 MiB); "
                  "send fewer values", budget);
      di_srv_json_trim(r);
    } else {
      di_srv_bad(e, NULL, "malformed JSON body at line %d column %d: %s", je.line, je.column, je.text);
    }
    return NULL;
  }
  if (!json_is_object(j)) {
    json_decref(j);
    di_srv_json_trim(r);
    di_srv_bad(e, NULL, "the request body must be a JSON object");
    return NULL;
  }
  return j;
}

/* Many small freed blocks stay in this thread's malloc arena; after a big
 * parse they go back to the system, so RSS returns to its baseline. */
void di_srv_json_trim(di_srv_req *r) {
  if (r->parse_bytes >= PARSE_TRIM_BYTES) malloc_trim(0);
  r->parse_bytes = 0;
}

/* The target as sent must not hide a NUL (%00 decodes to one, and the
 * decoded path would end there) and must decode to UTF-8. */
static bool url_ok(di_srv_req *r, di_srv_err *e) {
  const char *raw = r->raw_url ? r->raw_url : "";
  for (const char *p = raw; (p = strchr(p, '%')); p++)
    if (p[1] == '0' && p[2] == '0') return di_srv_bad(e, NULL, "the URL contains an encoded NUL byte (%%00)");
  if (di_srv_utf8_invalid_at(r->url, strlen(r->url)) != (size_t)-1)
    return di_srv_bad(e, NULL, "the URL is not valid UTF-8");
  return true;
}

bool di_srv_route_begin(di_srv_req *r, di_srv_err *e) {
  di_server *s = r->s;
  const struct route *rt = NULL;
  int path_known = 0;
  if (!url_ok(r, e)) return false;
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
    if (!path_is(&routes[i], r->url)) continue;
    path_known = 1;
    if (!strcmp(routes[i].method, r->method)) rt = &routes[i];
  }
  char q[256];
  if (!rt) {
    di_srv_quote(q, sizeof q, r->url, 200);
    if (path_known) {
      char m[40];
      di_srv_quote(m, sizeof m, r->method, 16);
      return di_srv_fail(e, 405, "invalid_request_error", "method_not_allowed",
                         "method %s is not allowed on %s", m, q);
    }
    return di_srv_fail(e, 404, "invalid_request_error", "unknown_url", "unknown path %s", q);
  }
  if (rt->auth) {
    const char *hdr = NULL;
    size_t len = 0;
    if (MHD_lookup_connection_value_n(r->c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION,
                                      strlen(MHD_HTTP_HEADER_AUTHORIZATION), &hdr, &len) != MHD_YES)
      hdr = NULL;
    if (!key_ok(s, hdr, len))
      return di_srv_fail(e, 401, "invalid_request_error", "invalid_api_key", "%s",
                         hdr ? "Incorrect API key provided" : "Missing API key (Authorization: Bearer KEY)");
  }
  if (rt->needs_ready && !ready(s)) {
    di_srv_fail(e, 503, "service_unavailable", "model_loading", "the model is still loading");
    e->retry_after = 5;
    return false;
  }
  if (rt->needs_ready && atomic_load(&s->draining)) {
    di_srv_fail(e, 503, "service_unavailable", "server_shutdown", "the server is shutting down");
    e->retry_after = 5;
    return false;
  }
  r->route = rt;
  return true;
}

enum MHD_Result di_srv_route(di_srv_req *r) {
  di_srv_err e = {0};
  const struct route *rt = r->route;
  if (!rt) { /* not reached: di_srv_route_begin answered already */
    di_srv_fail(&e, 500, "server_error", NULL, "request without a route");
    return di_srv_reply_err(r, &e);
  }
  if (rt->needs_ready && !ready(r->s)) return loading(r);
  json_t *body = NULL;
  if (rt->json && !(body = parse_body(r, &e))) return di_srv_reply_err(r, &e);
  enum MHD_Result ret = rt->fn(r, body);
  json_decref(body);
  di_srv_json_trim(r);
  return ret;
}
