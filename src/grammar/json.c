/* JSON grammar pieces and the Python-compatible serialiser (see json.h). */
#include "grammar/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gj_init(gjson *j, gx *g, di_json_ws ws) {
  *j = (gjson){.g = g, .ws = ws, .r_value = -1, .r_string = -1, .r_number = -1, .r_integer = -1, .r_ws = -1, .any_char = -1};
}

static const char *esc_of(uint32_t c, char tmp[8]) {
  switch (c) {
  case '"': return "\\\"";
  case '\\': return "\\\\";
  case '\n': return "\\n";
  case '\r': return "\\r";
  case '\t': return "\\t";
  case '\b': return "\\b";
  case '\f': return "\\f";
  }
  if (c < 0x20) {
    snprintf(tmp, 8, "\\u%04x", c);
    return tmp;
  }
  return NULL;
}

int32_t gj_encode_chars(gx *g, const gx_cpset *chars, void *ctx) {
  (void)ctx;
  gx_cpset raw = {0};
  int32_t alts[40];
  size_t n = 0;
  for (size_t i = 0; i < chars->n; i++) {
    uint32_t lo = chars->r[i][0], hi = chars->r[i][1];
    for (uint32_t c = lo; c <= hi && c < 0x20; c++) {
      char tmp[8];
      alts[n++] = gx_str(g, esc_of(c, tmp));
    }
    if (lo <= '"' && '"' <= hi) alts[n++] = gx_str(g, "\\\"");
    if (lo <= '\\' && '\\' <= hi) alts[n++] = gx_str(g, "\\\\");
    if (hi < 0x20) continue;
    if (lo < 0x20) lo = 0x20;
    /* split out '"' and '\\' */
    uint32_t cuts[3][2] = {{lo, hi}, {1, 0}, {1, 0}};
    size_t nc = 1;
    for (uint32_t x = 0; x < 2; x++) {
      uint32_t bad = x ? '\\' : '"';
      for (size_t k = 0; k < nc; k++)
        if (cuts[k][0] <= bad && bad <= cuts[k][1]) {
          uint32_t a = cuts[k][0], b = cuts[k][1];
          cuts[k][0] = a;
          cuts[k][1] = bad - 1; /* may become empty (a > b) */
          if (bad == a) cuts[k][0] = 1, cuts[k][1] = 0;
          cuts[nc][0] = bad + 1;
          cuts[nc][1] = b;
          nc++;
          break;
        }
    }
    for (size_t k = 0; k < nc; k++)
      if (cuts[k][0] <= cuts[k][1]) gx_cpset_add(&raw, cuts[k][0], cuts[k][1]);
  }
  alts[n++] = gx_utf8_class(g, &raw);
  gx_cpset_free(&raw);
  return gx_alt(g, alts, n);
}

static int32_t ws_rule(gjson *j) {
  if (j->r_ws < 0) {
    j->r_ws = gx_rule_new(j->g, "ws");
    int32_t w = gx_alt(j->g, (int32_t[]){gx_str(j->g, " "), gx_str(j->g, "\t"), gx_str(j->g, "\n"), gx_str(j->g, "\r")}, 4);
    /* bounded so a model cannot spin on whitespace forever */
    gx_rule_define(j->g, j->r_ws, gx_rep(j->g, w, 0, 20));
  }
  return gx_ref(j->g, j->r_ws);
}

int32_t gj_open(gjson *j, char c) {
  char s[2] = {c, 0};
  return j->ws == DI_JSON_WS_FREE ? gx_seq2(j->g, gx_str(j->g, s), ws_rule(j)) : gx_str(j->g, s);
}
int32_t gj_close(gjson *j, char c) {
  char s[2] = {c, 0};
  return j->ws == DI_JSON_WS_FREE ? gx_seq2(j->g, ws_rule(j), gx_str(j->g, s)) : gx_str(j->g, s);
}
int32_t gj_comma(gjson *j) {
  switch (j->ws) {
  case DI_JSON_WS_PYTHON: return gx_str(j->g, ", ");
  case DI_JSON_WS_COMPACT: return gx_str(j->g, ",");
  default: return gx_seq3(j->g, ws_rule(j), gx_str(j->g, ","), ws_rule(j));
  }
}
int32_t gj_colon(gjson *j) {
  switch (j->ws) {
  case DI_JSON_WS_PYTHON: return gx_str(j->g, ": ");
  case DI_JSON_WS_COMPACT: return gx_str(j->g, ":");
  default: return gx_seq3(j->g, ws_rule(j), gx_str(j->g, ":"), ws_rule(j));
  }
}

int32_t gj_any_char(gjson *j) {
  if (j->any_char < 0) {
    gx_cpset all = {0};
    gx_cpset_add(&all, 0, 0x10FFFF);
    j->any_char = gj_encode_chars(j->g, &all, NULL);
    gx_cpset_free(&all);
  }
  return j->any_char;
}

int32_t gj_any_string(gjson *j) {
  if (j->r_string < 0) {
    gx *g = j->g;
    j->r_string = gx_rule_new(g, "string");
    int32_t ch = gj_any_char(j);
    gx_rule_define(g, j->r_string, gx_seq3(g, gx_str(g, "\""), gx_star(g, ch), gx_str(g, "\"")));
  }
  return gx_ref(j->g, j->r_string);
}

static int32_t digits(gx *g, int min) { return gx_rep(g, gx_bytes(g, '0', '9'), min, -1); }

static int32_t int_body(gx *g) {
  return gx_seq2(g, gx_opt(g, gx_str(g, "-")),
                 gx_alt2(g, gx_str(g, "0"), gx_seq2(g, gx_bytes(g, '1', '9'), digits(g, 0))));
}

int32_t gj_integer(gjson *j) {
  if (j->r_integer < 0) {
    j->r_integer = gx_rule_new(j->g, "integer");
    gx_rule_define(j->g, j->r_integer, int_body(j->g));
  }
  return gx_ref(j->g, j->r_integer);
}

int32_t gj_number(gjson *j) {
  if (j->r_number < 0) {
    gx *g = j->g;
    j->r_number = gx_rule_new(g, "number");
    int32_t frac = gx_opt(g, gx_seq2(g, gx_str(g, "."), digits(g, 1)));
    int32_t exp = gx_opt(g, gx_seq3(g, gx_alt2(g, gx_str(g, "e"), gx_str(g, "E")),
                                    gx_opt(g, gx_alt2(g, gx_str(g, "+"), gx_str(g, "-"))), digits(g, 1)));
    gx_rule_define(g, j->r_number, gx_seq3(g, int_body(g), frac, exp));
  }
  return gx_ref(j->g, j->r_number);
}

int32_t gj_any_value(gjson *j) {
  if (j->r_value < 0) {
    gx *g = j->g;
    j->r_value = gx_rule_new(g, "value");
    int32_t v = gx_ref(g, j->r_value);
    int32_t member = gx_seq3(g, gj_any_string(j), gj_colon(j), v);
    int32_t obj = gx_seq3(g, gj_open(j, '{'),
                          gx_opt(g, gx_seq2(g, member, gx_star(g, gx_seq2(g, gj_comma(j), member)))),
                          gj_close(j, '}'));
    int32_t arr = gx_seq3(g, gj_open(j, '['), gx_opt(g, gx_seq2(g, v, gx_star(g, gx_seq2(g, gj_comma(j), v)))),
                          gj_close(j, ']'));
    int32_t alts[] = {obj, arr, gj_any_string(j), gj_number(j), gx_str(g, "true"), gx_str(g, "false"), gx_str(g, "null")};
    gx_rule_define(g, j->r_value, gx_alt(g, alts, 7));
  }
  return gx_ref(j->g, j->r_value);
}

void gbuf_put(gbuf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t nc = b->cap ? b->cap * 2 : 64;
    while (nc < b->n + n + 1) nc *= 2;
    char *q = realloc(b->p, nc);
    if (!q) abort();
    b->p = q;
    b->cap = nc;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

void gj_quote(gbuf *b, const char *s, size_t n) {
  gbuf_put(b, "\"", 1);
  size_t st = 0;
  for (size_t i = 0; i < n; i++) {
    char tmp[8];
    const char *e = esc_of((unsigned char)s[i], tmp);
    if (!e) continue;
    gbuf_put(b, s + st, i - st);
    gbuf_put(b, e, strlen(e));
    st = i + 1;
  }
  gbuf_put(b, s + st, n - st);
  gbuf_put(b, "\"", 1);
}

void gj_py_float(double d, char out[32]) {
  if (isnan(d)) {
    strcpy(out, "NaN");
    return;
  }
  if (isinf(d)) {
    strcpy(out, d < 0 ? "-Infinity" : "Infinity");
    return;
  }
  char e[40];
  int p;
  for (p = 0; p < 17; p++) { /* shortest digits that read back the same */
    snprintf(e, sizeof e, "%.*e", p, d);
    if (strtod(e, NULL) == d) break;
  }
  /* e = [-]d[.ddd]e[+-]XX */
  char *ep = strchr(e, 'e');
  int exp = atoi(ep + 1);
  *ep = 0;
  char dig[24];
  size_t nd = 0;
  bool neg = e[0] == '-';
  for (char *c = e + neg; *c; c++)
    if (*c != '.') dig[nd++] = *c;
  dig[nd] = 0;
  while (nd > 1 && dig[nd - 1] == '0') dig[--nd] = 0;
  char *o = out;
  if (neg) *o++ = '-';
  if (exp < -4 || exp >= 16) {
    *o++ = dig[0];
    if (nd > 1) {
      *o++ = '.';
      memcpy(o, dig + 1, nd - 1);
      o += nd - 1;
    }
    sprintf(o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return;
  }
  if (exp < 0) {
    *o++ = '0';
    *o++ = '.';
    for (int k = -1; k > exp; k--) *o++ = '0';
    memcpy(o, dig, nd);
    o += nd;
  } else {
    for (int k = 0; k <= exp; k++) *o++ = (size_t)k < nd ? dig[k] : '0';
    *o++ = '.';
    if ((size_t)exp + 1 < nd) {
      memcpy(o, dig + exp + 1, nd - exp - 1);
      o += nd - exp - 1;
    } else {
      *o++ = '0';
    }
  }
  *o = 0;
}

static void dumps(gbuf *b, const json_t *v) {
  char tmp[48];
  switch (json_typeof(v)) {
  case JSON_NULL: gbuf_put(b, "null", 4); break;
  case JSON_TRUE: gbuf_put(b, "true", 4); break;
  case JSON_FALSE: gbuf_put(b, "false", 5); break;
  case JSON_INTEGER:
    snprintf(tmp, sizeof tmp, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    gbuf_put(b, tmp, strlen(tmp));
    break;
  case JSON_REAL:
    gj_py_float(json_real_value(v), tmp);
    gbuf_put(b, tmp, strlen(tmp));
    break;
  case JSON_STRING: gj_quote(b, json_string_value(v), json_string_length(v)); break;
  case JSON_ARRAY:
    gbuf_put(b, "[", 1);
    for (size_t i = 0; i < json_array_size(v); i++) {
      if (i) gbuf_put(b, ", ", 2);
      dumps(b, json_array_get(v, i));
    }
    gbuf_put(b, "]", 1);
    break;
  case JSON_OBJECT: {
    gbuf_put(b, "{", 1);
    const char *k;
    json_t *x;
    bool first = true;
    json_object_foreach((json_t *)v, k, x) {
      if (!first) gbuf_put(b, ", ", 2);
      first = false;
      gj_quote(b, k, strlen(k));
      gbuf_put(b, ": ", 2);
      dumps(b, x);
    }
    gbuf_put(b, "}", 1);
    break;
  }
  }
}

char *gj_py_dumps(const json_t *v) {
  gbuf b = {0};
  dumps(&b, v);
  if (!b.p) gbuf_put(&b, "", 0);
  return b.p;
}

int32_t gj_literal(gjson *j, const json_t *v) {
  gx *g = j->g;
  switch (json_typeof(v)) {
  case JSON_ARRAY: {
    size_t n = json_array_size(v);
    int32_t *it = malloc(sizeof *it * (2 * n + 2));
    size_t k = 0;
    it[k++] = gj_open(j, '[');
    for (size_t i = 0; i < n; i++) {
      if (i) it[k++] = gj_comma(j);
      it[k++] = gj_literal(j, json_array_get(v, i));
    }
    it[k++] = gj_close(j, ']');
    int32_t r = gx_seq(g, it, k);
    free(it);
    return r;
  }
  case JSON_OBJECT: {
    size_t n = json_object_size(v);
    int32_t *it = malloc(sizeof *it * (4 * n + 2));
    size_t k = 0;
    it[k++] = gj_open(j, '{');
    const char *key;
    json_t *x;
    json_object_foreach((json_t *)v, key, x) {
      if (k > 1) it[k++] = gj_comma(j);
      gbuf b = {0};
      gj_quote(&b, key, strlen(key));
      it[k++] = gx_lit(g, b.p, b.n);
      free(b.p);
      it[k++] = gj_colon(j);
      it[k++] = gj_literal(j, x);
    }
    it[k++] = gj_close(j, '}');
    int32_t r = gx_seq(g, it, k);
    free(it);
    return r;
  }
  default: {
    char *s = gj_py_dumps(v);
    int32_t r = gx_lit(g, s, strlen(s));
    free(s);
    return r;
  }
  }
}
