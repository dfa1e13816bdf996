/* Jinja2 filters, tests and the globals transformers installs
 * (raise_exception, strftime_now, namespace, dict, range), with the
 * semantics of jinja2 3.1 and transformers' own tojson (json.dumps with
 * ensure_ascii=False, no HTML escaping, keys unsorted). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>

#include "recipe/jinja.h"

#define MAX_RANGE 1000000

static jv oom(jctx *c) { return jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget"); }

jv jargs_get(jargs *a, size_t i, const char *kw, jv dflt) {
  if (kw)
    for (size_t k = 0; k < a->nkw; k++)
      if (!strcmp(a->kwn[k], kw)) return a->kwv[k];
  if (i < a->n) return a->pos[i];
  return dflt;
}

static bool has(const char *const *set, const char *name) {
  for (int i = 0; set[i]; i++)
    if (!strcmp(set[i], name)) return true;
  return false;
}

static const char *const FILTERS[] = {
    "tojson", "trim", "length", "count", "upper", "lower", "capitalize", "title", "replace", "join", "first",
    "last", "selectattr", "rejectattr", "select", "reject", "map", "default", "d", "items", "list", "string",
    "int", "float", "abs", "round", "unique", "safe", "escape", "e", "sort", "reverse", "sum", "min", "max",
    "indent", "dictsort", "batch", NULL};
static const char *const TESTS[] = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence",
    "boolean", "true", "false", "equalto", "eq", "==", "ne", "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=",
    "in", "callable", "odd", "even", "divisibleby", "sameas", "lower", "upper", NULL};
static const char *const GLOBALS[] = {"range", "namespace", "dict", "raise_exception", "strftime_now", NULL};

bool jbuiltin_has_filter(const char *name) { return has(FILTERS, name); }
bool jbuiltin_has_test(const char *name) { return has(TESTS, name); }
bool jbuiltin_is_global(const char *name) { return has(GLOBALS, name); }

static int64_t length_of(jctx *c, jv v) {
  switch (v.kind) {
    case JV_UNDEF: return 0;
    case JV_STR: {
      int64_t n = 0;
      for (size_t i = 0; i < v.u.s->len; i++) n += ((unsigned char)v.u.s->s[i] & 0xC0) != 0x80;
      return n;
    }
    case JV_LIST: return (int64_t)v.u.l->n;
    case JV_DICT: case JV_NS: return (int64_t)v.u.d->n;
    default:
      jerr(c, DI_ERR_INVALID, "TypeError: object of type '%s' has no len()", jv_type_name(v));
      return 0;
  }
}

/* ---------------------------------------------------------------- tests */

bool jbuiltin_test(jctx *c, const char *name, jv v, jargs *a, bool *out) {
  jv a0 = jargs_get(a, 0, NULL, jv_undef("missing test argument"));
  bool r = false;
  if (!strcmp(name, "defined")) r = v.kind != JV_UNDEF;
  else if (!strcmp(name, "undefined")) r = v.kind == JV_UNDEF;
  else if (!strcmp(name, "none")) r = v.kind == JV_NONE;
  else if (!strcmp(name, "string")) r = v.kind == JV_STR;
  else if (!strcmp(name, "number")) r = v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
  else if (!strcmp(name, "integer")) r = v.kind == JV_INT;
  else if (!strcmp(name, "float")) r = v.kind == JV_FLOAT;
  else if (!strcmp(name, "boolean")) r = v.kind == JV_BOOL;
  else if (!strcmp(name, "true")) r = v.kind == JV_BOOL && v.u.b;
  else if (!strcmp(name, "false")) r = v.kind == JV_BOOL && !v.u.b;
  else if (!strcmp(name, "mapping")) r = v.kind == JV_DICT;
  else if (!strcmp(name, "iterable")) r = v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_UNDEF;
  else if (!strcmp(name, "sequence")) r = v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_UNDEF;
  else if (!strcmp(name, "callable")) r = v.kind == JV_FUNC;
  else if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==")) r = jv_equal(v, a0);
  else if (!strcmp(name, "ne") || !strcmp(name, "!=")) r = !jv_equal(v, a0);
  else if (!strcmp(name, "sameas")) {
    if (v.kind != a0.kind) r = false;
    else if (v.kind == JV_NONE || v.kind == JV_UNDEF) r = true;
    else if (v.kind == JV_BOOL) r = v.u.b == a0.u.b;
    else if (v.kind == JV_INT) r = v.u.i == a0.u.i;
    else r = v.u.s == a0.u.s;
  } else if (!strcmp(name, "in")) r = jv_contains(c, a0, v);
  else if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
    if (v.kind != JV_INT) {
      jerr(c, DI_ERR_INVALID, "TypeError: test '%s' needs an integer, got %s", name, jv_type_name(v));
      return false;
    }
    if (name[0] == 'o') r = (v.u.i & 1) != 0;
    else if (name[0] == 'e') r = (v.u.i & 1) == 0;
    else {
      if (a0.kind != JV_INT || a0.u.i == 0) {
        jerr(c, DI_ERR_INVALID, "ZeroDivisionError: divisibleby needs a non-zero integer");
        return false;
      }
      r = v.u.i % a0.u.i == 0;
    }
  } else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
    if (v.kind != JV_STR) r = false;
    else {
      jv m = jstr_case(c, v, name[0] == 'l' ? 0 : 1);
      r = jv_equal(m, v);
    }
  } else {
    const char *op = !strcmp(name, "lt") ? "<" : !strcmp(name, "le") ? "<=" : !strcmp(name, "gt") ? ">" :
                     !strcmp(name, "ge") ? ">=" : name;
    if (v.kind == JV_UNDEF) { jundef_fail(c, v); return false; }
    bool ok = true;
    int cmp = jv_compare(c, v, a0, &ok);
    if (!ok) {
      jerr(c, DI_ERR_INVALID, "TypeError: '%s' not supported between instances of '%s' and '%s'", op,
           jv_type_name(v), jv_type_name(a0));
      return false;
    }
    r = !strcmp(op, "<") ? cmp < 0 : !strcmp(op, "<=") ? cmp <= 0 : !strcmp(op, ">") ? cmp > 0 : cmp >= 0;
  }
  *out = r;
  return !c->err;
}

/* ---------------------------------------------------------------- filters */

static jv select_items(jctx *c, jv seq, jargs *a, bool by_attr, bool keep) {
  jv l = jv_iter_list(c, seq);
  if (c->err) return l;
  size_t first_test = by_attr ? 1 : 0;
  jv attr = by_attr ? jargs_get(a, 0, NULL, jv_undef(NULL)) : jv_undef(NULL);
  jv test = jargs_get(a, first_test, NULL, jv_undef(NULL));
  if (test.kind != JV_UNDEF && test.kind != JV_STR)
    return jerr(c, DI_ERR_INVALID, "TypeError: the test name must be a string");
  if (test.kind == JV_STR && !jbuiltin_has_test(test.u.s->s))
    return jerr(c, DI_ERR_UNSUPPORTED, "unsupported test '%s'", test.u.s->s);
  jargs ta = {.pos = a->n > first_test + 1 ? a->pos + first_test + 1 : NULL,
              .n = a->n > first_test + 1 ? a->n - first_test - 1 : 0};
  jlist *out = jlist_new(c->a, l.u.l->n);
  if (!out || !jcharge(c, l.u.l->n)) return c->err ? jv_undef(NULL) : oom(c);
  out->n = 0;
  for (size_t i = 0; i < l.u.l->n && !c->err; i++) {
    jv it = l.u.l->items[i];
    jv x = it;
    if (by_attr) {
      if (attr.kind != JV_STR) return jerr(c, DI_ERR_INVALID, "TypeError: attribute name must be a string");
      x = jv_getitem(c, it, attr);
      if (c->err) return x;
    }
    bool r;
    if (test.kind == JV_STR) {
      if (!jbuiltin_test(c, test.u.s->s, x, &ta, &r)) return jv_undef(NULL);
    } else {
      r = jv_truthy(x);
    }
    if (r == keep) out->items[out->n++] = it;
  }
  return jv_list(out);
}

static jv do_map(jctx *c, jv seq, jargs *a) {
  jv l = jv_iter_list(c, seq);
  if (c->err) return l;
  if (!jcharge(c, l.u.l->n)) return jv_undef(NULL);
  jv attr = jargs_get(a, SIZE_MAX, "attribute", jv_undef(NULL));
  jv dflt = jargs_get(a, SIZE_MAX, "default", jv_undef(NULL));
  jlist *out = jlist_new(c->a, l.u.l->n);
  if (!out) return oom(c);
  if (attr.kind == JV_STR) {
    for (size_t i = 0; i < l.u.l->n && !c->err; i++) {
      jv x = jv_getitem(c, l.u.l->items[i], attr);
      if (x.kind == JV_UNDEF && dflt.kind != JV_UNDEF) x = dflt;
      out->items[i] = x;
    }
    return jv_list(out);
  }
  jv fname = jargs_get(a, 0, NULL, jv_undef(NULL));
  if (fname.kind != JV_STR) return jerr(c, DI_ERR_INVALID, "TypeError: map() needs a filter name or attribute=");
  if (!jbuiltin_has_filter(fname.u.s->s) || !strcmp(fname.u.s->s, "map"))
    return jerr(c, DI_ERR_UNSUPPORTED, "unsupported filter '%s' in map()", fname.u.s->s);
  jargs fa = {.pos = a->n > 1 ? a->pos + 1 : NULL, .n = a->n > 1 ? a->n - 1 : 0, .kwn = a->kwn, .kwv = a->kwv, .nkw = a->nkw};
  for (size_t i = 0; i < l.u.l->n && !c->err; i++) out->items[i] = jbuiltin_filter(c, fname.u.s->s, l.u.l->items[i], &fa);
  return jv_list(out);
}

static jv sort_list(jctx *c, jv seq, bool reverse, jv attr) {
  jv l = jv_iter_list(c, seq);
  if (c->err) return l;
  size_t n = l.u.l->n;
  if (!jcharge(c, (uint64_t)n * n / 4)) return jv_undef(NULL); /* insertion sort */
  jlist *out = jlist_new(c->a, n);
  jv *keys = jarena_alloc(c->a, (n + 1) * sizeof(jv));
  if (!out || !keys) return oom(c);
  for (size_t i = 0; i < n; i++) {
    out->items[i] = l.u.l->items[i];
    keys[i] = attr.kind == JV_STR ? jv_getitem(c, out->items[i], attr) : out->items[i];
    if (keys[i].kind == JV_STR) keys[i] = jstr_case(c, keys[i], 0); /* case_sensitive=False */
  }
  for (size_t i = 1; i < n && !c->err; i++) /* stable insertion sort */
    for (size_t j = i; j > 0; j--) {
      bool ok = true;
      int r = jv_compare(c, keys[j - 1], keys[j], &ok);
      if (!ok) return jerr(c, DI_ERR_INVALID, "TypeError: '<' not supported between instances of '%s' and '%s'",
                           jv_type_name(keys[j - 1]), jv_type_name(keys[j]));
      if (reverse ? r >= 0 : r <= 0) break;
      jv t = keys[j]; keys[j] = keys[j - 1]; keys[j - 1] = t;
      t = out->items[j]; out->items[j] = out->items[j - 1]; out->items[j - 1] = t;
    }
  return jv_list(out);
}

static jv escape_html(jctx *c, jv v) {
  jv s = jv_stringify(c, v);
  if (s.kind != JV_STR) return s;
  jbuf b;
  jbuf_init(&b, c->a, (size_t)-1);
  for (size_t i = 0; i < s.u.s->len; i++) {
    const char *e = NULL;
    switch (s.u.s->s[i]) {
      case '&': e = "&amp;"; break;
      case '<': e = "&lt;"; break;
      case '>': e = "&gt;"; break;
      case '"': e = "&#34;"; break;
      case '\'': e = "&#39;"; break;
    }
    if (e) jbuf_put(&b, e, strlen(e), jstr_tainted(s.u.s, i));
    else jbuf_putstr_range(&b, s.u.s, i, i + 1);
  }
  return jbuf_value(&b);
}

static bool parse_int_str(const jstr *s, int64_t *out) {
  char buf[64];
  size_t k = 0;
  for (size_t i = 0; i < s->len && k < sizeof buf - 1; i++)
    if (s->s[i] != '_') buf[k++] = s->s[i];
  buf[k] = 0;
  char *p = buf;
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  if (!*p) return false;
  char *end;
  long long v = strtoll(p, &end, 10);
  while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r') end++;
  if (*end || end == p) return false;
  *out = v;
  return true;
}

jv jbuiltin_filter(jctx *c, const char *name, jv v, jargs *a) {
  jv a0 = jargs_get(a, 0, NULL, jv_undef(NULL));
  if (!strcmp(name, "default") || !strcmp(name, "d")) {
    jv dv = jargs_get(a, 0, "default_value", jv_cstr(c->a, ""));
    jv boolean = jargs_get(a, 1, "boolean", jv_bool(false));
    if (v.kind == JV_UNDEF || (jv_truthy(boolean) && !jv_truthy(v))) return dv;
    return v;
  }
  if (!strcmp(name, "safe")) return v;
  if (!strcmp(name, "escape") || !strcmp(name, "e")) return escape_html(c, v);
  if (!strcmp(name, "length") || !strcmp(name, "count")) {
    int64_t n = length_of(c, v);
    return c->err ? jv_undef(NULL) : jv_int(n);
  }
  if (!strcmp(name, "string")) return jv_stringify(c, v);
  if (!strcmp(name, "tojson")) {
    jv ind = jargs_get(a, 0, "indent", jv_none());
    jv seps = jargs_get(a, SIZE_MAX, "separators", jv_none());
    bool sort_keys = jv_truthy(jargs_get(a, SIZE_MAX, "sort_keys", jv_bool(false)));
    bool ascii = jv_truthy(jargs_get(a, SIZE_MAX, "ensure_ascii", jv_bool(false)));
    int indent = -1;
    if (ind.kind == JV_INT) indent = ind.u.i < 0 ? 0 : ind.u.i > 64 ? 64 : (int)ind.u.i;
    else if (ind.kind != JV_NONE && ind.kind != JV_UNDEF)
      return jerr(c, DI_ERR_UNSUPPORTED, "unsupported tojson indent of type %s", jv_type_name(ind));
    const char *item_sep = indent >= 0 ? "," : ", ", *key_sep = ": ";
    if (seps.kind == JV_LIST && seps.u.l->n == 2 && seps.u.l->items[0].kind == JV_STR &&
        seps.u.l->items[1].kind == JV_STR) {
      item_sep = seps.u.l->items[0].u.s->s;
      key_sep = seps.u.l->items[1].u.s->s;
    }
    jbuf b;
    jbuf_init(&b, c->a, (size_t)-1);
    if (!jv_tojson(c, &b, v, indent, item_sep, key_sep, sort_keys, ascii, 0)) return jv_undef(NULL);
    return jbuf_value(&b);
  }
  if (!strcmp(name, "trim")) return jstr_strip(c, jv_stringify(c, v), jargs_get(a, 0, "chars", jv_none()), true, true);
  if (!strcmp(name, "upper")) return jstr_case(c, jv_stringify(c, v), 1);
  if (!strcmp(name, "lower")) return jstr_case(c, jv_stringify(c, v), 0);
  if (!strcmp(name, "capitalize")) return jstr_case(c, jv_stringify(c, v), 2);
  if (!strcmp(name, "title")) return jstr_case(c, jv_stringify(c, v), 3);
  if (!strcmp(name, "replace")) {
    jv cnt = jargs_get(a, 2, "count", jv_none());
    return jstr_replace(c, jv_stringify(c, v), jv_stringify(c, a0), jv_stringify(c, jargs_get(a, 1, NULL, jv_undef(NULL))),
                        cnt.kind == JV_INT ? cnt.u.i : -1);
  }
  if (!strcmp(name, "join"))
    return jstr_join(c, jargs_get(a, 0, "d", jv_cstr(c->a, "")), v, jargs_get(a, 1, "attribute", jv_undef(NULL)));
  if (!strcmp(name, "first") || !strcmp(name, "last")) {
    jv l = jv_iter_list(c, v);
    if (c->err) return l;
    if (!l.u.l->n) return jv_undef(name[0] == 'f' ? "No first item, sequence was empty." : "No last item, sequence was empty.");
    return l.u.l->items[name[0] == 'f' ? 0 : l.u.l->n - 1];
  }
  if (!strcmp(name, "selectattr")) return select_items(c, v, a, true, true);
  if (!strcmp(name, "rejectattr")) return select_items(c, v, a, true, false);
  if (!strcmp(name, "select")) return select_items(c, v, a, false, true);
  if (!strcmp(name, "reject")) return select_items(c, v, a, false, false);
  if (!strcmp(name, "map")) return do_map(c, v, a);
  if (!strcmp(name, "items") || !strcmp(name, "dictsort")) {
    if (v.kind == JV_UNDEF) return jv_list(jlist_new(c->a, 0));
    if (v.kind != JV_DICT) return jerr(c, DI_ERR_INVALID, "TypeError: can only get item pairs from a mapping.");
    jargs none = {0};
    jv items = jbuiltin_method(c, v, "items", &none);
    if (name[0] == 'd') return sort_list(c, items, jv_truthy(jargs_get(a, 2, "reverse", jv_bool(false))), jv_undef(NULL));
    return items;
  }
  if (!strcmp(name, "list")) {
    jv l = jv_iter_list(c, v);
    if (c->err || l.u.l->tuple == false) return l;
    jlist *o = jlist_new(c->a, l.u.l->n);
    if (!o) return oom(c);
    if (l.u.l->n) memcpy(o->items, l.u.l->items, l.u.l->n * sizeof(jv));
    return jv_list(o);
  }
  if (!strcmp(name, "int")) {
    jv dv = jargs_get(a, 0, "default", jv_int(0));
    if (v.kind == JV_INT) return v;
    if (v.kind == JV_BOOL) return jv_int(v.u.b);
    if (v.kind == JV_FLOAT) return isfinite(v.u.f) && fabs(v.u.f) < 9.2e18 ? jv_int((int64_t)v.u.f) : dv;
    if (v.kind == JV_STR) {
      int64_t r;
      if (parse_int_str(v.u.s, &r)) return jv_int(r);
      char *end;
      double f = strtod(v.u.s->s, &end);
      if (end != v.u.s->s && !*end && isfinite(f) && fabs(f) < 9.2e18) return jv_int((int64_t)f);
    }
    return dv;
  }
  if (!strcmp(name, "float")) {
    jv dv = jargs_get(a, 0, "default", jv_float(0.0));
    if (v.kind == JV_FLOAT) return v;
    if (v.kind == JV_INT) return jv_float((double)v.u.i);
    if (v.kind == JV_BOOL) return jv_float(v.u.b);
    if (v.kind == JV_STR) {
      char *end;
      double f = strtod(v.u.s->s, &end);
      if (end != v.u.s->s && !*end) return jv_float(f);
    }
    return dv;
  }
  if (!strcmp(name, "abs")) {
    if (v.kind == JV_INT) return v.u.i == INT64_MIN ? jerr(c, DI_ERR_RANGE, "OverflowError: integer too large") : jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    if (v.kind == JV_BOOL) return jv_int(v.u.b);
    if (v.kind == JV_FLOAT) return jv_float(fabs(v.u.f));
    return jerr(c, DI_ERR_INVALID, "TypeError: bad operand type for abs(): '%s'", jv_type_name(v));
  }
  if (!strcmp(name, "round")) {
    jv prec = jargs_get(a, 0, "precision", jv_int(0));
    jv method = jargs_get(a, 1, "method", jv_cstr(c->a, "common"));
    double x = v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : v.kind == JV_BOOL ? v.u.b : NAN;
    if (isnan(x) && v.kind != JV_FLOAT) return jerr(c, DI_ERR_INVALID, "TypeError: round() of %s", jv_type_name(v));
    double m = pow(10.0, prec.kind == JV_INT ? (double)prec.u.i : 0.0);
    const char *meth = method.kind == JV_STR ? method.u.s->s : "common";
    double r = !strcmp(meth, "ceil") ? ceil(x * m) / m : !strcmp(meth, "floor") ? floor(x * m) / m : nearbyint(x * m) / m;
    return jv_float(r);
  }
  if (!strcmp(name, "unique")) {
    jv l = jv_iter_list(c, v);
    if (c->err) return l;
    jv attr = jargs_get(a, 1, "attribute", jv_undef(NULL));
    bool cs = jv_truthy(jargs_get(a, 0, "case_sensitive", jv_bool(false)));
    if (!jcharge(c, (uint64_t)l.u.l->n * l.u.l->n / 4)) return jv_undef(NULL);
    jlist *o = jlist_new(c->a, l.u.l->n);
    jv *seen = jarena_alloc(c->a, (l.u.l->n + 1) * sizeof(jv));
    if (!o || !seen) return oom(c);
    o->n = 0;
    for (size_t i = 0; i < l.u.l->n && !c->err; i++) {
      jv k = attr.kind == JV_STR ? jv_getitem(c, l.u.l->items[i], attr) : l.u.l->items[i];
      if (!cs && k.kind == JV_STR) k = jstr_case(c, k, 0);
      bool dup = false;
      for (size_t j = 0; j < o->n && !dup; j++) dup = jv_equal(seen[j], k);
      if (!dup) { seen[o->n] = k; o->items[o->n++] = l.u.l->items[i]; }
    }
    return jv_list(o);
  }
  if (!strcmp(name, "sort"))
    return sort_list(c, v, jv_truthy(jargs_get(a, 0, "reverse", jv_bool(false))), jargs_get(a, 2, "attribute", jv_undef(NULL)));
  if (!strcmp(name, "reverse")) {
    jv l = jv_iter_list(c, v);
    if (c->err) return l;
    size_t n = l.u.l->n;
    if (v.kind == JV_STR) {
      jbuf b;
      jbuf_init(&b, c->a, (size_t)-1);
      for (size_t i = n; i-- > 0;) jbuf_putstr(&b, l.u.l->items[i].u.s);
      return jbuf_value(&b);
    }
    jlist *o = jlist_new(c->a, n);
    if (!o) return oom(c);
    for (size_t i = 0; i < n; i++) o->items[i] = l.u.l->items[n - 1 - i];
    return jv_list(o);
  }
  if (!strcmp(name, "sum") || !strcmp(name, "min") || !strcmp(name, "max")) {
    jv l = jv_iter_list(c, v);
    if (c->err) return l;
    jv attr = jargs_get(a, name[1] == 'u' ? 0 : 1, "attribute", jv_undef(NULL));
    if (name[1] == 'u') {
      jv acc = jargs_get(a, 1, "start", jv_int(0));
      for (size_t i = 0; i < l.u.l->n && !c->err; i++) {
        jv x = attr.kind == JV_STR ? jv_getitem(c, l.u.l->items[i], attr) : l.u.l->items[i];
        bool fl = acc.kind == JV_FLOAT || x.kind == JV_FLOAT;
        if ((x.kind != JV_INT && x.kind != JV_FLOAT && x.kind != JV_BOOL))
          return jerr(c, DI_ERR_INVALID, "TypeError: unsupported operand type(s) for +: 'int' and '%s'", jv_type_name(x));
        double xf = x.kind == JV_FLOAT ? x.u.f : x.kind == JV_INT ? (double)x.u.i : x.u.b;
        if (fl) acc = jv_float((acc.kind == JV_FLOAT ? acc.u.f : (double)acc.u.i) + xf);
        else if (__builtin_add_overflow(acc.u.i, x.kind == JV_INT ? x.u.i : x.u.b, &acc.u.i))
          return jerr(c, DI_ERR_RANGE, "OverflowError: integer too large");
      }
      return acc;
    }
    if (!l.u.l->n) return jv_undef("No aggregated item, sequence was empty.");
    jv best = l.u.l->items[0];
    for (size_t i = 1; i < l.u.l->n; i++) {
      jv x = l.u.l->items[i];
      jv kb = attr.kind == JV_STR ? jv_getitem(c, best, attr) : best, kx = attr.kind == JV_STR ? jv_getitem(c, x, attr) : x;
      bool ok = true;
      int r = jv_compare(c, kx, kb, &ok);
      if (!ok) return jerr(c, DI_ERR_INVALID, "TypeError: cannot compare %s and %s", jv_type_name(kx), jv_type_name(kb));
      if (name[1] == 'i' ? r < 0 : r > 0) best = x;
    }
    return best;
  }
  if (!strcmp(name, "indent")) {
    jv s = jv_stringify(c, v);
    jv w = jargs_get(a, 0, "width", jv_int(4));
    bool first = jv_truthy(jargs_get(a, 1, "first", jv_bool(false)));
    bool blank = jv_truthy(jargs_get(a, 2, "blank", jv_bool(false)));
    jbuf pad;
    jbuf_init(&pad, c->a, (size_t)-1);
    if (w.kind == JV_STR) jbuf_putstr(&pad, w.u.s);
    else for (int64_t i = 0; i < (w.kind == JV_INT ? w.u.i : 4) && i < 256; i++) jbuf_puts(&pad, " ");
    jv pv = jbuf_value(&pad);
    jbuf b;
    jbuf_init(&b, c->a, (size_t)-1);
    const jstr *x = s.u.s;
    size_t ls = 0;
    bool first_line = true;
    for (size_t i = 0; i <= x->len; i++) {
      if (i < x->len && x->s[i] != '\n') continue;
      bool empty = i == ls;
      if ((!first_line || first) && (blank || !empty)) jbuf_putstr(&b, pv.u.s);
      jbuf_putstr_range(&b, x, ls, i < x->len ? i + 1 : i);
      ls = i + 1;
      first_line = false;
    }
    return jbuf_value(&b);
  }
  if (!strcmp(name, "batch")) {
    jv l = jv_iter_list(c, v);
    if (c->err) return l;
    if (a0.kind != JV_INT || a0.u.i <= 0) return jerr(c, DI_ERR_INVALID, "ValueError: batch size must be positive");
    size_t k = (size_t)a0.u.i, n = l.u.l->n, nb = (n + k - 1) / k;
    jlist *o = jlist_new(c->a, nb);
    if (!o) return oom(c);
    for (size_t i = 0; i < nb; i++) {
      size_t m = n - i * k < k ? n - i * k : k;
      jlist *b = jlist_new(c->a, m);
      if (!b) return oom(c);
      memcpy(b->items, l.u.l->items + i * k, m * sizeof(jv));
      o->items[i] = jv_list(b);
    }
    return jv_list(o);
  }
  return jerr(c, DI_ERR_UNSUPPORTED, "unsupported filter '%s'", name);
}

/* ---------------------------------------------------------------- globals */

jv jbuiltin_call(jctx *c, const char *name, jargs *a) {
  if (!strcmp(name, "raise_exception")) {
    jv m = jv_stringify(c, jargs_get(a, 0, "message", jv_cstr(c->a, "")));
    c->line = 0; /* the template's own message, shown as transformers shows it */
    return jerr(c, DI_ERR_INVALID, "TemplateError: %.*s", (int)(m.kind == JV_STR ? (m.u.s->len > 380 ? 380 : m.u.s->len) : 0),
                m.kind == JV_STR ? m.u.s->s : "");
  }
  if (!strcmp(name, "strftime_now")) {
    jv f = jargs_get(a, 0, "format", jv_undef(NULL));
    if (f.kind != JV_STR) return jerr(c, DI_ERR_INVALID, "TypeError: strftime_now() needs a format string");
    time_t t = c->now ? (time_t)c->now : time(NULL);
    struct tm tm;
    if (c->now) gmtime_r(&t, &tm); else localtime_r(&t, &tm);
    char out[512];
    size_t n = f.u.s->len ? strftime(out, sizeof out, f.u.s->s, &tm) : 0;
    return jv_str(c->a, out, n, JT_CLEAN);
  }
  if (!strcmp(name, "namespace") || !strcmp(name, "dict")) {
    jdict *d = jdict_new(c->a, a->nkw + 4);
    if (!d) return oom(c);
    for (size_t i = 0; i < a->n; i++) { /* namespace({...}) / dict({...}) */
      jv x = a->pos[i];
      if (x.kind != JV_DICT) return jerr(c, DI_ERR_INVALID, "TypeError: %s() positional argument must be a dict", name);
      for (size_t k = 0; k < x.u.d->n; k++) jdict_set(c->a, d, x.u.d->keys[k], x.u.d->vals[k]);
    }
    for (size_t i = 0; i < a->nkw; i++)
      if (!jdict_set(c->a, d, jv_cstr(c->a, a->kwn[i]), a->kwv[i])) return oom(c);
    jv r = {.kind = name[0] == 'n' ? JV_NS : JV_DICT};
    r.u.d = d;
    return r;
  }
  if (!strcmp(name, "range")) {
    int64_t start = 0, stop, stepv = 1;
    for (size_t i = 0; i < a->n; i++)
      if (a->pos[i].kind != JV_INT) return jerr(c, DI_ERR_INVALID, "TypeError: range() arguments must be integers");
    if (a->n == 1) stop = a->pos[0].u.i;
    else if (a->n >= 2) { start = a->pos[0].u.i; stop = a->pos[1].u.i; if (a->n > 2) stepv = a->pos[2].u.i; }
    else return jerr(c, DI_ERR_INVALID, "TypeError: range expected at least 1 argument, got 0");
    if (!stepv) return jerr(c, DI_ERR_INVALID, "ValueError: range() arg 3 must not be zero");
    double cnt = stepv > 0 ? ceil(((double)stop - (double)start) / (double)stepv) : ceil(((double)start - (double)stop) / (double)-stepv);
    if (cnt < 0) cnt = 0;
    if (cnt > MAX_RANGE) return jerr(c, DI_ERR_RANGE, "range() of more than %d items", MAX_RANGE);
    jlist *l = jlist_new(c->a, (size_t)cnt);
    if (!l) return oom(c);
    for (size_t i = 0; i < (size_t)cnt; i++) l->items[i] = jv_int(start + (int64_t)i * stepv);
    return jv_list(l);
  }
  return jerr(c, DI_ERR_UNSUPPORTED, "unsupported function '%s'", name);
}
