/* Tokens -> AST, following jinja2.parser's grammar and precedence (filters
 * and tests bind tighter than arithmetic; `a if b else c` is the loosest).
 * Anything outside the supported subset fails here, at load, with its
 * line:column, never at render time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/jinja.h"

#define MAX_NEST 200

typedef struct parser {
  jarena *a;
  const jtok *t;
  size_t n, pos;
  di_status *st;
  bool err;
  int depth;
  int loops;
  int macros;
} parser;

typedef struct nvec {
  jnode **v;
  size_t n, cap;
} nvec;

static const jtok *cur(parser *P) { return &P->t[P->pos < P->n ? P->pos : P->n - 1]; }
static const jtok *peek(parser *P, size_t k) {
  return &P->t[P->pos + k < P->n ? P->pos + k : P->n - 1];
}

static jnode *fail(parser *P, const jtok *t, di_code code, const char *fmt, const char *arg) {
  if (!P->err) {
    char m[256];
    snprintf(m, sizeof m, fmt, arg ? arg : "");
    di_errorf(P->st, code, "template line %d:%d: %s", t->line, t->col, m);
  }
  P->err = true;
  return NULL;
}

static bool is_op(const jtok *t, const char *op) {
  return t->kind == TK_OP && t->len == strlen(op) && memcmp(t->s, op, t->len) == 0;
}
static bool is_name(const jtok *t, const char *nm) {
  return t->kind == TK_NAME && t->len == strlen(nm) && memcmp(t->s, nm, t->len) == 0;
}

static const char *tok_desc(const jtok *t) {
  switch (t->kind) {
    case TK_EOF: return "end of template";
    case TK_TEXT: return "template text";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "'%}'";
    case TK_STRING: return "a string";
    case TK_INT: case TK_FLOAT: return "a number";
    default: return t->s;
  }
}

static bool expect_op(parser *P, const char *op) {
  if (is_op(cur(P), op)) { P->pos++; return true; }
  char m[128];
  snprintf(m, sizeof m, "expected '%s', got %s", op, tok_desc(cur(P)));
  fail(P, cur(P), DI_ERR_FORMAT, "%s", m);
  return false;
}

static bool expect_kind(parser *P, int kind, const char *what) {
  if (cur(P)->kind == kind) { P->pos++; return true; }
  char m[160];
  snprintf(m, sizeof m, "expected %s, got %s", what, tok_desc(cur(P)));
  fail(P, cur(P), DI_ERR_FORMAT, "%s", m);
  return false;
}

static jnode *mk(parser *P, int kind, const jtok *t) {
  jnode *n = jarena_alloc(P->a, sizeof *n);
  if (!n) return fail(P, t, DI_ERR_NOMEM, "%s", "out of memory");
  n->kind = (uint8_t)kind;
  n->line = t->line;
  n->col = t->col;
  return n;
}

static bool vpush(parser *P, nvec *v, jnode *x) {
  if (!x) return false;
  if (v->n == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 4;
    jnode **nv = jarena_alloc(P->a, cap * sizeof *nv);
    if (!nv) { fail(P, cur(P), DI_ERR_NOMEM, "%s", "out of memory"); return false; }
    if (v->n) memcpy(nv, v->v, v->n * sizeof *nv);
    v->v = nv;
    v->cap = cap;
  }
  v->v[v->n++] = x;
  return true;
}

static jnode *with_kids(jnode *n, nvec *v) {
  if (n) {
    n->kids = v->v;
    n->n = v->n;
  }
  return n;
}

static jnode *node2(parser *P, int kind, const jtok *t, jnode *a, jnode *b) {
  if (!a) return NULL;
  jnode *n = mk(P, kind, t);
  if (!n) return NULL;
  n->kids = jarena_alloc(P->a, 2 * sizeof(jnode *));
  if (!n->kids) return fail(P, t, DI_ERR_NOMEM, "%s", "out of memory");
  n->kids[0] = a;
  n->kids[1] = b;
  n->n = b ? 2 : 1;
  return n;
}

static const char *dup_tok(parser *P, const jtok *t) { return t->s; }

static jnode *parse_expr(parser *P);
static jnode *parse_or(parser *P);
static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_primary(parser *P);
static jnode *parse_postfix(parser *P, jnode *n);

static bool enter(parser *P) {
  if (++P->depth > MAX_NEST) {
    fail(P, cur(P), DI_ERR_RANGE, "%s", "expression or block nesting deeper than 200");
    return false;
  }
  return true;
}
#define LEAVE(P, x) do { P->depth--; return (x); } while (0)

/* ---------------------------------------------------------------- expressions */

static jnode *parse_tuple_or_expr(parser *P, bool condexpr) {
  const jtok *t0 = cur(P);
  jnode *first = condexpr ? parse_expr(P) : parse_or(P);
  if (!first || !is_op(cur(P), ",")) return first;
  nvec v = {0};
  vpush(P, &v, first);
  while (is_op(cur(P), ",")) {
    P->pos++;
    const jtok *t = cur(P);
    if (t->kind == TK_BLOCK_END || t->kind == TK_VAR_END || is_op(t, ")") || is_name(t, "if")) break;
    if (!vpush(P, &v, condexpr ? parse_expr(P) : parse_or(P))) return NULL;
  }
  return with_kids(mk(P, N_TUPLE, t0), &v);
}

static bool parse_call_args(parser *P, nvec *args) {
  /* at '(' */
  P->pos++;
  size_t first = args->n;
  while (!is_op(cur(P), ")")) {
    if (cur(P)->kind == TK_EOF || cur(P)->kind == TK_VAR_END || cur(P)->kind == TK_BLOCK_END) {
      fail(P, cur(P), DI_ERR_FORMAT, "%s", "unclosed '(' in call");
      return false;
    }
    if (args->n > first) {
      if (!expect_op(P, ",")) return false;
      if (is_op(cur(P), ")")) break;
    }
    const jtok *t = cur(P);
    if (is_op(t, "*") || is_op(t, "**")) {
      fail(P, t, DI_ERR_UNSUPPORTED, "%s", "unsupported: *args/**kwargs in a call");
      return false;
    }
    if (t->kind == TK_NAME && is_op(peek(P, 1), "=")) {
      P->pos += 2;
      jnode *kw = mk(P, N_KWARG, t);
      jnode *val = parse_expr(P);
      if (!kw || !val) return false;
      kw->name = dup_tok(P, t);
      kw->kids = jarena_alloc(P->a, sizeof(jnode *));
      if (!kw->kids) return false;
      kw->kids[0] = val;
      kw->n = 1;
      if (!vpush(P, args, kw)) return false;
    } else {
      if (!vpush(P, args, parse_expr(P))) return false;
    }
  }
  P->pos++;
  return true;
}

static jnode *parse_filter_expr(parser *P, jnode *node) {
  while (node && !P->err) {
    const jtok *t = cur(P);
    if (is_op(t, "|")) {
      P->pos++;
      const jtok *nt = cur(P);
      if (nt->kind != TK_NAME) return fail(P, nt, DI_ERR_FORMAT, "%s", "expected a filter name after '|'");
      P->pos++;
      if (!jbuiltin_has_filter(nt->s))
        return fail(P, nt, DI_ERR_UNSUPPORTED, "unsupported filter '%s'", nt->s);
      nvec v = {0};
      vpush(P, &v, node);
      if (is_op(cur(P), "(") && !parse_call_args(P, &v)) return NULL;
      node = with_kids(mk(P, N_FILTER, nt), &v);
      if (node) node->name = nt->s;
    } else if (is_name(t, "is")) {
      P->pos++;
      bool neg = false;
      if (is_name(cur(P), "not")) { neg = true; P->pos++; }
      const jtok *nt = cur(P);
      if (nt->kind != TK_NAME) return fail(P, nt, DI_ERR_FORMAT, "%s", "expected a test name after 'is'");
      P->pos++;
      if (!jbuiltin_has_test(nt->s)) return fail(P, nt, DI_ERR_UNSUPPORTED, "unsupported test '%s'", nt->s);
      nvec v = {0};
      vpush(P, &v, node);
      const jtok *a = cur(P);
      if (is_op(a, "(")) {
        if (!parse_call_args(P, &v)) return NULL;
      } else if ((a->kind == TK_NAME || a->kind == TK_STRING || a->kind == TK_INT || a->kind == TK_FLOAT ||
                  is_op(a, "[") || is_op(a, "{")) &&
                 !is_name(a, "else") && !is_name(a, "or") && !is_name(a, "and")) {
        jnode *arg = parse_postfix(P, parse_primary(P));
        if (!vpush(P, &v, arg)) return NULL;
      }
      node = with_kids(mk(P, N_TEST, nt), &v);
      if (node) { node->name = nt->s; node->flag = neg; }
    } else if (is_op(t, "(")) {
      nvec v = {0};
      vpush(P, &v, node);
      if (!parse_call_args(P, &v)) return NULL;
      node = with_kids(mk(P, N_CALL, t), &v);
    } else {
      break;
    }
  }
  return node;
}

static jnode *parse_subscript_part(parser *P) {
  const jtok *t = cur(P);
  jnode *parts[3] = {NULL, NULL, NULL};
  if (!is_op(t, ":")) {
    jnode *e = parse_expr(P);
    if (!e || !is_op(cur(P), ":")) return e;
    parts[0] = e;
  }
  P->pos++; /* ':' */
  if (!is_op(cur(P), "]") && !is_op(cur(P), ",") && !is_op(cur(P), ":")) {
    if (!(parts[1] = parse_expr(P))) return NULL;
  }
  if (is_op(cur(P), ":")) {
    P->pos++;
    if (!is_op(cur(P), "]") && !is_op(cur(P), ",")) {
      if (!(parts[2] = parse_expr(P))) return NULL;
    }
  }
  jnode *s = mk(P, N_SLICE, t);
  if (!s) return NULL;
  s->kids = jarena_alloc(P->a, 3 * sizeof(jnode *));
  if (!s->kids) return NULL;
  memcpy(s->kids, parts, sizeof parts);
  s->n = 3;
  return s;
}

static jnode *parse_postfix(parser *P, jnode *node) {
  while (node && !P->err) {
    const jtok *t = cur(P);
    if (is_op(t, ".")) {
      P->pos++;
      const jtok *nt = cur(P);
      if (nt->kind == TK_NAME) {
        P->pos++;
        jnode *a = node2(P, N_ATTR, nt, node, NULL);
        if (a) { a->n = 1; a->name = nt->s; }
        node = a;
      } else if (nt->kind == TK_INT) {
        P->pos++;
        jnode *lit = mk(P, N_LITERAL, nt);
        if (!lit) return NULL;
        lit->lit = jv_int(nt->i);
        node = node2(P, N_ITEM, nt, node, lit);
      } else {
        return fail(P, nt, DI_ERR_FORMAT, "%s", "expected an attribute name after '.'");
      }
    } else if (is_op(t, "[")) {
      P->pos++;
      nvec v = {0};
      while (!is_op(cur(P), "]")) {
        if (v.n && !expect_op(P, ",")) return NULL;
        if (is_op(cur(P), "]")) break;
        if (!vpush(P, &v, parse_subscript_part(P))) return NULL;
        if (cur(P)->kind == TK_EOF) return fail(P, cur(P), DI_ERR_FORMAT, "%s", "unclosed '['");
      }
      P->pos++;
      if (!v.n) return fail(P, t, DI_ERR_FORMAT, "%s", "empty subscript");
      jnode *idx = v.n == 1 ? v.v[0] : with_kids(mk(P, N_TUPLE, t), &v);
      node = node2(P, N_ITEM, t, node, idx);
    } else if (is_op(t, "(")) {
      nvec v = {0};
      vpush(P, &v, node);
      if (!parse_call_args(P, &v)) return NULL;
      node = with_kids(mk(P, N_CALL, t), &v);
    } else {
      break;
    }
  }
  return node;
}

static jnode *parse_primary(parser *P) {
  if (!enter(P)) return NULL;
  const jtok *t = cur(P);
  jnode *n = NULL;
  switch (t->kind) {
    case TK_NAME:
      P->pos++;
      n = mk(P, N_LITERAL, t);
      if (!n) LEAVE(P, NULL);
      if (is_name(t, "true") || is_name(t, "True")) n->lit = jv_bool(true);
      else if (is_name(t, "false") || is_name(t, "False")) n->lit = jv_bool(false);
      else if (is_name(t, "none") || is_name(t, "None")) n->lit = jv_none();
      else { n->kind = N_NAME; n->name = t->s; }
      LEAVE(P, n);
    case TK_STRING: {
      jbuf b;
      jbuf_init(&b, P->a, (size_t)-1);
      while (cur(P)->kind == TK_STRING) { jbuf_put(&b, cur(P)->s, cur(P)->len, false); P->pos++; }
      n = mk(P, N_LITERAL, t);
      if (n) n->lit = jbuf_value(&b);
      if (n && n->lit.kind != JV_STR) LEAVE(P, fail(P, t, DI_ERR_NOMEM, "%s", "out of memory"));
      LEAVE(P, n);
    }
    case TK_INT: case TK_FLOAT:
      P->pos++;
      n = mk(P, N_LITERAL, t);
      if (n) n->lit = t->kind == TK_INT ? jv_int(t->i) : jv_float(t->f);
      LEAVE(P, n);
    default: break;
  }
  if (is_op(t, "(")) {
    P->pos++;
    if (is_op(cur(P), ")")) {
      P->pos++;
      nvec v = {0};
      n = with_kids(mk(P, N_TUPLE, t), &v);
      LEAVE(P, n);
    }
    jnode *e = parse_expr(P);
    if (e && is_op(cur(P), ",")) {
      nvec v = {0};
      vpush(P, &v, e);
      while (is_op(cur(P), ",")) {
        P->pos++;
        if (is_op(cur(P), ")")) break;
        if (!vpush(P, &v, parse_expr(P))) LEAVE(P, NULL);
      }
      e = with_kids(mk(P, N_TUPLE, t), &v);
    }
    if (!e || !expect_op(P, ")")) LEAVE(P, NULL);
    LEAVE(P, e);
  }
  if (is_op(t, "[")) {
    P->pos++;
    nvec v = {0};
    while (!is_op(cur(P), "]")) {
      if (v.n && !expect_op(P, ",")) LEAVE(P, NULL);
      if (is_op(cur(P), "]")) break;
      if (!vpush(P, &v, parse_expr(P))) LEAVE(P, NULL);
    }
    P->pos++;
    LEAVE(P, with_kids(mk(P, N_LIST, t), &v));
  }
  if (is_op(t, "{")) {
    P->pos++;
    nvec v = {0};
    while (!is_op(cur(P), "}")) {
      if (v.n && !expect_op(P, ",")) LEAVE(P, NULL);
      if (is_op(cur(P), "}")) break;
      if (!vpush(P, &v, parse_expr(P))) LEAVE(P, NULL);
      if (!expect_op(P, ":")) LEAVE(P, NULL);
      if (!vpush(P, &v, parse_expr(P))) LEAVE(P, NULL);
    }
    P->pos++;
    LEAVE(P, with_kids(mk(P, N_DICT, t), &v));
  }
  LEAVE(P, fail(P, t, DI_ERR_FORMAT, "unexpected %s in expression", tok_desc(t)));
}

static jnode *parse_unary(parser *P, bool with_filter) {
  if (!enter(P)) return NULL;
  const jtok *t = cur(P);
  jnode *n;
  if (is_op(t, "-") || is_op(t, "+")) {
    P->pos++;
    n = node2(P, is_op(t, "-") ? N_NEG : N_POS, t, parse_unary(P, false), NULL);
  } else {
    n = parse_primary(P);
  }
  n = parse_postfix(P, n);
  if (with_filter) n = parse_filter_expr(P, n);
  LEAVE(P, n);
}

static jnode *binop(parser *P, const jtok *t, jnode *a, jnode *b, const char *op) {
  jnode *n = node2(P, N_BINOP, t, a, b);
  if (n) n->name = op;
  return n;
}

static jnode *parse_pow(parser *P) {
  jnode *n = parse_unary(P, true);
  while (n && is_op(cur(P), "**")) {
    const jtok *t = cur(P);
    P->pos++;
    n = binop(P, t, n, parse_unary(P, true), "**");
  }
  return n;
}

static jnode *parse_math2(parser *P) {
  jnode *n = parse_pow(P);
  for (;;) {
    const jtok *t = cur(P);
    if (!n || !(is_op(t, "*") || is_op(t, "/") || is_op(t, "//") || is_op(t, "%"))) return n;
    P->pos++;
    n = binop(P, t, n, parse_pow(P), t->s);
  }
}

static jnode *parse_concat(parser *P) {
  jnode *n = parse_math2(P);
  while (n && is_op(cur(P), "~")) {
    const jtok *t = cur(P);
    P->pos++;
    n = node2(P, N_CONCAT, t, n, parse_math2(P));
  }
  return n;
}

static jnode *parse_math1(parser *P) {
  jnode *n = parse_concat(P);
  for (;;) {
    const jtok *t = cur(P);
    if (!n || !(is_op(t, "+") || is_op(t, "-"))) return n;
    P->pos++;
    n = binop(P, t, n, parse_concat(P), t->s);
  }
}

static jnode *parse_compare(parser *P) {
  const jtok *t0 = cur(P);
  jnode *first = parse_math1(P);
  if (!first) return NULL;
  nvec v = {0};
  const char *ops[64];
  size_t nops = 0;
  vpush(P, &v, first);
  for (;;) {
    const jtok *t = cur(P);
    const char *op = NULL;
    if (t->kind == TK_OP && (is_op(t, "==") || is_op(t, "!=") || is_op(t, "<") || is_op(t, "<=") ||
                             is_op(t, ">") || is_op(t, ">="))) {
      op = t->s;
      P->pos++;
    } else if (is_name(t, "in")) {
      op = "in";
      P->pos++;
    } else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
      op = "notin";
      P->pos += 2;
    } else {
      break;
    }
    if (nops == 64) return fail(P, t, DI_ERR_RANGE, "%s", "too many chained comparisons");
    ops[nops++] = op;
    if (!vpush(P, &v, parse_math1(P))) return NULL;
  }
  if (!nops) return first;
  jnode *n = with_kids(mk(P, N_COMPARE, t0), &v);
  if (!n) return NULL;
  n->ops = jarena_alloc(P->a, nops * sizeof(char *));
  if (!n->ops) return NULL;
  memcpy(n->ops, ops, nops * sizeof(char *));
  return n;
}

static jnode *parse_not(parser *P) {
  if (is_name(cur(P), "not")) {
    const jtok *t = cur(P);
    P->pos++;
    if (!enter(P)) return NULL;
    jnode *n = node2(P, N_NOT, t, parse_not(P), NULL);
    LEAVE(P, n);
  }
  return parse_compare(P);
}

static jnode *parse_and(parser *P) {
  jnode *n = parse_not(P);
  while (n && is_name(cur(P), "and")) {
    const jtok *t = cur(P);
    P->pos++;
    n = node2(P, N_AND, t, n, parse_not(P));
  }
  return n;
}

static jnode *parse_or(parser *P) {
  jnode *n = parse_and(P);
  while (n && is_name(cur(P), "or")) {
    const jtok *t = cur(P);
    P->pos++;
    n = node2(P, N_OR, t, n, parse_and(P));
  }
  return n;
}

static jnode *parse_expr(parser *P) {
  if (!enter(P)) return NULL;
  jnode *n = parse_or(P);
  while (n && is_name(cur(P), "if")) {
    const jtok *t = cur(P);
    P->pos++;
    jnode *cond = parse_or(P);
    jnode *els = NULL;
    if (cond && is_name(cur(P), "else")) {
      P->pos++;
      els = parse_expr(P);
      if (!els) LEAVE(P, NULL);
    }
    if (!cond) LEAVE(P, NULL);
    jnode *c = mk(P, N_COND, t);
    if (!c) LEAVE(P, NULL);
    c->kids = jarena_alloc(P->a, 3 * sizeof(jnode *));
    if (!c->kids) LEAVE(P, NULL);
    c->kids[0] = n;
    c->kids[1] = cond;
    c->kids[2] = els;
    c->n = 3;
    n = c;
  }
  LEAVE(P, n);
}

/* ---------------------------------------------------------------- statements */

static jnode *parse_body(parser *P, const char *const *ends);

static jnode *parse_target(parser *P, bool allow_attr) {
  const jtok *t = cur(P);
  bool paren = is_op(t, "(");
  if (paren) P->pos++;
  nvec v = {0};
  for (;;) {
    const jtok *nt = cur(P);
    if (nt->kind != TK_NAME) return fail(P, nt, DI_ERR_FORMAT, "%s", "expected a variable name");
    P->pos++;
    jnode *nm = mk(P, N_NAME, nt);
    if (!nm) return NULL;
    nm->name = nt->s;
    if (allow_attr && !v.n && !paren && is_op(cur(P), ".")) {
      P->pos++;
      const jtok *at = cur(P);
      if (at->kind != TK_NAME) return fail(P, at, DI_ERR_FORMAT, "%s", "expected an attribute name");
      P->pos++;
      jnode *a = node2(P, N_ATTR, at, nm, NULL);
      if (a) a->name = at->s;
      return a;
    }
    vpush(P, &v, nm);
    if (!is_op(cur(P), ",")) break;
    P->pos++;
  }
  if (paren && !expect_op(P, ")")) return NULL;
  if (v.n == 1 && !paren) return v.v[0];
  return with_kids(mk(P, N_TUPLE, t), &v);
}

static jnode *block_end(parser *P, jnode *n) {
  if (!n) return NULL;
  return expect_kind(P, TK_BLOCK_END, "'%}'") ? n : NULL;
}

static jnode *end_tag(parser *P, jnode *n, const char *name) {
  /* cur is the end NAME after '{%' */
  if (!n) return NULL;
  if (!is_name(cur(P), name)) {
    char m[96];
    snprintf(m, sizeof m, "expected '%s', got %s", name, tok_desc(cur(P)));
    return fail(P, cur(P), DI_ERR_FORMAT, "%s", m);
  }
  P->pos++;
  return block_end(P, n);
}

static jnode *parse_if(parser *P, const jtok *t) {
  static const char *const ends[] = {"elif", "else", "endif", NULL};
  jnode *n = mk(P, N_IF, t);
  jnode *cond = parse_tuple_or_expr(P, true);
  if (!n || !cond || !block_end(P, n)) return NULL;
  jnode *body = parse_body(P, ends);
  if (!body) return NULL;
  n->kids = jarena_alloc(P->a, 3 * sizeof(jnode *));
  if (!n->kids) return NULL;
  n->kids[0] = cond;
  n->kids[1] = body;
  n->n = 3;
  const jtok *e = cur(P);
  if (is_name(e, "elif")) {
    P->pos++;
    n->kids[2] = parse_if(P, e);
    return n->kids[2] ? n : NULL;
  }
  if (is_name(e, "else")) {
    P->pos++;
    if (!expect_kind(P, TK_BLOCK_END, "'%}'")) return NULL;
    static const char *const endif[] = {"endif", NULL};
    n->kids[2] = parse_body(P, endif);
    if (!n->kids[2]) return NULL;
  }
  return end_tag(P, n, "endif");
}

static jnode *parse_for(parser *P, const jtok *t) {
  static const char *const ends[] = {"else", "endfor", NULL};
  static const char *const endfor[] = {"endfor", NULL};
  jnode *n = mk(P, N_FOR, t);
  if (!n) return NULL;
  n->kids = jarena_alloc(P->a, 5 * sizeof(jnode *));
  if (!n->kids) return NULL;
  n->n = 5;
  if (!(n->kids[0] = parse_target(P, false))) return NULL;
  if (!is_name(cur(P), "in")) return fail(P, cur(P), DI_ERR_FORMAT, "%s", "expected 'in' in for loop");
  P->pos++;
  if (!(n->kids[1] = parse_tuple_or_expr(P, false))) return NULL;
  if (is_name(cur(P), "if")) {
    P->pos++;
    if (!(n->kids[2] = parse_expr(P))) return NULL;
  }
  if (is_name(cur(P), "recursive"))
    return fail(P, cur(P), DI_ERR_UNSUPPORTED, "%s", "unsupported: recursive for loops");
  if (!block_end(P, n)) return NULL;
  P->loops++;
  n->kids[3] = parse_body(P, ends);
  P->loops--;
  if (!n->kids[3]) return NULL;
  if (is_name(cur(P), "else")) {
    P->pos++;
    if (!expect_kind(P, TK_BLOCK_END, "'%}'")) return NULL;
    if (!(n->kids[4] = parse_body(P, endfor))) return NULL;
  }
  return end_tag(P, n, "endfor");
}

static jnode *parse_set(parser *P, const jtok *t) {
  jnode *target = parse_target(P, true);
  if (!target) return NULL;
  if (is_op(cur(P), "=")) {
    P->pos++;
    jnode *val = parse_tuple_or_expr(P, true);
    jnode *n = node2(P, target->kind == N_ATTR ? N_SET_ATTR : N_SET, t, target, val);
    return block_end(P, n);
  }
  if (target->kind != N_NAME) return fail(P, cur(P), DI_ERR_FORMAT, "%s", "expected '=' in set");
  /* block set: {% set x %}...{% endset %}, optionally filtered */
  jnode *n = mk(P, N_SET_BLOCK, t);
  if (!n) return NULL;
  nvec v = {0};
  vpush(P, &v, target);
  vpush(P, &v, NULL == target ? NULL : target); /* placeholder for the body */
  jnode *filt = NULL;
  if (is_op(cur(P), "|")) {
    jnode *hole = mk(P, N_LITERAL, cur(P));
    if (!hole) return NULL;
    hole->lit = jv_none();
    filt = parse_filter_expr(P, hole);
    if (!filt) return NULL;
  }
  if (!expect_kind(P, TK_BLOCK_END, "'%}'")) return NULL;
  static const char *const ends[] = {"endset", NULL};
  jnode *body = parse_body(P, ends);
  if (!body) return NULL;
  v.v[1] = body;
  if (filt) vpush(P, &v, filt);
  with_kids(n, &v);
  return end_tag(P, n, "endset");
}

static jnode *parse_macro(parser *P, const jtok *t) {
  const jtok *nt = cur(P);
  if (nt->kind != TK_NAME) return fail(P, nt, DI_ERR_FORMAT, "%s", "expected a macro name");
  P->pos++;
  jnode *n = mk(P, N_MACRO, nt);
  if (!n) return NULL;
  n->name = nt->s;
  nvec v = {0};
  vpush(P, &v, n); /* placeholder for the body */
  if (!expect_op(P, "(")) return NULL;
  while (!is_op(cur(P), ")")) {
    if (v.n > 1 && !expect_op(P, ",")) return NULL;
    const jtok *pt = cur(P);
    if (pt->kind != TK_NAME) return fail(P, pt, DI_ERR_FORMAT, "%s", "expected a parameter name");
    P->pos++;
    jnode *p;
    if (is_op(cur(P), "=")) {
      P->pos++;
      p = node2(P, N_KWARG, pt, parse_expr(P), NULL);
    } else {
      p = mk(P, N_NAME, pt);
    }
    if (!p) return NULL;
    p->name = pt->s;
    vpush(P, &v, p);
  }
  P->pos++;
  if (!expect_kind(P, TK_BLOCK_END, "'%}'")) return NULL;
  static const char *const ends[] = {"endmacro", NULL};
  int loops = P->loops;
  P->loops = 0;
  P->macros++;
  jnode *body = parse_body(P, ends);
  P->macros--;
  P->loops = loops;
  if (!body) return NULL;
  v.v[0] = body;
  with_kids(n, &v);
  return end_tag(P, n, "endmacro");
}

static jnode *parse_statement(parser *P) {
  const jtok *t = cur(P);
  if (t->kind != TK_NAME) return fail(P, t, DI_ERR_FORMAT, "%s", "expected a statement name after '{%'");
  P->pos++;
  if (is_name(t, "if")) return parse_if(P, t);
  if (is_name(t, "for")) return parse_for(P, t);
  if (is_name(t, "set")) return parse_set(P, t);
  if (is_name(t, "macro")) return parse_macro(P, t);
  if (is_name(t, "break") || is_name(t, "continue")) {
    if (!P->loops) return fail(P, t, DI_ERR_FORMAT, "'%s' outside of a loop", t->s);
    return block_end(P, mk(P, is_name(t, "break") ? N_BREAK : N_CONTINUE, t));
  }
  if (is_name(t, "generation")) {
    jnode *n = mk(P, N_GENERATION, t);
    if (!block_end(P, n)) return NULL;
    static const char *const ends[] = {"endgeneration", NULL};
    jnode *body = parse_body(P, ends);
    nvec v = {0};
    vpush(P, &v, body);
    with_kids(n, &v);
    return end_tag(P, body ? n : NULL, "endgeneration");
  }
  if (is_name(t, "with")) {
    jnode *n = mk(P, N_WITH, t);
    nvec v = {0};
    vpush(P, &v, n); /* placeholder for the body */
    while (n && cur(P)->kind != TK_BLOCK_END) {
      if (v.n > 1 && !expect_op(P, ",")) return NULL;
      jnode *target = parse_target(P, false);
      if (!target || !expect_op(P, "=")) return NULL;
      jnode *s = node2(P, N_SET, target ? cur(P) : t, target, parse_expr(P));
      if (!vpush(P, &v, s)) return NULL;
    }
    if (!block_end(P, n)) return NULL;
    static const char *const ends[] = {"endwith", NULL};
    if (!(v.v[0] = parse_body(P, ends))) return NULL;
    with_kids(n, &v);
    return end_tag(P, n, "endwith");
  }
  if (is_name(t, "filter")) {
    jnode *n = mk(P, N_FILTER_BLOCK, t);
    jnode *hole = mk(P, N_LITERAL, t);
    if (!n || !hole) return NULL;
    hole->lit = jv_none();
    const jtok *ft = cur(P);
    if (ft->kind != TK_NAME) return fail(P, ft, DI_ERR_FORMAT, "%s", "expected a filter name");
    P->pos++;
    if (!jbuiltin_has_filter(ft->s)) return fail(P, ft, DI_ERR_UNSUPPORTED, "unsupported filter '%s'", ft->s);
    nvec fv = {0};
    vpush(P, &fv, hole);
    if (is_op(cur(P), "(") && !parse_call_args(P, &fv)) return NULL;
    jnode *f = with_kids(mk(P, N_FILTER, ft), &fv);
    if (!f) return NULL;
    f->name = ft->s;
    if (!block_end(P, n)) return NULL;
    static const char *const ends[] = {"endfilter", NULL};
    jnode *body = parse_body(P, ends);
    nvec v = {0};
    vpush(P, &v, body);
    vpush(P, &v, f);
    with_kids(n, &v);
    return end_tag(P, body ? n : NULL, "endfilter");
  }
  if (!strncmp(t->s, "end", 3) || is_name(t, "elif") || is_name(t, "else"))
    return fail(P, t, DI_ERR_FORMAT, "unexpected '%s' (no open block it could close)", t->s);
  return fail(P, t, DI_ERR_UNSUPPORTED, "unsupported statement '%s'", t->s);
}

static bool is_end(const jtok *t, const char *const *ends) {
  if (!ends || t->kind != TK_NAME) return false;
  for (int i = 0; ends[i]; i++)
    if (is_name(t, ends[i])) return true;
  return false;
}

static jnode *parse_body(parser *P, const char *const *ends) {
  if (!enter(P)) return NULL;
  jnode *body = mk(P, N_BODY, cur(P));
  nvec v = {0};
  while (body && !P->err) {
    const jtok *t = cur(P);
    if (t->kind == TK_EOF) {
      if (ends) {
        char m[96];
        snprintf(m, sizeof m, "unexpected end of template, expected '%s'", ends[0][0] == 'e' ? ends[0] : "end");
        for (int i = 0; ends[i]; i++)
          if (!strncmp(ends[i], "end", 3)) snprintf(m, sizeof m, "unexpected end of template, expected '%s'", ends[i]);
        LEAVE(P, fail(P, t, DI_ERR_FORMAT, "%s", m));
      }
      break;
    }
    if (t->kind == TK_TEXT) {
      jnode *x = mk(P, N_TEXT, t);
      if (!x) break;
      x->lit = jv_str(P->a, t->s, t->len, JT_CLEAN);
      vpush(P, &v, x);
      P->pos++;
    } else if (t->kind == TK_VAR_BEGIN) {
      P->pos++;
      jnode *x = node2(P, N_OUTPUT, t, parse_tuple_or_expr(P, true), NULL);
      if (!x || !expect_kind(P, TK_VAR_END, "'}}'")) break;
      vpush(P, &v, x);
    } else if (t->kind == TK_BLOCK_BEGIN) {
      P->pos++;
      if (is_end(cur(P), ends)) break;
      jnode *x = parse_statement(P);
      if (!x) break;
      vpush(P, &v, x);
    } else {
      fail(P, t, DI_ERR_FORMAT, "unexpected %s", tok_desc(t));
      break;
    }
  }
  if (P->err) LEAVE(P, NULL);
  LEAVE(P, with_kids(body, &v));
}

di_code jinja_parse(jarena *a, const jtok *toks, size_t n, jnode **root, di_status *st) {
  parser P = {.a = a, .t = toks, .n = n, .st = st};
  jnode *r = parse_body(&P, NULL);
  if (!r || P.err) return st->code ? st->code : DI_ERR_FORMAT;
  if (cur(&P)->kind != TK_EOF) {
    fail(&P, cur(&P), DI_ERR_FORMAT, "unexpected '%s'", cur(&P)->s ? cur(&P)->s : "tag");
    return st->code;
  }
  *root = r;
  return DI_OK;
}
