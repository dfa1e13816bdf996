#include <stdlib.h>
#include <string.h>

#include "recipe/jinja.h"

/* ---------------------------------------------------------------- arena */

typedef struct jchunk {
  struct jchunk *next;
  size_t cap, used;
  max_align_t data[];
} jchunk;

void jarena_init(jarena *a, size_t limit) {
  memset(a, 0, sizeof *a);
  a->limit = limit;
}

void jarena_free(jarena *a) {
  jchunk *c = a->head;
  while (c) {
    jchunk *n = c->next;
    free(c);
    c = n;
  }
  a->head = NULL;
  a->used = 0;
}

void *jarena_alloc(jarena *a, size_t n) {
  if (a->failed) return NULL;
  size_t need = (n + 15) & ~(size_t)15;
  if (need < n || a->used + need > a->limit) {
    a->failed = true;
    return NULL;
  }
  jchunk *c = a->head;
  if (!c || c->cap - c->used < need) {
    size_t cap = need > 65536 ? need : 65536;
    c = malloc(sizeof(jchunk) + cap);
    if (!c) {
      a->failed = true;
      return NULL;
    }
    c->cap = cap;
    c->used = 0;
    c->next = a->head;
    a->head = c;
  }
  void *p = (char *)c->data + c->used;
  c->used += need;
  a->used += need;
  memset(p, 0, need);
  return p;
}

/* ---------------------------------------------------------------- strings */

jstr *jstr_new(jarena *a, const char *s, size_t len, uint8_t tflag) {
  jstr *r = jarena_alloc(a, sizeof *r);
  char *d = jarena_alloc(a, len + 1);
  if (!r || !d) return NULL;
  if (len) memcpy(d, s, len);
  r->s = d;
  r->len = len;
  r->tflag = len ? tflag : JT_CLEAN;
  return r;
}

jv jv_str(jarena *a, const char *s, size_t len, uint8_t tflag) {
  jv v = {.kind = JV_STR};
  v.u.s = jstr_new(a, s, len, tflag);
  if (!v.u.s) return jv_undef("out of memory");
  return v;
}

jv jv_cstr(jarena *a, const char *s) { return jv_str(a, s, strlen(s), JT_CLEAN); }

void jbuf_init(jbuf *b, jarena *a, size_t limit) {
  memset(b, 0, sizeof *b);
  b->a = a;
  b->limit = limit;
  b->ok = true;
}

static bool jbuf_grow(jbuf *b, size_t extra) {
  if (!b->ok) return false;
  if (b->len + extra < b->len || b->len + extra > b->limit) {
    b->ok = false;
    return false;
  }
  if (b->len + extra + 1 <= b->cap) return true;
  size_t cap = b->cap ? b->cap * 2 : 64;
  while (cap < b->len + extra + 1) cap *= 2;
  char *s = jarena_alloc(b->a, cap);
  uint8_t *t = jarena_alloc(b->a, cap);
  if (!s || !t) {
    b->ok = false;
    return false;
  }
  if (b->len) {
    memcpy(s, b->s, b->len);
    memcpy(t, b->t, b->len);
  }
  b->s = s;
  b->t = t;
  b->cap = cap;
  return true;
}

void jbuf_put(jbuf *b, const char *s, size_t n, bool taint) {
  if (!n || !jbuf_grow(b, n)) return;
  memcpy(b->s + b->len, s, n);
  memset(b->t + b->len, taint ? 1 : 0, n);
  if (taint) b->any_taint = true;
  b->len += n;
  b->s[b->len] = 0;
}

void jbuf_puts(jbuf *b, const char *s) { jbuf_put(b, s, strlen(s), false); }

void jbuf_putstr_range(jbuf *b, const jstr *s, size_t from, size_t to) {
  if (to <= from || !jbuf_grow(b, to - from)) return;
  size_t n = to - from;
  memcpy(b->s + b->len, s->s + from, n);
  if (s->tflag == JT_MIXED) {
    memcpy(b->t + b->len, s->taint + from, n);
    if (memchr(s->taint + from, 1, n)) b->any_taint = true;
  } else {
    memset(b->t + b->len, s->tflag == JT_ALL, n);
    if (s->tflag == JT_ALL) b->any_taint = true;
  }
  b->len += n;
  b->s[b->len] = 0;
}

void jbuf_putstr(jbuf *b, const jstr *s) { jbuf_putstr_range(b, s, 0, s->len); }

jv jbuf_value(jbuf *b) {
  if (!b->ok) return jv_undef("out of memory");
  jstr *r = jarena_alloc(b->a, sizeof *r);
  if (!r) return jv_undef("out of memory");
  if (!b->s) {
    r->s = "";
    r->len = 0;
  } else {
    r->s = b->s;
    r->len = b->len;
    if (b->any_taint) {
      size_t k = 0;
      while (k < b->len && b->t[k]) k++;
      if (k == b->len) {
        r->tflag = JT_ALL;
      } else {
        r->tflag = JT_MIXED;
        r->taint = b->t;
      }
    }
  }
  jv v = {.kind = JV_STR};
  v.u.s = r;
  return v;
}

jv jv_substr(jarena *a, const jstr *s, size_t from, size_t to) {
  if (to > s->len) to = s->len;
  if (from > to) from = to;
  jbuf b;
  jbuf_init(&b, a, (size_t)-1);
  jbuf_putstr_range(&b, s, from, to);
  return jbuf_value(&b);
}

/* ---------------------------------------------------------------- containers */

jlist *jlist_new(jarena *a, size_t n) {
  if (n > ((size_t)1 << 40) / sizeof(jv)) return NULL;
  jlist *l = jarena_alloc(a, sizeof *l);
  if (!l) return NULL;
  l->n = n;
  if (n) {
    l->items = jarena_alloc(a, n * sizeof(jv));
    if (!l->items) return NULL;
  }
  return l;
}

jv jv_list(jlist *l) {
  if (!l) return jv_undef("out of memory");
  jv v = {.kind = JV_LIST};
  v.u.l = l;
  return v;
}

jdict *jdict_new(jarena *a, size_t cap) {
  jdict *d = jarena_alloc(a, sizeof *d);
  if (!d) return NULL;
  if (cap) {
    d->keys = jarena_alloc(a, cap * sizeof(jv));
    d->vals = jarena_alloc(a, cap * sizeof(jv));
    if (!d->keys || !d->vals) return NULL;
    d->cap = cap;
  }
  return d;
}

const jv *jdict_getv(const jdict *d, jv key) {
  for (size_t i = 0; i < d->n; i++)
    if (jv_equal(d->keys[i], key)) return &d->vals[i];
  return NULL;
}

const jv *jdict_get(const jdict *d, const char *key, size_t klen) {
  for (size_t i = 0; i < d->n; i++) {
    const jv *k = &d->keys[i];
    if (k->kind == JV_STR && k->u.s->len == klen && memcmp(k->u.s->s, key, klen) == 0)
      return &d->vals[i];
  }
  return NULL;
}

bool jdict_set(jarena *a, jdict *d, jv key, jv val) {
  for (size_t i = 0; i < d->n; i++)
    if (jv_equal(d->keys[i], key)) {
      d->vals[i] = val;
      return true;
    }
  return jdict_append(a, d, key, val);
}

bool jdict_append(jarena *a, jdict *d, jv key, jv val) {
  if (d->n == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 8;
    jv *k = jarena_alloc(a, cap * sizeof(jv)), *v = jarena_alloc(a, cap * sizeof(jv));
    if (!k || !v) return false;
    if (d->n) {
      memcpy(k, d->keys, d->n * sizeof(jv));
      memcpy(v, d->vals, d->n * sizeof(jv));
    }
    d->keys = k;
    d->vals = v;
    d->cap = cap;
  }
  d->keys[d->n] = key;
  d->vals[d->n] = val;
  d->n++;
  return true;
}

/* ---------------------------------------------------------------- semantics */

bool jv_truthy(jv v) {
  switch (v.kind) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return true;
  }
}

static bool is_num(jv v) { return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL; }
static double num_f(jv v) {
  return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : (double)v.u.b;
}

/* Depth-limited like printing: nesting is not bounded by the template. Past
 * the limit values compare unequal, which is safe, never a crash. */
static bool equal_depth(jv a, jv b, int depth) {
  if (depth > 200) return false;
  if (is_num(a) && is_num(b)) {
    if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
      int64_t x = a.kind == JV_INT ? a.u.i : a.u.b, y = b.kind == JV_INT ? b.u.i : b.u.b;
      return x == y;
    }
    return num_f(a) == num_f(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.u.s->len == b.u.s->len && memcmp(a.u.s->s, b.u.s->s, a.u.s->len) == 0;
    case JV_LIST:
      if (a.u.l->n != b.u.l->n) return false;
      for (size_t i = 0; i < a.u.l->n; i++)
        if (!equal_depth(a.u.l->items[i], b.u.l->items[i], depth + 1)) return false;
      return true;
    case JV_DICT:
      if (a.u.d->n != b.u.d->n) return false;
      for (size_t i = 0; i < a.u.d->n; i++) {
        const jv *o = jdict_getv(b.u.d, a.u.d->keys[i]);
        if (!o || !equal_depth(a.u.d->vals[i], *o, depth + 1)) return false;
      }
      return true;
    default: return a.u.d == b.u.d;
  }
}

bool jv_equal(jv a, jv b) { return equal_depth(a, b, 0); }

const char *jv_type_name(jv v) {
  switch (v.kind) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.u.l->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    default: return "function";
  }
}

const char *jv_object_repr(jv v) {
  switch (v.kind) {
    case JV_NONE: return "None";
    case JV_BOOL: return "bool object";
    case JV_INT: return "int object";
    case JV_FLOAT: return "float object";
    case JV_STR: return "str object";
    case JV_LIST: return v.u.l->tuple ? "tuple object" : "list object";
    case JV_DICT: return "dict object";
    case JV_NS: return "jinja2.utils.Namespace object";
    default: return "function object";
  }
}
