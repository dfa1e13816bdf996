/* Tokens -> AST, following jinja2.parser's grammar and precedence (filters
 * and tests bind tighter than arithmetic; `a if b else c` is the loosest).
 * Anything outside the supported subset fails here, at load, with its
 * line:column, never at render time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe/parse.h"

const jtok *jp_cur(parser *P) { return &P->t[P->pos < P->n ? P->pos : P->n - 1]; }
const jtok *jp_peek(parser *P, size_t k) {
  return &P->t[P->pos + k < P->n ? P->pos + k : P->n - 1];
}

jnode *jp_fail(parser *P, const jtok *t, di_code code, const char *fmt, const char *arg) {
  if (!P->err) {
    char m[256];
    snprintf(m, sizeof m, fmt, arg ? arg : "");
    di_errorf(P->st, code, "template line %d:%d: %s", t->line, t->col, m);
  }
  P->err = true;
  return NULL;
}

bool jp_is_op(const jtok *t, const char *op) {
  return t->kind == TK_OP && t->len == strlen(op) && memcmp(t->s, op, t->len) == 0;
}
bool jp_is_name(const jtok *t, const char *nm) {
  return t->kind == TK_NAME && t->len == strlen(nm) && memcmp(t->s, nm, t->len) == 0;
}

const char *jp_tok_desc(const jtok *t) {
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

bool jp_expect_op(parser *P, const char *op) {
  if (jp_is_op(jp_cur(P), op)) { P->pos++; return true; }
  char m[128];
  snprintf(m, sizeof m, "expected '%s', got %s", op, jp_tok_desc(jp_cur(P)));
  jp_fail(P, jp_cur(P), DI_ERR_FORMAT, "%s", m);
  return false;
}

bool jp_expect_kind(parser *P, int kind, const char *what) {
  if (jp_cur(P)->kind == kind) { P->pos++; return true; }
  char m[160];
  snprintf(m, sizeof m, "expected %s, got %s", what, jp_tok_desc(jp_cur(P)));
  jp_fail(P, jp_cur(P), DI_ERR_FORMAT, "%s", m);
  return false;
}

jnode *jp_mk(parser *P, int kind, const jtok *t) {
  jnode *n = jarena_alloc(P->a, sizeof *n);
  if (!n) return jp_fail(P, t, DI_ERR_NOMEM, "%s", "out of memory");
  n->kind = (uint8_t)kind;
  n->line = t->line;
  n->col = t->col;
  return n;
}

bool jp_vpush(parser *P, nvec *v, jnode *x) {
  if (!x) return false;
  if (v->n == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 4;
    jnode **nv = jarena_alloc(P->a, cap * sizeof *nv);
    if (!nv) { jp_fail(P, jp_cur(P), DI_ERR_NOMEM, "%s", "out of memory"); return false; }
    if (v->n) memcpy(nv, v->v, v->n * sizeof *nv);
    v->v = nv;
    v->cap = cap;
  }
  v->v[v->n++] = x;
  return true;
}

jnode *jp_with_kids(jnode *n, nvec *v) {
  if (n) {
    n->kids = v->v;
    n->n = v->n;
  }
  return n;
}

jnode *jp_node2(parser *P, int kind, const jtok *t, jnode *a, jnode *b) {
  if (!a) return NULL;
  jnode *n = jp_mk(P, kind, t);
  if (!n) return NULL;
  n->kids = jarena_alloc(P->a, 2 * sizeof(jnode *));
  if (!n->kids) return jp_fail(P, t, DI_ERR_NOMEM, "%s", "out of memory");
  n->kids[0] = a;
  n->kids[1] = b;
  n->n = b ? 2 : 1;
  return n;
}

const char *jp_dup_tok(parser *P, const jtok *t) { return t->s; }


bool jp_enter(parser *P) {
  if (++P->depth > MAX_NEST) {
    jp_fail(P, jp_cur(P), DI_ERR_RANGE, "%s", "expression or block nesting deeper than 200");
    return false;
  }
  return true;
}

/* ---------------------------------------------------------------- expressions */

jnode *jp_parse_tuple_or_expr(parser *P, bool condexpr) {
  const jtok *t0 = jp_cur(P);
  jnode *first = condexpr ? jp_parse_expr(P) : jp_parse_or(P);
  if (!first || !jp_is_op(jp_cur(P), ",")) return first;
  nvec v = {0};
  jp_vpush(P, &v, first);
  while (jp_is_op(jp_cur(P), ",")) {
    P->pos++;
    const jtok *t = jp_cur(P);
    if (t->kind == TK_BLOCK_END || t->kind == TK_VAR_END || jp_is_op(t, ")") || jp_is_name(t, "if")) break;
    if (!jp_vpush(P, &v, condexpr ? jp_parse_expr(P) : jp_parse_or(P))) return NULL;
  }
  return jp_with_kids(jp_mk(P, N_TUPLE, t0), &v);
}

bool jp_parse_call_args(parser *P, nvec *args) {
  /* at '(' */
  P->pos++;
  size_t first = args->n;
  while (!jp_is_op(jp_cur(P), ")")) {
    if (jp_cur(P)->kind == TK_EOF || jp_cur(P)->kind == TK_VAR_END || jp_cur(P)->kind == TK_BLOCK_END) {
      jp_fail(P, jp_cur(P), DI_ERR_FORMAT, "%s", "unclosed '(' in call");
      return false;
    }
    if (args->n > first) {
      if (!jp_expect_op(P, ",")) return false;
      if (jp_is_op(jp_cur(P), ")")) break;
    }
    const jtok *t = jp_cur(P);
    if (jp_is_op(t, "*") || jp_is_op(t, "**")) {
      jp_fail(P, t, DI_ERR_UNSUPPORTED, "%s", "unsupported: *args/**kwargs in a call");
      return false;
    }
    if (t->kind == TK_NAME && jp_is_op(jp_peek(P, 1), "=")) {
      P->pos += 2;
      jnode *kw = jp_mk(P, N_KWARG, t);
      jnode *val = jp_parse_expr(P);
      if (!kw || !val) return false;
      kw->name = jp_dup_tok(P, t);
      kw->kids = jarena_alloc(P->a, sizeof(jnode *));
      if (!kw->kids) return false;
      kw->kids[0] = val;
      kw->n = 1;
      if (!jp_vpush(P, args, kw)) return false;
    } else {
      if (!jp_vpush(P, args, jp_parse_expr(P))) return false;
    }
  }
  P->pos++;
  return true;
}

jnode *jp_parse_filter_expr(parser *P, jnode *node) {
  while (node && !P->err) {
    const jtok *t = jp_cur(P);
    if (jp_is_op(t, "|")) {
      P->pos++;
      const jtok *nt = jp_cur(P);
      if (nt->kind != TK_NAME) return jp_fail(P, nt, DI_ERR_FORMAT, "%s", "expected a filter name after '|'");
      P->pos++;
      if (!jbuiltin_has_filter(nt->s))
        return jp_fail(P, nt, DI_ERR_UNSUPPORTED, "unsupported filter '%s'", nt->s);
      nvec v = {0};
      jp_vpush(P, &v, node);
      if (jp_is_op(jp_cur(P), "(") && !jp_parse_call_args(P, &v)) return NULL;
      node = jp_with_kids(jp_mk(P, N_FILTER, nt), &v);
      if (node) node->name = nt->s;
    } else if (jp_is_name(t, "is")) {
      P->pos++;
      bool neg = false;
      if (jp_is_name(jp_cur(P), "not")) { neg = true; P->pos++; }
      const jtok *nt = jp_cur(P);
      if (nt->kind != TK_NAME) return jp_fail(P, nt, DI_ERR_FORMAT, "%s", "expected a test name after 'is'");
      P->pos++;
      if (!jbuiltin_has_test(nt->s)) return jp_fail(P, nt, DI_ERR_UNSUPPORTED, "unsupported test '%s'", nt->s);
      nvec v = {0};
      jp_vpush(P, &v, node);
      const jtok *a = jp_cur(P);
      if (jp_is_op(a, "(")) {
        if (!jp_parse_call_args(P, &v)) return NULL;
      } else if ((a->kind == TK_NAME || a->kind == TK_STRING || a->kind == TK_INT || a->kind == TK_FLOAT ||
                  jp_is_op(a, "[") || jp_is_op(a, "{")) &&
                 !jp_is_name(a, "else") && !jp_is_name(a, "or") && !jp_is_name(a, "and")) {
        jnode *arg = jp_parse_postfix(P, jp_parse_primary(P));
        if (!jp_vpush(P, &v, arg)) return NULL;
      }
      node = jp_with_kids(jp_mk(P, N_TEST, nt), &v);
      if (node) { node->name = nt->s; node->flag = neg; }
    } else if (jp_is_op(t, "(")) {
      nvec v = {0};
      jp_vpush(P, &v, node);
      if (!jp_parse_call_args(P, &v)) return NULL;
      node = jp_with_kids(jp_mk(P, N_CALL, t), &v);
    } else {
      break;
    }
  }
  return node;
}

static jnode *parse_subscript_part(parser *P) {
  const jtok *t = jp_cur(P);
  jnode *parts[3] = {NULL, NULL, NULL};
  if (!jp_is_op(t, ":")) {
    jnode *e = jp_parse_expr(P);
    if (!e || !jp_is_op(jp_cur(P), ":")) return e;
    parts[0] = e;
  }
  P->pos++; /* ':' */
  if (!jp_is_op(jp_cur(P), "]") && !jp_is_op(jp_cur(P), ",") && !jp_is_op(jp_cur(P), ":")) {
    if (!(parts[1] = jp_parse_expr(P))) return NULL;
  }
  if (jp_is_op(jp_cur(P), ":")) {
    P->pos++;
    if (!jp_is_op(jp_cur(P), "]") && !jp_is_op(jp_cur(P), ",")) {
      if (!(parts[2] = jp_parse_expr(P))) return NULL;
    }
  }
  jnode *s = jp_mk(P, N_SLICE, t);
  if (!s) return NULL;
  s->kids = jarena_alloc(P->a, 3 * sizeof(jnode *));
  if (!s->kids) return NULL;
  memcpy(s->kids, parts, sizeof parts);
  s->n = 3;
  return s;
}

jnode *jp_parse_postfix(parser *P, jnode *node) {
  while (node && !P->err) {
    const jtok *t = jp_cur(P);
    if (jp_is_op(t, ".")) {
      P->pos++;
      const jtok *nt = jp_cur(P);
      if (nt->kind == TK_NAME) {
        P->pos++;
        jnode *a = jp_node2(P, N_ATTR, nt, node, NULL);
        if (a) { a->n = 1; a->name = nt->s; }
        node = a;
      } else if (nt->kind == TK_INT) {
        P->pos++;
        jnode *lit = jp_mk(P, N_LITERAL, nt);
        if (!lit) return NULL;
        lit->lit = jv_int(nt->i);
        node = jp_node2(P, N_ITEM, nt, node, lit);
      } else {
        return jp_fail(P, nt, DI_ERR_FORMAT, "%s", "expected an attribute name after '.'");
      }
    } else if (jp_is_op(t, "[")) {
      P->pos++;
      nvec v = {0};
      while (!jp_is_op(jp_cur(P), "]")) {
        if (v.n && !jp_expect_op(P, ",")) return NULL;
        if (jp_is_op(jp_cur(P), "]")) break;
        if (!jp_vpush(P, &v, parse_subscript_part(P))) return NULL;
        if (jp_cur(P)->kind == TK_EOF) return jp_fail(P, jp_cur(P), DI_ERR_FORMAT, "%s", "unclosed '['");
      }
      P->pos++;
      if (!v.n) return jp_fail(P, t, DI_ERR_FORMAT, "%s", "empty subscript");
      jnode *idx = v.n == 1 ? v.v[0] : jp_with_kids(jp_mk(P, N_TUPLE, t), &v);
      node = jp_node2(P, N_ITEM, t, node, idx);
    } else if (jp_is_op(t, "(")) {
      nvec v = {0};
      jp_vpush(P, &v, node);
      if (!jp_parse_call_args(P, &v)) return NULL;
      node = jp_with_kids(jp_mk(P, N_CALL, t), &v);
    } else {
      break;
    }
  }
  return node;
}

jnode *jp_parse_primary(parser *P) {
  if (!jp_enter(P)) return NULL;
  const jtok *t = jp_cur(P);
  jnode *n = NULL;
  switch (t->kind) {
    case TK_NAME:
      P->pos++;
      n = jp_mk(P, N_LITERAL, t);
      if (!n) LEAVE(P, NULL);
      if (jp_is_name(t, "true") || jp_is_name(t, "True")) n->lit = jv_bool(true);
      else if (jp_is_name(t, "false") || jp_is_name(t, "False")) n->lit = jv_bool(false);
      else if (jp_is_name(t, "none") || jp_is_name(t, "None")) n->lit = jv_none();
      else { n->kind = N_NAME; n->name = t->s; }
      LEAVE(P, n);
    case TK_STRING: {
      jbuf b;
      jbuf_init(&b, P->a, (size_t)-1);
      while (jp_cur(P)->kind == TK_STRING) { jbuf_put(&b, jp_cur(P)->s, jp_cur(P)->len, false); P->pos++; }
      n = jp_mk(P, N_LITERAL, t);
      if (n) n->lit = jbuf_value(&b);
      if (n && n->lit.kind != JV_STR) LEAVE(P, jp_fail(P, t, DI_ERR_NOMEM, "%s", "out of memory"));
      LEAVE(P, n);
    }
    case TK_INT: case TK_FLOAT:
      P->pos++;
      n = jp_mk(P, N_LITERAL, t);
      if (n) n->lit = t->kind == TK_INT ? jv_int(t->i) : jv_float(t->f);
      LEAVE(P, n);
    default: break;
  }
  if (jp_is_op(t, "(")) {
    P->pos++;
    if (jp_is_op(jp_cur(P), ")")) {
      P->pos++;
      nvec v = {0};
      n = jp_with_kids(jp_mk(P, N_TUPLE, t), &v);
      LEAVE(P, n);
    }
    jnode *e = jp_parse_expr(P);
    if (e && jp_is_op(jp_cur(P), ",")) {
      nvec v = {0};
      jp_vpush(P, &v, e);
      while (jp_is_op(jp_cur(P), ",")) {
        P->pos++;
        if (jp_is_op(jp_cur(P), ")")) break;
        if (!jp_vpush(P, &v, jp_parse_expr(P))) LEAVE(P, NULL);
      }
      e = jp_with_kids(jp_mk(P, N_TUPLE, t), &v);
    }
    if (!e || !jp_expect_op(P, ")")) LEAVE(P, NULL);
    LEAVE(P, e);
  }
  if (jp_is_op(t, "[")) {
    P->pos++;
    nvec v = {0};
    while (!jp_is_op(jp_cur(P), "]")) {
      if (v.n && !jp_expect_op(P, ",")) LEAVE(P, NULL);
      if (jp_is_op(jp_cur(P), "]")) break;
      if (!jp_vpush(P, &v, jp_parse_expr(P))) LEAVE(P, NULL);
    }
    P->pos++;
    LEAVE(P, jp_with_kids(jp_mk(P, N_LIST, t), &v));
  }
  if (jp_is_op(t, "{")) {
    P->pos++;
    nvec v = {0};
    while (!jp_is_op(jp_cur(P), "}")) {
      if (v.n && !jp_expect_op(P, ",")) LEAVE(P, NULL);
      if (jp_is_op(jp_cur(P), "}")) break;
      if (!jp_vpush(P, &v, jp_parse_expr(P))) LEAVE(P, NULL);
      if (!jp_expect_op(P, ":")) LEAVE(P, NULL);
      if (!jp_vpush(P, &v, jp_parse_expr(P))) LEAVE(P, NULL);
    }
    P->pos++;
    LEAVE(P, jp_with_kids(jp_mk(P, N_DICT, t), &v));
  }
  LEAVE(P, jp_fail(P, t, DI_ERR_FORMAT, "unexpected %s in expression", jp_tok_desc(t)));
}

jnode *jp_parse_unary(parser *P, bool with_filter) {
  if (!jp_enter(P)) return NULL;
  const jtok *t = jp_cur(P);
  jnode *n;
  if (jp_is_op(t, "-") || jp_is_op(t, "+")) {
    P->pos++;
    n = jp_node2(P, jp_is_op(t, "-") ? N_NEG : N_POS, t, jp_parse_unary(P, false), NULL);
  } else {
    n = jp_parse_primary(P);
  }
  n = jp_parse_postfix(P, n);
  if (with_filter) n = jp_parse_filter_expr(P, n);
  LEAVE(P, n);
}

static jnode *binop(parser *P, const jtok *t, jnode *a, jnode *b, const char *op) {
  jnode *n = jp_node2(P, N_BINOP, t, a, b);
  if (n) n->name = op;
  return n;
}

static jnode *parse_pow(parser *P) {
  jnode *n = jp_parse_unary(P, true);
  while (n && jp_is_op(jp_cur(P), "**")) {
    const jtok *t = jp_cur(P);
    P->pos++;
    n = binop(P, t, n, jp_parse_unary(P, true), "**");
  }
  return n;
}

static jnode *parse_math2(parser *P) {
  jnode *n = parse_pow(P);
  for (;;) {
    const jtok *t = jp_cur(P);
    if (!n || !(jp_is_op(t, "*") || jp_is_op(t, "/") || jp_is_op(t, "//") || jp_is_op(t, "%"))) return n;
    P->pos++;
    n = binop(P, t, n, parse_pow(P), t->s);
  }
}

static jnode *parse_concat(parser *P) {
  jnode *n = parse_math2(P);
  while (n && jp_is_op(jp_cur(P), "~")) {
    const jtok *t = jp_cur(P);
    P->pos++;
    n = jp_node2(P, N_CONCAT, t, n, parse_math2(P));
  }
  return n;
}

static jnode *parse_math1(parser *P) {
  jnode *n = parse_concat(P);
  for (;;) {
    const jtok *t = jp_cur(P);
    if (!n || !(jp_is_op(t, "+") || jp_is_op(t, "-"))) return n;
    P->pos++;
    n = binop(P, t, n, parse_concat(P), t->s);
  }
}

static jnode *parse_compare(parser *P) {
  const jtok *t0 = jp_cur(P);
  jnode *first = parse_math1(P);
  if (!first) return NULL;
  nvec v = {0};
  const char *ops[64];
  size_t nops = 0;
  jp_vpush(P, &v, first);
  for (;;) {
    const jtok *t = jp_cur(P);
    const char *op = NULL;
    if (t->kind == TK_OP && (jp_is_op(t, "==") || jp_is_op(t, "!=") || jp_is_op(t, "<") || jp_is_op(t, "<=") ||
                             jp_is_op(t, ">") || jp_is_op(t, ">="))) {
      op = t->s;
      P->pos++;
    } else if (jp_is_name(t, "in")) {
      op = "in";
      P->pos++;
    } else if (jp_is_name(t, "not") && jp_is_name(jp_peek(P, 1), "in")) {
      op = "notin";
      P->pos += 2;
    } else {
      break;
    }
    if (nops == 64) return jp_fail(P, t, DI_ERR_RANGE, "%s", "too many chained comparisons");
    ops[nops++] = op;
    if (!jp_vpush(P, &v, parse_math1(P))) return NULL;
  }
  if (!nops) return first;
  jnode *n = jp_with_kids(jp_mk(P, N_COMPARE, t0), &v);
  if (!n) return NULL;
  n->ops = jarena_alloc(P->a, nops * sizeof(char *));
  if (!n->ops) return NULL;
  memcpy(n->ops, ops, nops * sizeof(char *));
  return n;
}

static jnode *parse_not(parser *P) {
  if (jp_is_name(jp_cur(P), "not")) {
    const jtok *t = jp_cur(P);
    P->pos++;
    if (!jp_enter(P)) return NULL;
    jnode *n = jp_node2(P, N_NOT, t, parse_not(P), NULL);
    LEAVE(P, n);
  }
  return parse_compare(P);
}

static jnode *parse_and(parser *P) {
  jnode *n = parse_not(P);
  while (n && jp_is_name(jp_cur(P), "and")) {
    const jtok *t = jp_cur(P);
    P->pos++;
    n = jp_node2(P, N_AND, t, n, parse_not(P));
  }
  return n;
}

jnode *jp_parse_or(parser *P) {
  jnode *n = parse_and(P);
  while (n && jp_is_name(jp_cur(P), "or")) {
    const jtok *t = jp_cur(P);
    P->pos++;
    n = jp_node2(P, N_OR, t, n, parse_and(P));
  }
  return n;
}

jnode *jp_parse_expr(parser *P) {
  if (!jp_enter(P)) return NULL;
  jnode *n = jp_parse_or(P);
  while (n && jp_is_name(jp_cur(P), "if")) {
    const jtok *t = jp_cur(P);
    P->pos++;
    jnode *cond = jp_parse_or(P);
    jnode *els = NULL;
    if (cond && jp_is_name(jp_cur(P), "else")) {
      P->pos++;
      els = jp_parse_expr(P);
      if (!els) LEAVE(P, NULL);
    }
    if (!cond) LEAVE(P, NULL);
    jnode *c = jp_mk(P, N_COND, t);
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
