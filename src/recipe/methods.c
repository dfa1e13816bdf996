/* Attribute/item access, iteration, comparison, and the Python methods of
 * str, dict and list that chat templates call (`content.split('</think>')`,
 * `tool.items()`, `x.startswith(...)`). Strings are indexed by code point, as
 * in Python; taint follows every byte that is kept. */
#include <stdio.h>
#include <string.h>
#include <utf8proc.h>

#include "recipe/jinja.h"

static jv oom(jctx *c) { return jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget"); }

static char *fmt_undef(jctx *c, const char *obj, jv key) {
  char m[256];
  if (key.kind == JV_STR)
    snprintf(m, sizeof m, "'%s' has no attribute '%.*s'", obj, (int)(key.u.s->len > 120 ? 120 : key.u.s->len), key.u.s->s);
  else if (key.kind == JV_INT)
    snprintf(m, sizeof m, "'%s' has no element %lld", obj, (long long)key.u.i);
  else
    snprintf(m, sizeof m, "'%s' has no element of type %s", obj, jv_type_name(key));
  size_t n = strlen(m);
  char *d = jarena_alloc(c->a, n + 1);
  if (!d) return "out of memory";
  memcpy(d, m, n);
  return d;
}

bool py_isspace(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
         cp == 0x3000;
}

static size_t cp_at(const char *s, size_t len, size_t i, int32_t *cp) {
  utf8proc_int32_t c;
  utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), &c);
  if (k <= 0) { *cp = (unsigned char)s[i]; return 1; }
  *cp = c;
  return (size_t)k;
}

static size_t cp_before(const char *s, size_t i) {
  size_t k = i - 1;
  while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
  return k;
}

jv jv_iter_list(jctx *c, jv v) {
  if (!jcharge(c, v.kind == JV_LIST ? 0 : v.kind == JV_STR ? v.u.s->len : v.kind == JV_DICT ? v.u.d->n : 0))
    return jv_undef(NULL);
  switch (v.kind) {
    case JV_LIST: return v;
    case JV_UNDEF: return jv_list(jlist_new(c->a, 0));
    case JV_DICT: {
      jlist *l = jlist_new(c->a, v.u.d->n);
      if (!l) return oom(c);
      if (v.u.d->n) memcpy(l->items, v.u.d->keys, v.u.d->n * sizeof(jv));
      return jv_list(l);
    }
    case JV_STR: {
      const jstr *s = v.u.s;
      size_t n = 0;
      for (size_t i = 0; i < s->len; i++) n += ((unsigned char)s->s[i] & 0xC0) != 0x80;
      jlist *l = jlist_new(c->a, n);
      if (!l) return oom(c);
      size_t k = 0;
      for (size_t i = 0; i < s->len && k < n;) {
        int32_t cp;
        size_t w = cp_at(s->s, s->len, i, &cp);
        l->items[k++] = jv_substr(c->a, s, i, i + w);
        i += w;
      }
      l->n = k;
      return jv_list(l);
    }
    default:
      return jerr(c, DI_ERR_INVALID, "TypeError: '%s' object is not iterable", jv_type_name(v));
  }
}

static const char *const DICT_METHODS[] = {"items", "keys", "values", "get", NULL};
static const char *const STR_METHODS[] = {"startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip",
                                          "upper", "lower", "title", "capitalize", "replace", "find", "rfind",
                                          "count", "join", "isdigit", "isalpha", "isspace", "isupper", "islower",
                                          "isalnum", "splitlines", "format", NULL};
static const char *const LIST_METHODS[] = {"index", "count", NULL};

static bool in_set(const char *const *set, const char *name, size_t len) {
  for (int i = 0; set[i]; i++)
    if (strlen(set[i]) == len && !memcmp(set[i], name, len)) return true;
  return false;
}

bool jbuiltin_is_method(jv self, const char *name) {
  size_t n = strlen(name);
  if (self.kind == JV_DICT) return in_set(DICT_METHODS, name, n);
  if (self.kind == JV_STR) return in_set(STR_METHODS, name, n);
  if (self.kind == JV_LIST) return in_set(LIST_METHODS, name, n);
  return false;
}

static jv bound(jctx *c, jv self, const char *name, size_t len) {
  jfunc *fn = jarena_alloc(c->a, sizeof *fn);
  jv *sp = jarena_alloc(c->a, sizeof *sp);
  char *nm = jarena_alloc(c->a, len + 1);
  if (!fn || !sp || !nm) return oom(c);
  memcpy(nm, name, len);
  *sp = self;
  fn->kind = JF_METHOD;
  fn->name = nm;
  fn->self = sp;
  jv r = {.kind = JV_FUNC};
  r.u.fn = fn;
  return r;
}

jv jv_getattr(jctx *c, jv obj, const char *name, size_t len) {
  if (obj.kind == JV_UNDEF) return jundef_fail(c, obj);
  jv key = jv_str(c->a, name, len, JT_CLEAN);
  if (obj.kind == JV_DICT && in_set(DICT_METHODS, name, len)) return bound(c, obj, name, len);
  if ((obj.kind == JV_STR && in_set(STR_METHODS, name, len)) || (obj.kind == JV_LIST && in_set(LIST_METHODS, name, len)))
    return bound(c, obj, name, len);
  if (obj.kind == JV_DICT || obj.kind == JV_NS) {
    if (!jcharge(c, obj.u.d->n / 8)) return jv_undef(NULL);
    const jv *v = jdict_get(obj.u.d, name, len);
    if (v) return *v;
  }
  return jv_undef(fmt_undef(c, jv_object_repr(obj), key));
}

jv jv_getitem(jctx *c, jv obj, jv key) {
  if (obj.kind == JV_UNDEF) return jundef_fail(c, obj);
  if (obj.kind == JV_DICT || obj.kind == JV_NS) {
    if (!jcharge(c, obj.u.d->n / 8)) return jv_undef(NULL);
    const jv *v = jdict_getv(obj.u.d, key);
    if (v) return *v;
  } else if ((obj.kind == JV_LIST || obj.kind == JV_STR) && (key.kind == JV_INT || key.kind == JV_BOOL)) {
    int64_t i = key.kind == JV_INT ? key.u.i : key.u.b;
    jv items = obj.kind == JV_STR ? jv_iter_list(c, obj) : obj;
    if (c->err) return items;
    int64_t n = (int64_t)items.u.l->n;
    if (i < 0) i += n;
    if (i >= 0 && i < n) return items.u.l->items[i];
  }
  if (key.kind == JV_STR) return jv_getattr(c, obj, key.u.s->s, key.u.s->len);
  return jv_undef(fmt_undef(c, jv_object_repr(obj), key));
}

static int compare_depth(jctx *c, jv a, jv b, bool *ok, int depth);
int jv_compare(jctx *c, jv a, jv b, bool *ok) { return compare_depth(c, a, b, ok, 0); }

static int compare_depth(jctx *c, jv a, jv b, bool *ok, int depth) {
  if (depth > 200) {
    *ok = false;
    return 0;
  }
  bool an = a.kind == JV_INT || a.kind == JV_FLOAT || a.kind == JV_BOOL;
  bool bn = b.kind == JV_INT || b.kind == JV_FLOAT || b.kind == JV_BOOL;
  if (an && bn) {
    if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
      int64_t x = a.kind == JV_INT ? a.u.i : a.u.b, y = b.kind == JV_INT ? b.u.i : b.u.b;
      return x < y ? -1 : x > y;
    }
    double x = a.kind == JV_FLOAT ? a.u.f : a.kind == JV_INT ? (double)a.u.i : a.u.b;
    double y = b.kind == JV_FLOAT ? b.u.f : b.kind == JV_INT ? (double)b.u.i : b.u.b;
    return x < y ? -1 : x > y;
  }
  if (a.kind == JV_STR && b.kind == JV_STR) {
    size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
    int r = memcmp(a.u.s->s, b.u.s->s, n);
    if (r) return r < 0 ? -1 : 1;
    return a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
  }
  if (a.kind == JV_LIST && b.kind == JV_LIST) {
    for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
      if (jv_equal(a.u.l->items[i], b.u.l->items[i])) continue;
      return compare_depth(c, a.u.l->items[i], b.u.l->items[i], ok, depth + 1);
    }
    return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
  }
  *ok = false;
  return 0;
}

static bool str_find(const jstr *h, const jstr *n, size_t from, size_t *at) {
  if (n->len == 0) { *at = from; return from <= h->len; }
  if (n->len > h->len) return false;
  for (size_t i = from; i + n->len <= h->len; i++)
    if (h->s[i] == n->s[0] && !memcmp(h->s + i, n->s, n->len)) { *at = i; return true; }
  return false;
}

bool jv_contains(jctx *c, jv container, jv item) {
  uint64_t work = container.kind == JV_STR ? container.u.s->len / 16 : container.kind == JV_LIST ? container.u.l->n
                  : (container.kind == JV_DICT || container.kind == JV_NS) ? container.u.d->n / 8 : 0;
  if (!jcharge(c, work)) return false;
  switch (container.kind) {
    case JV_STR:
      if (item.kind != JV_STR) {
        jerr(c, DI_ERR_INVALID, "TypeError: 'in <string>' requires string as left operand, not %s", jv_type_name(item));
        return false;
      }
      size_t at;
      return str_find(container.u.s, item.u.s, 0, &at);
    case JV_LIST:
      for (size_t i = 0; i < container.u.l->n; i++)
        if (jv_equal(container.u.l->items[i], item)) return true;
      return false;
    case JV_DICT: case JV_NS: return jdict_getv(container.u.d, item) != NULL;
    case JV_UNDEF: return false;
    default:
      jerr(c, DI_ERR_INVALID, "TypeError: argument of type '%s' is not iterable", jv_type_name(container));
      return false;
  }
}

/* ---------------------------------------------------------------- str methods */

static bool in_chars(const jstr *chars, int32_t cp) {
  for (size_t i = 0; i < chars->len;) {
    int32_t x;
    i += cp_at(chars->s, chars->len, i, &x);
    if (x == cp) return true;
  }
  return false;
}

jv jstr_strip(jctx *c, jv s, jv chars, bool left, bool right) {
  if (s.kind != JV_STR) return jerr(c, DI_ERR_INVALID, "TypeError: strip of a non-string");
  const jstr *x = s.u.s;
  bool dflt = chars.kind != JV_STR;
  size_t lo = 0, hi = x->len;
  while (left && lo < hi) {
    int32_t cp;
    size_t k = cp_at(x->s, x->len, lo, &cp);
    if (dflt ? !py_isspace(cp) : !in_chars(chars.u.s, cp)) break;
    lo += k;
  }
  while (right && hi > lo) {
    size_t p = cp_before(x->s, hi);
    int32_t cp;
    cp_at(x->s, x->len, p, &cp);
    if (dflt ? !py_isspace(cp) : !in_chars(chars.u.s, cp)) break;
    hi = p;
  }
  if (lo == 0 && hi == x->len) return s;
  return jv_substr(c->a, x, lo, hi);
}

static jv list_push(jctx *c, jlist **l, size_t *cap, jv v) {
  if ((*l)->n == *cap) {
    size_t nc = *cap ? *cap * 2 : 8;
    jlist *nl = jlist_new(c->a, nc);
    if (!nl) return oom(c);
    if ((*l)->n) memcpy(nl->items, (*l)->items, (*l)->n * sizeof(jv));
    nl->n = (*l)->n;
    *l = nl;
    *cap = nc;
  }
  (*l)->items[(*l)->n++] = v;
  return v;
}

static jv str_split(jctx *c, const jstr *s, jv sep, int64_t maxsplit, bool from_right) {
  jlist *l = jlist_new(c->a, 0);
  size_t cap = 0;
  if (!l) return oom(c);
  if (sep.kind == JV_STR) {
    const jstr *p = sep.u.s;
    if (!p->len) return jerr(c, DI_ERR_INVALID, "ValueError: empty separator");
    if (from_right && maxsplit >= 0) { /* rsplit with a limit: collect from the end */
      size_t end = s->len;
      jv parts[64];
      size_t np = 0;
      int64_t done = 0;
      size_t i = s->len;
      while (done < maxsplit && i >= p->len && np < 63) {
        size_t k = i - p->len;
        if (!memcmp(s->s + k, p->s, p->len)) {
          parts[np++] = jv_substr(c->a, s, k + p->len, end);
          end = k;
          i = k;
          done++;
        } else {
          i--;
        }
      }
      list_push(c, &l, &cap, jv_substr(c->a, s, 0, end));
      while (np) list_push(c, &l, &cap, parts[--np]);
      return jv_list(l);
    }
    size_t start = 0, at;
    int64_t done = 0;
    while ((maxsplit < 0 || done < maxsplit) && str_find(s, p, start, &at) && !c->err) {
      list_push(c, &l, &cap, jv_substr(c->a, s, start, at));
      start = at + p->len;
      done++;
    }
    list_push(c, &l, &cap, jv_substr(c->a, s, start, s->len));
    return jv_list(l);
  }
  size_t i = 0;
  int64_t done = 0;
  while (i < s->len && !c->err) {
    int32_t cp;
    size_t k;
    while (i < s->len && (k = cp_at(s->s, s->len, i, &cp), py_isspace(cp))) i += k;
    if (i >= s->len) break;
    if (maxsplit >= 0 && done >= maxsplit) {
      jv rest = jstr_strip(c, jv_substr(c->a, s, i, s->len), jv_undef(NULL), false, true);
      list_push(c, &l, &cap, rest);
      break;
    }
    size_t st = i;
    while (i < s->len && (k = cp_at(s->s, s->len, i, &cp), !py_isspace(cp))) i += k;
    list_push(c, &l, &cap, jv_substr(c->a, s, st, i));
    done++;
  }
  return jv_list(l);
}

/* Case mapping keeps each character's taint (a content character stays content). */
jv jstr_case(jctx *c, jv s, int mode /* 0 lower, 1 upper, 2 capitalize, 3 title */) {
  if (s.kind != JV_STR) return jerr(c, DI_ERR_INVALID, "TypeError: case mapping of a non-string");
  const jstr *x = s.u.s;
  jbuf b;
  jbuf_init(&b, c->a, (size_t)-1);
  bool word_start = true, first = true;
  for (size_t i = 0; i < x->len;) {
    int32_t cp;
    size_t k = cp_at(x->s, x->len, i, &cp);
    bool titled = (mode == 2 && first) || (mode == 3 && word_start);
    bool upper = mode == 1 || titled;
    int32_t m = upper ? (mode == 1 ? utf8proc_toupper(cp) : utf8proc_totitle(cp)) : utf8proc_tolower(cp);
    if (mode == 3) {
      utf8proc_category_t cat = utf8proc_category(cp);
      word_start = !(cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT);
    }
    first = false;
    /* Python applies SpecialCasing's one-to-many mappings; utf8proc only the simple ones */
    const char *special = NULL;
    if (cp == 0xDF && upper) special = mode == 1 ? "SS" : "Ss";
    if (cp == 0x130 && !upper) special = "i\xcc\x87";
    if (special) {
      jbuf_put(&b, special, strlen(special), jstr_tainted(x, i));
      i += k;
      continue;
    }
    utf8proc_uint8_t enc[4];
    utf8proc_ssize_t n = utf8proc_encode_char(m, enc);
    jbuf_put(&b, (const char *)enc, (size_t)n, jstr_tainted(x, i));
    i += k;
  }
  return jbuf_value(&b);
}

jv jstr_replace(jctx *c, jv s, jv old, jv new_, int64_t count) {
  if (s.kind != JV_STR || old.kind != JV_STR || new_.kind != JV_STR)
    return jerr(c, DI_ERR_INVALID, "TypeError: replace() arguments must be str");
  const jstr *x = s.u.s, *o = old.u.s;
  jbuf b;
  jbuf_init(&b, c->a, (size_t)-1);
  size_t i = 0, at;
  int64_t done = 0;
  if (!o->len) { /* Python inserts new between every character */
    for (size_t k = 0; k <= x->len && (count < 0 || done < count) && b.ok;) {
      jbuf_putstr(&b, new_.u.s);
      done++;
      if (k == x->len) { i = k; break; }
      int32_t cp;
      size_t w = cp_at(x->s, x->len, k, &cp);
      jbuf_putstr_range(&b, x, k, k + w);
      k += w;
      i = k;
    }
    jbuf_putstr_range(&b, x, i, x->len);
    return jbuf_value(&b);
  }
  while ((count < 0 || done < count) && str_find(x, o, i, &at) && b.ok) {
    jbuf_putstr_range(&b, x, i, at);
    jbuf_putstr(&b, new_.u.s);
    i = at + o->len;
    done++;
  }
  jbuf_putstr_range(&b, x, i, x->len);
  return jbuf_value(&b);
}

jv jstr_join(jctx *c, jv sep, jv items, jv attr) {
  jv l = jv_iter_list(c, items);
  if (c->err || !jcharge(c, l.u.l->n)) return jv_undef(NULL);
  jbuf b;
  jbuf_init(&b, c->a, (size_t)-1);
  for (size_t i = 0; i < l.u.l->n && !c->err; i++) {
    if (i && sep.kind == JV_STR) jbuf_putstr(&b, sep.u.s);
    jv it = l.u.l->items[i];
    if (attr.kind == JV_STR) it = jv_getitem(c, it, attr);
    jv_to_str(c, &b, it);
  }
  return jbuf_value(&b);
}

static bool prefix_match(const jstr *s, jv p, bool end) {
  if (p.kind == JV_LIST) {
    for (size_t i = 0; i < p.u.l->n; i++)
      if (prefix_match(s, p.u.l->items[i], end)) return true;
    return false;
  }
  if (p.kind != JV_STR) return false;
  size_t n = p.u.s->len;
  if (n > s->len) return false;
  return !memcmp(end ? s->s + s->len - n : s->s, p.u.s->s, n);
}

static jv str_pred(const jstr *s, int kind) {
  if (!s->len) return jv_bool(false);
  bool any_cased = false;
  for (size_t i = 0; i < s->len;) {
    int32_t cp;
    i += cp_at(s->s, s->len, i, &cp);
    utf8proc_category_t cat = utf8proc_category(cp);
    bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
    bool digit = cat == UTF8PROC_CATEGORY_ND;
    switch (kind) {
      case 0: if (!digit) return jv_bool(false); break;
      case 1: if (!alpha) return jv_bool(false); break;
      case 2: if (!py_isspace(cp)) return jv_bool(false); break;
      case 3: if (cat == UTF8PROC_CATEGORY_LL) return jv_bool(false); if (cat == UTF8PROC_CATEGORY_LU) any_cased = true; break;
      case 4: if (cat == UTF8PROC_CATEGORY_LU) return jv_bool(false); if (cat == UTF8PROC_CATEGORY_LL) any_cased = true; break;
      case 5: if (!alpha && !digit && cat != UTF8PROC_CATEGORY_NL && cat != UTF8PROC_CATEGORY_NO) return jv_bool(false); break;
    }
  }
  return jv_bool(kind >= 3 && kind <= 4 ? any_cased : true);
}

jv jbuiltin_method(jctx *c, jv self, const char *name, jargs *a) {
  if (self.kind == JV_DICT) {
    const jdict *d = self.u.d;
    if (!strcmp(name, "get")) {
      jv k = jargs_get(a, 0, "key", jv_undef(NULL));
      const jv *v = jdict_getv(d, k);
      return v ? *v : jargs_get(a, 1, "default", jv_none());
    }
    jlist *l = jlist_new(c->a, d->n);
    if (!l) return oom(c);
    for (size_t i = 0; i < d->n; i++) {
      if (!strcmp(name, "keys")) l->items[i] = d->keys[i];
      else if (!strcmp(name, "values")) l->items[i] = d->vals[i];
      else {
        jlist *t = jlist_new(c->a, 2);
        if (!t) return oom(c);
        t->tuple = true;
        t->items[0] = d->keys[i];
        t->items[1] = d->vals[i];
        l->items[i] = jv_list(t);
      }
    }
    return jv_list(l);
  }
  if (self.kind == JV_INT && !strcmp(name, "cycle")) { /* loop.cycle */
    if (!a->n) return jerr(c, DI_ERR_INVALID, "TypeError: no items for cycling given");
    return a->pos[(size_t)self.u.i % a->n];
  }
  if (self.kind == JV_LIST) {
    jv x = jargs_get(a, 0, "value", jv_undef(NULL));
    int64_t cnt = 0;
    for (size_t i = 0; i < self.u.l->n; i++)
      if (jv_equal(self.u.l->items[i], x)) {
        if (!strcmp(name, "index")) return jv_int((int64_t)i);
        cnt++;
      }
    if (!strcmp(name, "index")) return jerr(c, DI_ERR_INVALID, "ValueError: value is not in list");
    return jv_int(cnt);
  }
  if (self.kind != JV_STR) return jerr(c, DI_ERR_INVALID, "TypeError: no method '%s' on %s", name, jv_type_name(self));
  const jstr *s = self.u.s;
  jv a0 = jargs_get(a, 0, NULL, jv_undef(NULL)), a1 = jargs_get(a, 1, NULL, jv_undef(NULL));
  if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
    if (a0.kind != JV_STR && !(a0.kind == JV_LIST && a0.u.l->tuple))
      return jerr(c, DI_ERR_INVALID, "TypeError: %s first arg must be str or a tuple of str, not %s", name, jv_type_name(a0));
    return jv_bool(prefix_match(s, a0, name[0] == 'e'));
  }
  if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
    jv sep = jargs_get(a, 0, "sep", jv_none());
    jv mx = jargs_get(a, 1, "maxsplit", jv_int(-1));
    return str_split(c, s, sep, mx.kind == JV_INT ? mx.u.i : -1, name[0] == 'r');
  }
  if (!strcmp(name, "strip")) return jstr_strip(c, self, jargs_get(a, 0, "chars", jv_none()), true, true);
  if (!strcmp(name, "lstrip")) return jstr_strip(c, self, jargs_get(a, 0, "chars", jv_none()), true, false);
  if (!strcmp(name, "rstrip")) return jstr_strip(c, self, jargs_get(a, 0, "chars", jv_none()), false, true);
  if (!strcmp(name, "lower")) return jstr_case(c, self, 0);
  if (!strcmp(name, "upper")) return jstr_case(c, self, 1);
  if (!strcmp(name, "capitalize")) return jstr_case(c, self, 2);
  if (!strcmp(name, "title")) return jstr_case(c, self, 3);
  if (!strcmp(name, "replace")) {
    jv cnt = jargs_get(a, 2, "count", jv_int(-1));
    return jstr_replace(c, self, a0, a1, cnt.kind == JV_INT ? cnt.u.i : -1);
  }
  if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "count")) {
    if (a0.kind != JV_STR) return jerr(c, DI_ERR_INVALID, "TypeError: must be str, not %s", jv_type_name(a0));
    size_t at = 0, from = 0;
    int64_t cnt = 0, last = -1, first = -1;
    while (from <= s->len && str_find(s, a0.u.s, from, &at)) {
      if (first < 0) first = (int64_t)at;
      last = (int64_t)at;
      cnt++;
      from = at + (a0.u.s->len ? a0.u.s->len : 1);
    }
    int64_t r = !strcmp(name, "count") ? cnt : !strcmp(name, "find") ? first : last;
    if (r > 0 && strcmp(name, "count")) { /* byte offset -> code point index */
      int64_t k = 0;
      for (int64_t i = 0; i < r; i++) k += ((unsigned char)s->s[i] & 0xC0) != 0x80;
      r = k;
    }
    return jv_int(r);
  }
  if (!strcmp(name, "join")) return jstr_join(c, self, a0, jv_undef(NULL));
  if (!strcmp(name, "isdigit")) return str_pred(s, 0);
  if (!strcmp(name, "isalpha")) return str_pred(s, 1);
  if (!strcmp(name, "isspace")) return str_pred(s, 2);
  if (!strcmp(name, "isupper")) return str_pred(s, 3);
  if (!strcmp(name, "islower")) return str_pred(s, 4);
  if (!strcmp(name, "isalnum")) return str_pred(s, 5);
  if (!strcmp(name, "splitlines")) {
    jv parts = str_split(c, s, jv_cstr(c->a, "\n"), -1, false);
    if (c->err) return parts;
    if (parts.u.l->n && parts.u.l->items[parts.u.l->n - 1].u.s->len == 0) parts.u.l->n--;
    return parts;
  }
  if (!strcmp(name, "format")) { /* positional {} / {0} only */
    jbuf b;
    jbuf_init(&b, c->a, (size_t)-1);
    size_t auto_i = 0;
    for (size_t i = 0; i < s->len && !c->err; i++) {
      if (s->s[i] == '{' && i + 1 < s->len && s->s[i + 1] == '{') { jbuf_puts(&b, "{"); i++; continue; }
      if (s->s[i] == '}' && i + 1 < s->len && s->s[i + 1] == '}') { jbuf_puts(&b, "}"); i++; continue; }
      if (s->s[i] != '{') { jbuf_putstr_range(&b, s, i, i + 1); continue; }
      size_t j = i + 1;
      size_t idx = 0;
      bool num = false;
      while (j < s->len && s->s[j] >= '0' && s->s[j] <= '9') { idx = idx * 10 + (size_t)(s->s[j] - '0'); j++; num = true; }
      if (j >= s->len || s->s[j] != '}')
        return jerr(c, DI_ERR_UNSUPPORTED, "unsupported str.format() field (only {} and {N})");
      if (!num) idx = auto_i++;
      if (idx >= a->n) return jerr(c, DI_ERR_INVALID, "IndexError: Replacement index %zu out of range", idx);
      jv_to_str(c, &b, a->pos[idx]);
      i = j;
    }
    return jbuf_value(&b);
  }
  return jerr(c, DI_ERR_UNSUPPORTED, "unsupported method str.%s", name);
}
