/* Error answers in OpenAI's shape and the typed JSON field getters every
 * handler validates through, so each bad field is named in the answer. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/internal.h"

void di_srv_buf_put(di_srv_buf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

void di_srv_buf_puts(di_srv_buf *b, const char *s) { di_srv_buf_put(b, s, strlen(s)); }

void di_srv_buf_free(di_srv_buf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

double di_srv_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static bool vfail(di_srv_err *e, int status, const char *type, const char *code, const char *param,
                  const char *fmt, va_list ap) {
  e->status = status;
  e->type = type;
  e->code = code;
  snprintf(e->param, sizeof e->param, "%s", param ? param : "");
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  return false;
}

bool di_srv_bad(di_srv_err *e, const char *param, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(e, 400, "invalid_request_error", NULL, param, fmt, ap);
  va_end(ap);
  return false;
}

bool di_srv_fail(di_srv_err *e, int status, const char *type, const char *code, const char *fmt,
                 ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(e, status, type, code, NULL, fmt, ap);
  va_end(ap);
  return false;
}

json_t *di_srv_err_json(const di_srv_err *e) {
  /* Messages may quote client bytes; never let them make the JSON invalid. */
  size_t bad = di_srv_utf8_invalid_at(e->msg, strlen(e->msg));
  json_t *msg = json_stringn(e->msg, bad == (size_t)-1 ? strlen(e->msg) : bad);
  return json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message", msg ? msg : json_string(""),
                   "type", e->type ? e->type : "invalid_request_error", "param",
                   e->param[0] ? json_string(e->param) : json_null(), "code",
                   e->code ? json_string(e->code) : json_null());
}

/* Strict UTF-8 (RFC 3629): no overlongs, no surrogates, nothing above U+10FFFF. */
size_t di_srv_utf8_invalid_at(const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else
      return i;
    if (i + len > n) return i;
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; k++)
      if ((s[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return (size_t)-1;
}

static json_t *field(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  return v && !json_is_null(v) ? v : NULL;
}

bool di_srv_get_num(json_t *o, const char *key, double lo, double hi, double *out, di_srv_err *e) {
  json_t *v = field(o, key);
  if (!v) return true;
  if (!json_is_number(v)) return di_srv_bad(e, key, "'%s' must be a number", key);
  double x = json_number_value(v);
  if (!isfinite(x) || x < lo || x > hi)
    return di_srv_bad(e, key, "'%s' must be between %g and %g, got %g", key, lo, hi, x);
  *out = x;
  return true;
}

bool di_srv_get_int(json_t *o, const char *key, long long lo, long long hi, long long *out,
                    di_srv_err *e) {
  json_t *v = field(o, key);
  if (!v) return true;
  long long x;
  if (json_is_integer(v))
    x = json_integer_value(v);
  else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
           fabs(json_real_value(v)) < 9e15)
    x = (long long)json_real_value(v); /* 5.0 is an integer to most clients */
  else
    return di_srv_bad(e, key, "'%s' must be an integer", key);
  if (x < lo || x > hi)
    return di_srv_bad(e, key, "'%s' must be between %lld and %lld, got %lld", key, lo, hi, x);
  *out = x;
  return true;
}

bool di_srv_get_bool(json_t *o, const char *key, int *out, di_srv_err *e) {
  json_t *v = field(o, key);
  if (!v) return true;
  if (!json_is_boolean(v)) return di_srv_bad(e, key, "'%s' must be a boolean", key);
  *out = json_is_true(v);
  return true;
}

bool di_srv_get_str(json_t *o, const char *key, const char **out, di_srv_err *e) {
  json_t *v = field(o, key);
  if (!v) return true;
  if (!json_is_string(v)) return di_srv_bad(e, key, "'%s' must be a string", key);
  *out = json_string_value(v);
  return true;
}
