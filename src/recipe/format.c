/* Python's str(), repr() and json.dumps() for template values, byte-exact
 * with CPython because chat templates print lists, dicts and floats and the
 * model was trained on exactly those bytes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "recipe/jinja.h"

/* float.__repr__: the shortest digits that round-trip, laid out as Python does
 * (scientific below 1e-4 and from 1e16). */
void py_float_repr(double f, char *out, size_t n) {
  if (isnan(f)) { snprintf(out, n, "nan"); return; }
  if (isinf(f)) { snprintf(out, n, f < 0 ? "-inf" : "inf"); return; }
  if (f == 0) { snprintf(out, n, signbit(f) ? "-0.0" : "0.0"); return; }
  char buf[64];
  int prec;
  for (prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
    if (strtod(buf, NULL) == f) break;
  }
  /* buf = [-]d.ddde[+-]XX */
  bool neg = buf[0] == '-';
  const char *p = buf + neg;
  char digits[32];
  size_t nd = 0;
  for (; *p && *p != 'e'; p++)
    if (*p != '.') digits[nd++] = *p;
  int exp = atoi(p + 1);
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  digits[nd] = 0;
  char res[80];
  size_t k = 0;
  if (neg) res[k++] = '-';
  if (exp < -4 || exp >= 16) {
    res[k++] = digits[0];
    if (nd > 1) {
      res[k++] = '.';
      for (size_t i = 1; i < nd; i++) res[k++] = digits[i];
    }
    k += (size_t)snprintf(res + k, sizeof res - k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  } else if (exp < 0) {
    res[k++] = '0';
    res[k++] = '.';
    for (int i = 0; i < -exp - 1; i++) res[k++] = '0';
    for (size_t i = 0; i < nd; i++) res[k++] = digits[i];
  } else {
    for (int i = 0; i <= exp; i++) res[k++] = (size_t)i < nd ? digits[i] : '0';
    res[k++] = '.';
    if ((size_t)exp + 1 < nd)
      for (size_t i = (size_t)exp + 1; i < nd; i++) res[k++] = digits[i];
    else
      res[k++] = '0';
  }
  res[k] = 0;
  snprintf(out, n, "%s", res);
}

static size_t next_cp(const char *s, size_t len, size_t i, int32_t *cp) {
  utf8proc_int32_t c;
  utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), &c);
  if (k <= 0) { *cp = (unsigned char)s[i]; return 1; }
  *cp = c;
  return (size_t)k;
}

static bool py_printable(int32_t cp) {
  if (cp == ' ') return true;
  if (cp < 0x20 || cp == 0x7f) return false;
  if (cp < 0x7f) return true;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default: return true;
  }
}

static void repr_str(jbuf *b, const jstr *s) {
  bool has_sq = memchr(s->s, '\'', s->len) != NULL, has_dq = memchr(s->s, '"', s->len) != NULL;
  char q = has_sq && !has_dq ? '"' : '\'';
  jbuf_put(b, &q, 1, false);
  for (size_t i = 0; i < s->len;) {
    int32_t cp;
    size_t k = next_cp(s->s, s->len, i, &cp);
    bool t = jstr_tainted(s, i);
    char e[16];
    const char *esc = NULL;
    if (cp == q || cp == '\\') { e[0] = '\\'; e[1] = (char)cp; e[2] = 0; esc = e; }
    else if (cp == '\n') esc = "\\n";
    else if (cp == '\r') esc = "\\r";
    else if (cp == '\t') esc = "\\t";
    else if (!py_printable(cp)) {
      if (cp < 0x100) snprintf(e, sizeof e, "\\x%02x", cp);
      else if (cp < 0x10000) snprintf(e, sizeof e, "\\u%04x", cp);
      else snprintf(e, sizeof e, "\\U%08x", cp);
      esc = e;
    }
    if (esc) jbuf_put(b, esc, strlen(esc), t);
    else jbuf_putstr_range(b, s, i, i + k);
    i += k;
  }
  jbuf_put(b, &q, 1, false);
}

/* Values can nest without bound (`{% set ns.x = [ns.x] %}` in a loop), so
 * printing them is depth-limited rather than trusted to the C stack. */
static void repr_depth(jctx *c, jbuf *b, jv v, int depth) {
  if (depth > 200) {
    jerr(c, DI_ERR_RANGE, "RecursionError: value nested deeper than 200 levels");
    return;
  }
  if (v.kind == JV_STR) { repr_str(b, v.u.s); return; }
  if (v.kind == JV_LIST) {
    jbuf_puts(b, v.u.l->tuple ? "(" : "[");
    for (size_t i = 0; i < v.u.l->n && !c->err; i++) {
      if (i) jbuf_puts(b, ", ");
      repr_depth(c, b, v.u.l->items[i], depth + 1);
    }
    jbuf_puts(b, v.u.l->tuple ? (v.u.l->n == 1 ? ",)" : ")") : "]");
    return;
  }
  if (v.kind == JV_DICT || v.kind == JV_NS) {
    jbuf_puts(b, v.kind == JV_NS ? "<Namespace {" : "{");
    for (size_t i = 0; i < v.u.d->n && !c->err; i++) {
      if (i) jbuf_puts(b, ", ");
      repr_depth(c, b, v.u.d->keys[i], depth + 1);
      jbuf_puts(b, ": ");
      repr_depth(c, b, v.u.d->vals[i], depth + 1);
    }
    jbuf_puts(b, v.kind == JV_NS ? "}>" : "}");
    return;
  }
  jv_to_str(c, b, v);
}

void jv_repr(jctx *c, jbuf *b, jv v) { repr_depth(c, b, v, 0); }

void jv_to_str(jctx *c, jbuf *b, jv v) {
  char num[64];
  switch (v.kind) {
    case JV_UNDEF: return; /* Jinja's default Undefined prints as nothing */
    case JV_NONE: jbuf_puts(b, "None"); return;
    case JV_BOOL: jbuf_puts(b, v.u.b ? "True" : "False"); return;
    case JV_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); jbuf_puts(b, num); return;
    case JV_FLOAT: py_float_repr(v.u.f, num, sizeof num); jbuf_puts(b, num); return;
    case JV_STR: jbuf_putstr(b, v.u.s); return;
    case JV_FUNC:
      jbuf_puts(b, v.u.fn->kind == JF_MACRO ? "<Macro '" : "<built-in method ");
      jbuf_puts(b, v.u.fn->name);
      jbuf_puts(b, v.u.fn->kind == JF_MACRO ? "'>" : ">");
      return;
    default: jv_repr(c, b, v); return;
  }
}

jv jv_stringify(jctx *c, jv v) {
  if (v.kind == JV_STR) return v;
  jbuf b;
  jbuf_init(&b, c->a, (size_t)-1);
  jv_to_str(c, &b, v);
  return jbuf_value(&b);
}

jv jv_concat(jctx *c, jv a, jv b) {
  if (a.kind != JV_STR || b.kind != JV_STR) return jv_undef("concatenation of non-strings");
  if (!a.u.s->len) return b;
  if (!b.u.s->len) return a;
  jbuf out;
  jbuf_init(&out, c->a, (size_t)-1);
  jbuf_putstr(&out, a.u.s);
  jbuf_putstr(&out, b.u.s);
  jv r = jbuf_value(&out);
  if (r.kind != JV_STR) return jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget");
  return r;
}

static void json_str(jbuf *b, const jstr *s, bool ensure_ascii) {
  jbuf_puts(b, "\"");
  for (size_t i = 0; i < s->len;) {
    int32_t cp;
    size_t k = next_cp(s->s, s->len, i, &cp);
    bool t = jstr_tainted(s, i);
    char e[16];
    const char *esc = NULL;
    switch (cp) {
      case '"': esc = "\\\""; break;
      case '\\': esc = "\\\\"; break;
      case '\n': esc = "\\n"; break;
      case '\r': esc = "\\r"; break;
      case '\t': esc = "\\t"; break;
      case '\b': esc = "\\b"; break;
      case '\f': esc = "\\f"; break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp > 0x7e)) {
          if (cp >= 0x10000) {
            int32_t v = cp - 0x10000;
            snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            snprintf(e, sizeof e, "\\u%04x", cp);
          }
          esc = e;
        }
    }
    if (esc) jbuf_put(b, esc, strlen(esc), t);
    else jbuf_putstr_range(b, s, i, i + k);
    i += k;
  }
  jbuf_puts(b, "\"");
}

static void newline_indent(jbuf *b, int indent, int level) {
  jbuf_puts(b, "\n");
  for (int i = 0; i < indent * level && b->ok; i++) jbuf_puts(b, " ");
}

bool jv_tojson(jctx *c, jbuf *b, jv v, int indent, const char *item_sep, const char *key_sep, bool sort_keys,
               bool ensure_ascii, int level) {
  if (level > 200) {
    jerr(c, DI_ERR_RANGE, "ValueError: tojson nesting deeper than 200");
    return false;
  }
  char num[64];
  if (!jcharge(c, 1)) return false;
  switch (v.kind) {
    case JV_NONE: jbuf_puts(b, "null"); return true;
    case JV_BOOL: jbuf_puts(b, v.u.b ? "true" : "false"); return true;
    case JV_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); jbuf_puts(b, num); return true;
    case JV_FLOAT:
      if (isnan(v.u.f)) jbuf_puts(b, "NaN");
      else if (isinf(v.u.f)) jbuf_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
      else { py_float_repr(v.u.f, num, sizeof num); jbuf_puts(b, num); }
      return true;
    case JV_STR: json_str(b, v.u.s, ensure_ascii); return true;
    case JV_LIST: {
      if (!v.u.l->n) { jbuf_puts(b, "[]"); return true; }
      jbuf_puts(b, "[");
      for (size_t i = 0; i < v.u.l->n; i++) {
        if (i) jbuf_puts(b, item_sep);
        if (indent >= 0) newline_indent(b, indent, level + 1);
        if (!jv_tojson(c, b, v.u.l->items[i], indent, item_sep, key_sep, sort_keys, ensure_ascii, level + 1))
          return false;
      }
      if (indent >= 0) newline_indent(b, indent, level);
      jbuf_puts(b, "]");
      return true;
    }
    case JV_DICT: {
      const jdict *d = v.u.d;
      if (!d->n) { jbuf_puts(b, "{}"); return true; }
      size_t *order = jarena_alloc(c->a, d->n * sizeof(size_t));
      if (!order) { jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget"); return false; }
      for (size_t i = 0; i < d->n; i++) order[i] = i;
      if (sort_keys && !jcharge(c, (uint64_t)d->n * d->n / 4)) return false;
      if (sort_keys) /* insertion sort: dicts in templates are small */
        for (size_t i = 1; i < d->n; i++)
          for (size_t j = i; j > 0; j--) {
            bool ok = true;
            if (jv_compare(c, d->keys[order[j - 1]], d->keys[order[j]], &ok) <= 0 || !ok) break;
            size_t t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
          }
      jbuf_puts(b, "{");
      for (size_t i = 0; i < d->n; i++) {
        jv k = d->keys[order[i]];
        if (i) jbuf_puts(b, item_sep);
        if (indent >= 0) newline_indent(b, indent, level + 1);
        if (k.kind == JV_STR) {
          json_str(b, k.u.s, ensure_ascii);
        } else if (k.kind == JV_INT || k.kind == JV_FLOAT || k.kind == JV_BOOL || k.kind == JV_NONE) {
          jbuf_puts(b, "\"");
          jv_tojson(c, b, k, -1, item_sep, key_sep, false, ensure_ascii, level + 1);
          jbuf_puts(b, "\"");
        } else {
          jerr(c, DI_ERR_INVALID, "TypeError: keys must be str, int, float, bool or None, not %s", jv_type_name(k));
          return false;
        }
        jbuf_puts(b, key_sep);
        if (!jv_tojson(c, b, d->vals[order[i]], indent, item_sep, key_sep, sort_keys, ensure_ascii, level + 1))
          return false;
      }
      if (indent >= 0) newline_indent(b, indent, level);
      jbuf_puts(b, "}");
      return true;
    }
    default:
      jerr(c, DI_ERR_INVALID, "TypeError: Object of type %s is not JSON serializable", jv_type_name(v));
      return false;
  }
}
