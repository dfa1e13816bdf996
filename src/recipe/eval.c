/* AST evaluation with Python/Jinja2 semantics (default Undefined, immutable
 * sandbox: containers are never mutated, only namespaces). Every runaway
 * form a hostile template can take is bounded: macro recursion by depth,
 * loops and expressions by a step budget, output by a byte limit, all
 * allocations by the arena's budget. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "recipe/jinja.h"

jv jerr(jctx *c, di_code code, const char *fmt, ...) {
  if (!c->err) {
    char m[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    if (c->line > 0)
      di_errorf(c->st, code, "%s (template line %d:%d)", m, c->line, c->col);
    else
      di_errorf(c->st, code, "%s", m);
  }
  c->err = true;
  return jv_undef("error");
}

jv jundef_fail(jctx *c, jv u) {
  return jerr(c, DI_ERR_INVALID, "UndefinedError: %s", u.u.undef ? u.u.undef : "undefined value");
}

static char *fmt_arena(jctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *fmt_arena(jctx *c, const char *fmt, ...) {
  char m[320];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  if (k < 0) k = 0;
  if ((size_t)k >= sizeof m) k = sizeof m - 1;
  char *d = jarena_alloc(c->a, (size_t)k + 1);
  if (!d) return "out of memory";
  memcpy(d, m, (size_t)k);
  return d;
}

static bool step(jctx *c) {
  if (c->err) return false;
  if (c->a->failed) {
    jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget (%zu bytes)", c->a->limit);
    return false;
  }
  if (++c->steps > c->max_steps) {
    jerr(c, DI_ERR_RANGE, "template render exceeded %llu evaluation steps",
         (unsigned long long)c->max_steps);
    return false;
  }
  return true;
}

static void locate(jctx *c, const jnode *n) {
  c->line = n->line;
  c->col = n->col;
}

/* ---------------------------------------------------------------- scopes */

static jframe *frame_new(jctx *c, jframe *parent) {
  jframe *f = jarena_alloc(c->a, sizeof *f);
  if (!f || !(f->vars = jdict_new(c->a, 4))) {
    jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget");
    return NULL;
  }
  f->parent = parent;
  return f;
}

static const jv *lookup(jframe *f, const char *name) {
  size_t n = strlen(name);
  for (; f; f = f->parent) {
    const jv *v = jdict_get(f->vars, name, n);
    if (v) return v;
  }
  return NULL;
}

static void assign(jctx *c, jframe *f, const char *name, jv v) {
  if (!jdict_set(c->a, f->vars, jv_cstr(c->a, name), v)) jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget");
}

static void bind_target(jctx *c, jframe *f, const jnode *target, jv v) {
  if (target->kind == N_NAME) {
    assign(c, f, target->name, v);
    return;
  }
  jv l = jv_iter_list(c, v);
  if (c->err) return;
  if (l.u.l->n != target->n) {
    jerr(c, DI_ERR_INVALID, "ValueError: %s values to unpack (expected %zu, got %zu)",
         l.u.l->n > target->n ? "too many" : "not enough", target->n, l.u.l->n);
    return;
  }
  for (size_t i = 0; i < target->n; i++) bind_target(c, f, target->kids[i], l.u.l->items[i]);
}

/* ---------------------------------------------------------------- expressions */

static jv eval(jctx *c, jframe *f, const jnode *n);
static void exec(jctx *c, jframe *f, const jnode *n);

static jv eval_list(jctx *c, jframe *f, const jnode *n, bool tuple) {
  jlist *l = jlist_new(c->a, n->n);
  if (!l) return jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget");
  l->tuple = tuple;
  for (size_t i = 0; i < n->n && !c->err; i++) l->items[i] = eval(c, f, n->kids[i]);
  return jv_list(l);
}

static bool is_int(jv v) { return v.kind == JV_INT || v.kind == JV_BOOL; }
static int64_t as_int(jv v) { return v.kind == JV_INT ? v.u.i : v.kind == JV_BOOL ? v.u.b : 0; }
static bool is_num(jv v) { return is_int(v) || v.kind == JV_FLOAT; }
static double as_f(jv v) { return v.kind == JV_FLOAT ? v.u.f : (double)as_int(v); }

static jv repeat(jctx *c, jv s, int64_t k) {
  if (k <= 0) return s.kind == JV_STR ? jv_cstr(c->a, "") : jv_list(jlist_new(c->a, 0));
  if (s.kind == JV_STR) {
    if (s.u.s->len && (uint64_t)k > c->a->limit / s.u.s->len)
      return jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget (string repetition)");
    jbuf b;
    jbuf_init(&b, c->a, (size_t)-1);
    for (int64_t i = 0; i < k && b.ok; i++) jbuf_putstr(&b, s.u.s);
    return jbuf_value(&b);
  }
  size_t n = s.u.l->n;
  if (n && (uint64_t)k > c->a->limit / (n * sizeof(jv)))
    return jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget (list repetition)");
  jlist *l = jlist_new(c->a, n * (size_t)k);
  if (!l) return jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget");
  for (int64_t i = 0; i < k; i++) memcpy(l->items + (size_t)i * n, s.u.l->items, n * sizeof(jv));
  return jv_list(l);
}

static jv binop(jctx *c, const char *op, jv a, jv b) {
  if (a.kind == JV_UNDEF) return jundef_fail(c, a);
  if (b.kind == JV_UNDEF) return jundef_fail(c, b);
  char o = op[0];
  bool dbl = op[1] != 0;
  if (is_num(a) && is_num(b)) {
    if (o == '*' && dbl) { /* ** */
      if (is_int(a) && is_int(b) && as_int(b) >= 0) {
        int64_t r = 1, x = as_int(a);
        for (int64_t e = as_int(b); e > 0; e--)
          if (__builtin_mul_overflow(r, x, &r)) return jerr(c, DI_ERR_RANGE, "OverflowError: integer too large");
        return jv_int(r);
      }
      return jv_float(pow(as_f(a), as_f(b)));
    }
    if (is_int(a) && is_int(b) && (o != '/' || dbl)) {
      int64_t x = as_int(a), y = as_int(b), r = 0;
      bool ovf = false;
      switch (o) {
        case '+': ovf = __builtin_add_overflow(x, y, &r); break;
        case '-': ovf = __builtin_sub_overflow(x, y, &r); break;
        case '*': ovf = __builtin_mul_overflow(x, y, &r); break;
        case '%':
          if (!y) return jerr(c, DI_ERR_INVALID, "ZeroDivisionError: integer modulo by zero");
          if (y == -1) return jv_int(0);
          r = x % y;
          if (r && ((r < 0) != (y < 0))) r += y;
          break;
      }
      if (o == '/' && dbl) {
        if (!y) return jerr(c, DI_ERR_INVALID, "ZeroDivisionError: integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) return jerr(c, DI_ERR_RANGE, "OverflowError: integer too large");
        r = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) r--;
      }
      if (ovf) return jerr(c, DI_ERR_RANGE, "OverflowError: integer too large");
      return jv_int(r);
    }
    double x = as_f(a), y = as_f(b);
    switch (o) {
      case '+': return jv_float(x + y);
      case '-': return jv_float(x - y);
      case '*': return jv_float(x * y);
      case '/':
        if (y == 0) return jerr(c, DI_ERR_INVALID, "ZeroDivisionError: division by zero");
        return dbl ? jv_float(floor(x / y)) : jv_float(x / y);
      case '%': {
        if (y == 0) return jerr(c, DI_ERR_INVALID, "ZeroDivisionError: float modulo");
        double r = fmod(x, y);
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return jv_float(r);
      }
    }
  }
  if (o == '+' && a.kind == JV_STR && b.kind == JV_STR) return jv_concat(c, a, b);
  if (o == '+' && a.kind == JV_LIST && b.kind == JV_LIST) {
    jlist *l = jlist_new(c->a, a.u.l->n + b.u.l->n);
    if (!l) return jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget");
    l->tuple = a.u.l->tuple;
    if (a.u.l->n) memcpy(l->items, a.u.l->items, a.u.l->n * sizeof(jv));
    if (b.u.l->n) memcpy(l->items + a.u.l->n, b.u.l->items, b.u.l->n * sizeof(jv));
    return jv_list(l);
  }
  if (o == '*' && !dbl && (a.kind == JV_STR || a.kind == JV_LIST) && is_int(b)) return repeat(c, a, as_int(b));
  if (o == '*' && !dbl && (b.kind == JV_STR || b.kind == JV_LIST) && is_int(a)) return repeat(c, b, as_int(a));
  if (o == '%' && a.kind == JV_STR) {
    /* printf-style formatting: only %s and %% (what chat templates use) */
    jv args = b.kind == JV_LIST && b.u.l->tuple ? b : jv_undef(NULL);
    size_t ai = 0;
    jbuf out;
    jbuf_init(&out, c->a, (size_t)-1);
    const jstr *s = a.u.s;
    for (size_t i = 0; i < s->len; i++) {
      if (s->s[i] != '%') { jbuf_putstr_range(&out, s, i, i + 1); continue; }
      if (i + 1 < s->len && s->s[i + 1] == '%') { jbuf_puts(&out, "%"); i++; continue; }
      if (i + 1 < s->len && (s->s[i + 1] == 's' || s->s[i + 1] == 'd')) {
        jv x = args.kind == JV_LIST ? (ai < args.u.l->n ? args.u.l->items[ai] : jv_undef(NULL)) : (ai == 0 ? b : jv_undef(NULL));
        ai++;
        if (x.kind == JV_UNDEF && !x.u.undef)
          return jerr(c, DI_ERR_INVALID, "TypeError: not enough arguments for format string");
        jv_to_str(c, &out, x);
        i++;
        continue;
      }
      return jerr(c, DI_ERR_UNSUPPORTED, "unsupported format directive in '%%' formatting");
    }
    return jbuf_value(&out);
  }
  if (o == '+' && (a.kind == JV_STR || a.kind == JV_LIST))
    return jerr(c, DI_ERR_INVALID, "TypeError: can only concatenate %s (not \"%s\") to %s", jv_type_name(a),
                jv_type_name(b), jv_type_name(a));
  return jerr(c, DI_ERR_INVALID, "TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op,
              jv_type_name(a), jv_type_name(b));
}

static jv compare(jctx *c, const char *op, jv a, jv b) {
  if (!strcmp(op, "==")) return jv_bool(jv_equal(a, b));
  if (!strcmp(op, "!=")) return jv_bool(!jv_equal(a, b));
  if (!strcmp(op, "in")) return jv_bool(jv_contains(c, b, a));
  if (!strcmp(op, "notin")) return jv_bool(!jv_contains(c, b, a));
  if (a.kind == JV_UNDEF) return jundef_fail(c, a);
  if (b.kind == JV_UNDEF) return jundef_fail(c, b);
  bool ok = true;
  int r = jv_compare(c, a, b, &ok);
  if (!ok) {
    if (!c->err)
      jerr(c, DI_ERR_INVALID, "TypeError: '%s' not supported between instances of '%s' and '%s'", op,
           jv_type_name(a), jv_type_name(b));
    return jv_undef(NULL);
  }
  if (!strcmp(op, "<")) return jv_bool(r < 0);
  if (!strcmp(op, "<=")) return jv_bool(r <= 0);
  if (!strcmp(op, ">")) return jv_bool(r > 0);
  return jv_bool(r >= 0);
}

static bool collect_args(jctx *c, jframe *f, const jnode *n, size_t from, jargs *a) {
  size_t np = 0, nk = 0;
  for (size_t i = from; i < n->n; i++) {
    if (n->kids[i]->kind == N_KWARG) nk++;
    else np++;
  }
  a->pos = jarena_alloc(c->a, (np + 1) * sizeof(jv));
  a->kwv = jarena_alloc(c->a, (nk + 1) * sizeof(jv));
  a->kwn = jarena_alloc(c->a, (nk + 1) * sizeof(char *));
  if (!a->pos || !a->kwv || !a->kwn) {
    jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget");
    return false;
  }
  a->n = a->nkw = 0;
  for (size_t i = from; i < n->n && !c->err; i++) {
    const jnode *k = n->kids[i];
    if (k->kind == N_KWARG) {
      a->kwn[a->nkw] = k->name;
      a->kwv[a->nkw++] = eval(c, f, k->kids[0]);
    } else {
      a->pos[a->n++] = eval(c, f, k);
    }
  }
  return !c->err;
}

static jv call_macro(jctx *c, const jnode *m, jargs *a) {
  if (c->depth >= c->max_depth)
    return jerr(c, DI_ERR_RANGE, "template recursion deeper than %d macro calls", c->max_depth);
  size_t nparams = m->n - 1;
  if (a->n > nparams)
    return jerr(c, DI_ERR_INVALID, "TypeError: macro '%s' takes not more than %zu argument(s)", m->name, nparams);
  jframe *mf = frame_new(c, c->globals);
  if (!mf) return jv_undef(NULL);
  for (size_t i = 0; i < nparams && !c->err; i++) {
    const jnode *p = m->kids[i + 1];
    jv v = jv_undef(NULL);
    bool have = false;
    if (i < a->n) {
      v = a->pos[i];
      have = true;
    }
    for (size_t k = 0; k < a->nkw; k++)
      if (!strcmp(a->kwn[k], p->name)) {
        v = a->kwv[k];
        have = true;
      }
    if (!have) v = p->kind == N_KWARG ? eval(c, mf, p->kids[0]) : jv_undef(fmt_arena(c, "'%s' is undefined", p->name));
    assign(c, mf, p->name, v);
  }
  for (size_t k = 0; k < a->nkw; k++) {
    bool known = false;
    for (size_t i = 0; i < nparams; i++) known |= !strcmp(a->kwn[k], m->kids[i + 1]->name);
    if (!known) return jerr(c, DI_ERR_INVALID, "TypeError: macro '%s' has no argument named '%s'", m->name, a->kwn[k]);
  }
  if (c->err) return jv_undef(NULL);
  jbuf saved = c->out;
  jbuf_init(&c->out, c->a, saved.limit);
  c->depth++;
  exec(c, mf, m->kids[0]);
  c->depth--;
  jv r = jbuf_value(&c->out);
  bool ok = c->out.ok;
  c->out = saved;
  if (!ok && !c->err) return jerr(c, DI_ERR_RANGE, "template output exceeds %zu bytes", saved.limit);
  return r;
}

static jv eval_call(jctx *c, jframe *f, const jnode *n) {
  jv fn = eval(c, f, n->kids[0]);
  if (c->err) return fn;
  jargs a;
  if (!collect_args(c, f, n, 1, &a)) return jv_undef(NULL);
  locate(c, n);
  if (fn.kind == JV_UNDEF) return jundef_fail(c, fn);
  if (fn.kind != JV_FUNC) return jerr(c, DI_ERR_INVALID, "TypeError: '%s' object is not callable", jv_type_name(fn));
  switch (fn.u.fn->kind) {
    case JF_MACRO: return call_macro(c, fn.u.fn->macro, &a);
    case JF_METHOD: return jbuiltin_method(c, *fn.u.fn->self, fn.u.fn->name, &a);
    default: return jbuiltin_call(c, fn.u.fn->name, &a);
  }
}

static jv eval_name(jctx *c, jframe *f, const jnode *n) {
  const jv *v = lookup(f, n->name);
  if (v) return *v;
  if (jbuiltin_is_global(n->name)) {
    jfunc *fn = jarena_alloc(c->a, sizeof *fn);
    if (!fn) return jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget");
    fn->kind = JF_BUILTIN;
    fn->name = n->name;
    jv r = {.kind = JV_FUNC};
    r.u.fn = fn;
    return r;
  }
  return jv_undef(fmt_arena(c, "'%s' is undefined", n->name));
}

static int64_t slice_bound(jv v, int64_t len, int64_t dflt, bool *ok, bool upper, int64_t stepv) {
  if (v.kind == JV_NONE || (v.kind == JV_UNDEF && !v.u.undef)) return dflt;
  if (!is_int(v)) { *ok = false; return 0; }
  int64_t i = as_int(v);
  if (i < 0) {
    i += len;
    if (i < 0) i = stepv < 0 ? -1 : 0;
  } else if (i >= len) {
    i = stepv < 0 ? len - 1 : len;
  }
  (void)upper;
  return i;
}

static jv eval_slice(jctx *c, jframe *f, jv obj, const jnode *s) {
  jv parts[3];
  for (int i = 0; i < 3; i++) parts[i] = s->kids[i] ? eval(c, f, s->kids[i]) : jv_undef(NULL);
  if (c->err) return jv_undef(NULL);
  if (obj.kind == JV_UNDEF) return jundef_fail(c, obj);
  int64_t stepv = parts[2].kind == JV_UNDEF || parts[2].kind == JV_NONE ? 1 : as_int(parts[2]);
  if ((parts[2].kind != JV_UNDEF && parts[2].kind != JV_NONE && !is_int(parts[2])) || stepv == 0)
    return jerr(c, DI_ERR_INVALID, "ValueError: slice step must be a non-zero integer");
  jv items = obj;
  if (obj.kind == JV_STR) items = jv_iter_list(c, obj); /* by code point, as Python */
  if (items.kind != JV_LIST)
    return jerr(c, DI_ERR_INVALID, "TypeError: '%s' object is not subscriptable", jv_type_name(obj));
  int64_t len = (int64_t)items.u.l->n;
  bool ok = true;
  int64_t lo = slice_bound(parts[0], len, stepv < 0 ? len - 1 : 0, &ok, false, stepv);
  int64_t hi = slice_bound(parts[1], len, stepv < 0 ? -1 : len, &ok, true, stepv);
  if (!ok) return jerr(c, DI_ERR_INVALID, "TypeError: slice indices must be integers or None");
  size_t cnt = 0;
  if (stepv > 0 && hi > lo) cnt = (size_t)((hi - lo + stepv - 1) / stepv);
  if (stepv < 0 && lo > hi) cnt = (size_t)((lo - hi + (-stepv) - 1) / (-stepv));
  if (obj.kind == JV_STR) {
    jbuf b;
    jbuf_init(&b, c->a, (size_t)-1);
    for (size_t k = 0; k < cnt; k++) jbuf_putstr(&b, items.u.l->items[lo + (int64_t)k * stepv].u.s);
    return jbuf_value(&b);
  }
  jlist *l = jlist_new(c->a, cnt);
  if (!l) return jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget");
  l->tuple = obj.u.l->tuple;
  for (size_t k = 0; k < cnt; k++) l->items[k] = items.u.l->items[lo + (int64_t)k * stepv];
  return jv_list(l);
}

static jv eval(jctx *c, jframe *f, const jnode *n) {
  if (!step(c)) return jv_undef(NULL);
  locate(c, n);
  switch (n->kind) {
    case N_LITERAL: return n->lit;
    case N_NAME: return eval_name(c, f, n);
    case N_LIST: return eval_list(c, f, n, false);
    case N_TUPLE: return eval_list(c, f, n, true);
    case N_DICT: {
      jdict *d = jdict_new(c->a, n->n / 2 + 1);
      if (!d) return jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget");
      for (size_t i = 0; i + 1 < n->n && !c->err; i += 2) {
        jv k = eval(c, f, n->kids[i]), v = eval(c, f, n->kids[i + 1]);
        if (!jdict_set(c->a, d, k, v)) return jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget");
      }
      jv r = {.kind = JV_DICT};
      r.u.d = d;
      return r;
    }
    case N_ATTR: {
      jv o = eval(c, f, n->kids[0]);
      if (c->err) return o;
      locate(c, n);
      return jv_getattr(c, o, n->name, strlen(n->name));
    }
    case N_ITEM: {
      jv o = eval(c, f, n->kids[0]);
      if (c->err) return o;
      if (n->kids[1]->kind == N_SLICE) return eval_slice(c, f, o, n->kids[1]);
      jv k = eval(c, f, n->kids[1]);
      if (c->err) return k;
      locate(c, n);
      return jv_getitem(c, o, k);
    }
    case N_CALL: return eval_call(c, f, n);
    case N_FILTER: {
      jv v = eval(c, f, n->kids[0]);
      jargs a;
      if (c->err || !collect_args(c, f, n, 1, &a)) return jv_undef(NULL);
      locate(c, n);
      return jbuiltin_filter(c, n->name, v, &a);
    }
    case N_TEST: {
      jv v = eval(c, f, n->kids[0]);
      jargs a;
      if (c->err || !collect_args(c, f, n, 1, &a)) return jv_undef(NULL);
      locate(c, n);
      bool r = false;
      if (!jbuiltin_test(c, n->name, v, &a, &r)) return jv_undef(NULL);
      return jv_bool(n->flag ? !r : r);
    }
    case N_NOT: {
      jv v = eval(c, f, n->kids[0]);
      return jv_bool(!jv_truthy(v));
    }
    case N_NEG: case N_POS: {
      jv v = eval(c, f, n->kids[0]);
      if (c->err) return v;
      if (v.kind == JV_UNDEF) return jundef_fail(c, v);
      if (!is_num(v)) return jerr(c, DI_ERR_INVALID, "TypeError: bad operand type for unary %c: '%s'",
                                  n->kind == N_NEG ? '-' : '+', jv_type_name(v));
      if (n->kind == N_POS) return v.kind == JV_BOOL ? jv_int(v.u.b) : v;
      if (v.kind == JV_FLOAT) return jv_float(-v.u.f);
      if (as_int(v) == INT64_MIN) return jerr(c, DI_ERR_RANGE, "OverflowError: integer too large");
      return jv_int(-as_int(v));
    }
    case N_AND: {
      jv a = eval(c, f, n->kids[0]);
      if (c->err || !jv_truthy(a)) return a;
      return eval(c, f, n->kids[1]);
    }
    case N_OR: {
      jv a = eval(c, f, n->kids[0]);
      if (c->err || jv_truthy(a)) return a;
      return eval(c, f, n->kids[1]);
    }
    case N_BINOP: {
      jv a = eval(c, f, n->kids[0]);
      jv b = c->err ? a : eval(c, f, n->kids[1]);
      if (c->err) return jv_undef(NULL);
      locate(c, n);
      return binop(c, n->name, a, b);
    }
    case N_CONCAT: {
      jv a = eval(c, f, n->kids[0]);
      jv b = c->err ? a : eval(c, f, n->kids[1]);
      if (c->err) return jv_undef(NULL);
      return jv_concat(c, jv_stringify(c, a), jv_stringify(c, b));
    }
    case N_COMPARE: {
      jv a = eval(c, f, n->kids[0]);
      jv r = jv_bool(true);
      for (size_t i = 1; i < n->n && !c->err; i++) {
        jv b = eval(c, f, n->kids[i]);
        if (c->err) break;
        locate(c, n);
        r = compare(c, n->ops[i - 1], a, b);
        if (!jv_truthy(r)) return r;
        a = b;
      }
      return r;
    }
    case N_COND: {
      jv cond = eval(c, f, n->kids[1]);
      if (c->err) return cond;
      if (jv_truthy(cond)) return eval(c, f, n->kids[0]);
      if (n->kids[2]) return eval(c, f, n->kids[2]);
      return jv_undef("the inline if-expression evaluated to false and no else section was defined");
    }
    default: return jerr(c, DI_ERR_INTERNAL, "internal: cannot evaluate node kind %d", n->kind);
  }
}

/* ---------------------------------------------------------------- statements */

static jdict *loop_dict(jctx *c, jlist *items, size_t i) {
  jdict *d = jdict_new(c->a, 12);
  if (!d) return NULL;
  size_t n = items->n;
  struct { const char *k; jv v; } kv[] = {
      {"index", jv_int((int64_t)i + 1)}, {"index0", jv_int((int64_t)i)},
      {"revindex", jv_int((int64_t)(n - i))}, {"revindex0", jv_int((int64_t)(n - i - 1))},
      {"first", jv_bool(i == 0)}, {"last", jv_bool(i + 1 == n)}, {"length", jv_int((int64_t)n)},
      {"depth", jv_int(1)}, {"depth0", jv_int(0)},
      {"previtem", i ? items->items[i - 1] : jv_undef("there is no previous item")},
      {"nextitem", i + 1 < n ? items->items[i + 1] : jv_undef("there is no next item")},
  };
  for (size_t k = 0; k < sizeof kv / sizeof kv[0]; k++)
    if (!jdict_append(c->a, d, jv_cstr(c->a, kv[k].k), kv[k].v)) return NULL;
  /* loop.cycle(a, b, ...): a method bound to this iteration's index */
  jfunc *fn = jarena_alloc(c->a, sizeof *fn);
  jv *self = jarena_alloc(c->a, sizeof *self);
  if (!fn || !self) return NULL;
  *self = jv_int((int64_t)i);
  fn->kind = JF_METHOD;
  fn->name = "cycle";
  fn->self = self;
  jv cyc = {.kind = JV_FUNC};
  cyc.u.fn = fn;
  if (!jdict_append(c->a, d, jv_cstr(c->a, "cycle"), cyc)) return NULL;
  return d;
}

static void exec_for(jctx *c, jframe *f, const jnode *n) {
  jv it = eval(c, f, n->kids[1]);
  if (c->err) return;
  locate(c, n);
  jv lv = jv_iter_list(c, it);
  if (c->err) return;
  jlist *items = lv.u.l;
  jframe *lf = frame_new(c, f);
  if (!lf) return;
  if (n->kids[2]) { /* {% for x in xs if cond %}: loop.* counts only the kept items */
    jlist *kept = jlist_new(c->a, items->n);
    if (!kept) { jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget"); return; }
    kept->n = 0;
    for (size_t i = 0; i < items->n && step(c); i++) {
      bind_target(c, lf, n->kids[0], items->items[i]);
      if (jv_truthy(eval(c, lf, n->kids[2])) && !c->err) kept->items[kept->n++] = items->items[i];
    }
    items = kept;
  }
  for (size_t i = 0; i < items->n && !c->err; i++) {
    if (!step(c)) return;
    /* Jinja gives every iteration fresh locals: a `set` in one iteration is
     * not seen by the next (reads fall through to the enclosing scope). */
    if (i && !(lf = frame_new(c, f))) return;
    bind_target(c, lf, n->kids[0], items->items[i]);
    jdict *ld = loop_dict(c, items, i);
    if (!ld) { jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget"); return; }
    jv lvv = {.kind = JV_DICT};
    lvv.u.d = ld;
    assign(c, lf, "loop", lvv);
    exec(c, lf, n->kids[3]);
    if (c->loop_ctl == 1) { c->loop_ctl = 0; break; }
    c->loop_ctl = 0;
  }
  if (!items->n && n->kids[4] && !c->err) exec(c, f, n->kids[4]);
}

static void exec(jctx *c, jframe *f, const jnode *n) {
  if (!step(c)) return;
  switch (n->kind) {
    case N_BODY:
      for (size_t i = 0; i < n->n && !c->err && !c->loop_ctl; i++) exec(c, f, n->kids[i]);
      return;
    case N_TEXT:
      jbuf_putstr(&c->out, n->lit.u.s);
      break;
    case N_OUTPUT: {
      jv v = eval(c, f, n->kids[0]);
      if (c->err) return;
      jv_to_str(c, &c->out, v);
      break;
    }
    case N_IF:
      for (const jnode *b = n; b && !c->err;) {
        if (b->kind != N_IF) { exec(c, f, b); return; }
        jv cond = eval(c, f, b->kids[0]);
        if (c->err) return;
        if (jv_truthy(cond)) { exec(c, f, b->kids[1]); return; }
        b = b->kids[2];
      }
      return;
    case N_FOR: exec_for(c, f, n); return;
    case N_SET: {
      jv v = eval(c, f, n->kids[1]);
      if (!c->err) bind_target(c, f, n->kids[0], v);
      return;
    }
    case N_SET_ATTR: {
      const jnode *t = n->kids[0];
      const jv *ns = lookup(f, t->kids[0]->name);
      jv v = eval(c, f, n->kids[1]);
      if (c->err) return;
      locate(c, n);
      if (!ns || ns->kind != JV_NS) {
        jerr(c, DI_ERR_INVALID, "TemplateRuntimeError: cannot assign attribute on non-namespace object");
        return;
      }
      if (!jdict_set(c->a, ns->u.d, jv_cstr(c->a, t->name), v)) jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget");
      return;
    }
    case N_SET_BLOCK: case N_FILTER_BLOCK: {
      jbuf saved = c->out;
      jbuf_init(&c->out, c->a, saved.limit);
      const jnode *body = n->kind == N_SET_BLOCK ? n->kids[1] : n->kids[0];
      const jnode *filt = n->kind == N_SET_BLOCK ? (n->n > 2 ? n->kids[2] : NULL) : n->kids[1];
      exec(c, f, body);
      jv v = jbuf_value(&c->out);
      c->out = saved;
      if (c->err) return;
      for (const jnode *fl = filt; fl; ) {
        /* a chain of filters applied to the captured text: innermost first */
        const jnode *chain[32];
        size_t k = 0;
        for (const jnode *x = fl; x && x->kind == N_FILTER && k < 32; x = x->kids[0]) chain[k++] = x;
        while (k-- && !c->err) {
          jargs a;
          if (!collect_args(c, f, chain[k], 1, &a)) return;
          v = jbuiltin_filter(c, chain[k]->name, v, &a);
        }
        break;
      }
      if (c->err) return;
      if (n->kind == N_SET_BLOCK) assign(c, f, n->kids[0]->name, v);
      else jv_to_str(c, &c->out, v);
      return;
    }
    case N_MACRO: {
      jfunc *fn = jarena_alloc(c->a, sizeof *fn);
      if (!fn) { jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget"); return; }
      fn->kind = JF_MACRO;
      fn->name = n->name;
      fn->macro = n;
      jv v = {.kind = JV_FUNC};
      v.u.fn = fn;
      assign(c, f, n->name, v);
      return;
    }
    case N_BREAK: c->loop_ctl = 1; return;
    case N_CONTINUE: c->loop_ctl = 2; return;
    case N_WITH: {
      jframe *wf = frame_new(c, f);
      if (!wf) return;
      for (size_t i = 1; i < n->n && !c->err; i++) {
        jv v = eval(c, f, n->kids[i]->kids[1]);
        if (!c->err) bind_target(c, wf, n->kids[i]->kids[0], v);
      }
      if (!c->err) exec(c, wf, n->kids[0]);
      return;
    }
    case N_GENERATION: exec(c, f, n->kids[0]); return;
    default: jerr(c, DI_ERR_INTERNAL, "internal: cannot execute node kind %d", n->kind); return;
  }
  if (!c->out.ok && !c->err) jerr(c, DI_ERR_RANGE, "template output exceeds %zu bytes", c->out.limit);
}

di_code jinja_render(jctx *c, const jnode *root) {
  exec(c, c->globals, root);
  if (!c->err && !c->out.ok) jerr(c, DI_ERR_RANGE, "template output exceeds %zu bytes", c->out.limit);
  if (!c->err && c->a->failed) jerr(c, DI_ERR_NOMEM, "template render exceeded its memory budget (%zu bytes)", c->a->limit);
  return c->err ? (c->st->code ? c->st->code : DI_ERR_INVALID) : DI_OK;
}
