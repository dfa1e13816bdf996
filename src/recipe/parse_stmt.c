/* The statement half of the parser: if/for/set/macro/with/filter blocks and
 * the template body; expressions are in parser.c. */
#include <stdio.h>
#include <string.h>

#include "recipe/parse.h"

/* ---------------------------------------------------------------- statements */

static jnode *parse_body(parser *P, const char *const *ends);

static jnode *parse_target(parser *P, bool allow_attr) {
  const jtok *t = jp_cur(P);
  bool paren = jp_is_op(t, "(");
  if (paren) P->pos++;
  nvec v = {0};
  for (;;) {
    const jtok *nt = jp_cur(P);
    if (nt->kind != TK_NAME) return jp_fail(P, nt, DI_ERR_FORMAT, "%s", "expected a variable name");
    P->pos++;
    jnode *nm = jp_mk(P, N_NAME, nt);
    if (!nm) return NULL;
    nm->name = nt->s;
    if (allow_attr && !v.n && !paren && jp_is_op(jp_cur(P), ".")) {
      P->pos++;
      const jtok *at = jp_cur(P);
      if (at->kind != TK_NAME) return jp_fail(P, at, DI_ERR_FORMAT, "%s", "expected an attribute name");
      P->pos++;
      jnode *a = jp_node2(P, N_ATTR, at, nm, NULL);
      if (a) a->name = at->s;
      return a;
    }
    jp_vpush(P, &v, nm);
    if (!jp_is_op(jp_cur(P), ",")) break;
    P->pos++;
  }
  if (paren && !jp_expect_op(P, ")")) return NULL;
  if (v.n == 1 && !paren) return v.v[0];
  return jp_with_kids(jp_mk(P, N_TUPLE, t), &v);
}

static jnode *block_end(parser *P, jnode *n) {
  if (!n) return NULL;
  return jp_expect_kind(P, TK_BLOCK_END, "'%}'") ? n : NULL;
}

static jnode *end_tag(parser *P, jnode *n, const char *name) {
  /* cur is the end NAME after '{%' */
  if (!n) return NULL;
  if (!jp_is_name(jp_cur(P), name)) {
    char m[96];
    snprintf(m, sizeof m, "expected '%s', got %s", name, jp_tok_desc(jp_cur(P)));
    return jp_fail(P, jp_cur(P), DI_ERR_FORMAT, "%s", m);
  }
  P->pos++;
  return block_end(P, n);
}

static jnode *parse_if(parser *P, const jtok *t) {
  static const char *const ends[] = {"elif", "else", "endif", NULL};
  jnode *n = jp_mk(P, N_IF, t);
  jnode *cond = jp_parse_tuple_or_expr(P, true);
  if (!n || !cond || !block_end(P, n)) return NULL;
  jnode *body = parse_body(P, ends);
  if (!body) return NULL;
  n->kids = jarena_alloc(P->a, 3 * sizeof(jnode *));
  if (!n->kids) return NULL;
  n->kids[0] = cond;
  n->kids[1] = body;
  n->n = 3;
  const jtok *e = jp_cur(P);
  if (jp_is_name(e, "elif")) {
    P->pos++;
    n->kids[2] = parse_if(P, e);
    return n->kids[2] ? n : NULL;
  }
  if (jp_is_name(e, "else")) {
    P->pos++;
    if (!jp_expect_kind(P, TK_BLOCK_END, "'%}'")) return NULL;
    static const char *const endif[] = {"endif", NULL};
    n->kids[2] = parse_body(P, endif);
    if (!n->kids[2]) return NULL;
  }
  return end_tag(P, n, "endif");
}

static jnode *parse_for(parser *P, const jtok *t) {
  static const char *const ends[] = {"else", "endfor", NULL};
  static const char *const endfor[] = {"endfor", NULL};
  jnode *n = jp_mk(P, N_FOR, t);
  if (!n) return NULL;
  n->kids = jarena_alloc(P->a, 5 * sizeof(jnode *));
  if (!n->kids) return NULL;
  n->n = 5;
  if (!(n->kids[0] = parse_target(P, false))) return NULL;
  if (!jp_is_name(jp_cur(P), "in")) return jp_fail(P, jp_cur(P), DI_ERR_FORMAT, "%s", "expected 'in' in for loop");
  P->pos++;
  if (!(n->kids[1] = jp_parse_tuple_or_expr(P, false))) return NULL;
  if (jp_is_name(jp_cur(P), "if")) {
    P->pos++;
    if (!(n->kids[2] = jp_parse_expr(P))) return NULL;
  }
  if (jp_is_name(jp_cur(P), "recursive"))
    return jp_fail(P, jp_cur(P), DI_ERR_UNSUPPORTED, "%s", "unsupported: recursive for loops");
  if (!block_end(P, n)) return NULL;
  P->loops++;
  n->kids[3] = parse_body(P, ends);
  P->loops--;
  if (!n->kids[3]) return NULL;
  if (jp_is_name(jp_cur(P), "else")) {
    P->pos++;
    if (!jp_expect_kind(P, TK_BLOCK_END, "'%}'")) return NULL;
    if (!(n->kids[4] = parse_body(P, endfor))) return NULL;
  }
  return end_tag(P, n, "endfor");
}

static jnode *parse_set(parser *P, const jtok *t) {
  jnode *target = parse_target(P, true);
  if (!target) return NULL;
  if (jp_is_op(jp_cur(P), "=")) {
    P->pos++;
    jnode *val = jp_parse_tuple_or_expr(P, true);
    jnode *n = jp_node2(P, target->kind == N_ATTR ? N_SET_ATTR : N_SET, t, target, val);
    return block_end(P, n);
  }
  if (target->kind != N_NAME) return jp_fail(P, jp_cur(P), DI_ERR_FORMAT, "%s", "expected '=' in set");
  /* block set: {% set x %}...{% endset %}, optionally filtered */
  jnode *n = jp_mk(P, N_SET_BLOCK, t);
  if (!n) return NULL;
  nvec v = {0};
  jp_vpush(P, &v, target);
  jp_vpush(P, &v, NULL == target ? NULL : target); /* placeholder for the body */
  jnode *filt = NULL;
  if (jp_is_op(jp_cur(P), "|")) {
    jnode *hole = jp_mk(P, N_LITERAL, jp_cur(P));
    if (!hole) return NULL;
    hole->lit = jv_none();
    filt = jp_parse_filter_expr(P, hole);
    if (!filt) return NULL;
  }
  if (!jp_expect_kind(P, TK_BLOCK_END, "'%}'")) return NULL;
  static const char *const ends[] = {"endset", NULL};
  jnode *body = parse_body(P, ends);
  if (!body) return NULL;
  v.v[1] = body;
  if (filt) jp_vpush(P, &v, filt);
  jp_with_kids(n, &v);
  return end_tag(P, n, "endset");
}

static jnode *parse_macro(parser *P, const jtok *t) {
  const jtok *nt = jp_cur(P);
  if (nt->kind != TK_NAME) return jp_fail(P, nt, DI_ERR_FORMAT, "%s", "expected a macro name");
  P->pos++;
  jnode *n = jp_mk(P, N_MACRO, nt);
  if (!n) return NULL;
  n->name = nt->s;
  nvec v = {0};
  jp_vpush(P, &v, n); /* placeholder for the body */
  if (!jp_expect_op(P, "(")) return NULL;
  while (!jp_is_op(jp_cur(P), ")")) {
    if (v.n > 1 && !jp_expect_op(P, ",")) return NULL;
    const jtok *pt = jp_cur(P);
    if (pt->kind != TK_NAME) return jp_fail(P, pt, DI_ERR_FORMAT, "%s", "expected a parameter name");
    P->pos++;
    jnode *p;
    if (jp_is_op(jp_cur(P), "=")) {
      P->pos++;
      p = jp_node2(P, N_KWARG, pt, jp_parse_expr(P), NULL);
    } else {
      p = jp_mk(P, N_NAME, pt);
    }
    if (!p) return NULL;
    p->name = pt->s;
    jp_vpush(P, &v, p);
  }
  P->pos++;
  if (!jp_expect_kind(P, TK_BLOCK_END, "'%}'")) return NULL;
  static const char *const ends[] = {"endmacro", NULL};
  int loops = P->loops;
  P->loops = 0;
  P->macros++;
  jnode *body = parse_body(P, ends);
  P->macros--;
  P->loops = loops;
  if (!body) return NULL;
  v.v[0] = body;
  jp_with_kids(n, &v);
  return end_tag(P, n, "endmacro");
}

static jnode *parse_statement(parser *P) {
  const jtok *t = jp_cur(P);
  if (t->kind != TK_NAME) return jp_fail(P, t, DI_ERR_FORMAT, "%s", "expected a statement name after '{%'");
  P->pos++;
  if (jp_is_name(t, "if")) return parse_if(P, t);
  if (jp_is_name(t, "for")) return parse_for(P, t);
  if (jp_is_name(t, "set")) return parse_set(P, t);
  if (jp_is_name(t, "macro")) return parse_macro(P, t);
  if (jp_is_name(t, "break") || jp_is_name(t, "continue")) {
    if (!P->loops) return jp_fail(P, t, DI_ERR_FORMAT, "'%s' outside of a loop", t->s);
    return block_end(P, jp_mk(P, jp_is_name(t, "break") ? N_BREAK : N_CONTINUE, t));
  }
  if (jp_is_name(t, "generation")) {
    jnode *n = jp_mk(P, N_GENERATION, t);
    if (!block_end(P, n)) return NULL;
    static const char *const ends[] = {"endgeneration", NULL};
    jnode *body = parse_body(P, ends);
    nvec v = {0};
    jp_vpush(P, &v, body);
    jp_with_kids(n, &v);
    return end_tag(P, body ? n : NULL, "endgeneration");
  }
  if (jp_is_name(t, "with")) {
    jnode *n = jp_mk(P, N_WITH, t);
    nvec v = {0};
    jp_vpush(P, &v, n); /* placeholder for the body */
    while (n && jp_cur(P)->kind != TK_BLOCK_END) {
      if (v.n > 1 && !jp_expect_op(P, ",")) return NULL;
      jnode *target = parse_target(P, false);
      if (!target || !jp_expect_op(P, "=")) return NULL;
      jnode *s = jp_node2(P, N_SET, target ? jp_cur(P) : t, target, jp_parse_expr(P));
      if (!jp_vpush(P, &v, s)) return NULL;
    }
    if (!block_end(P, n)) return NULL;
    static const char *const ends[] = {"endwith", NULL};
    if (!(v.v[0] = parse_body(P, ends))) return NULL;
    jp_with_kids(n, &v);
    return end_tag(P, n, "endwith");
  }
  if (jp_is_name(t, "filter")) {
    jnode *n = jp_mk(P, N_FILTER_BLOCK, t);
    jnode *hole = jp_mk(P, N_LITERAL, t);
    if (!n || !hole) return NULL;
    hole->lit = jv_none();
    const jtok *ft = jp_cur(P);
    if (ft->kind != TK_NAME) return jp_fail(P, ft, DI_ERR_FORMAT, "%s", "expected a filter name");
    P->pos++;
    if (!jbuiltin_has_filter(ft->s)) return jp_fail(P, ft, DI_ERR_UNSUPPORTED, "unsupported filter '%s'", ft->s);
    nvec fv = {0};
    jp_vpush(P, &fv, hole);
    if (jp_is_op(jp_cur(P), "(") && !jp_parse_call_args(P, &fv)) return NULL;
    jnode *f = jp_with_kids(jp_mk(P, N_FILTER, ft), &fv);
    if (!f) return NULL;
    f->name = ft->s;
    if (!block_end(P, n)) return NULL;
    static const char *const ends[] = {"endfilter", NULL};
    jnode *body = parse_body(P, ends);
    nvec v = {0};
    jp_vpush(P, &v, body);
    jp_vpush(P, &v, f);
    jp_with_kids(n, &v);
    return end_tag(P, body ? n : NULL, "endfilter");
  }
  if (!strncmp(t->s, "end", 3) || jp_is_name(t, "elif") || jp_is_name(t, "else"))
    return jp_fail(P, t, DI_ERR_FORMAT, "unexpected '%s' (no open block it could close)", t->s);
  return jp_fail(P, t, DI_ERR_UNSUPPORTED, "unsupported statement '%s'", t->s);
}

static bool is_end(const jtok *t, const char *const *ends) {
  if (!ends || t->kind != TK_NAME) return false;
  for (int i = 0; ends[i]; i++)
    if (jp_is_name(t, ends[i])) return true;
  return false;
}

static jnode *parse_body(parser *P, const char *const *ends) {
  if (!jp_enter(P)) return NULL;
  jnode *body = jp_mk(P, N_BODY, jp_cur(P));
  nvec v = {0};
  while (body && !P->err) {
    const jtok *t = jp_cur(P);
    if (t->kind == TK_EOF) {
      if (ends) {
        char m[96];
        snprintf(m, sizeof m, "unexpected end of template, expected '%s'", ends[0][0] == 'e' ? ends[0] : "end");
        for (int i = 0; ends[i]; i++)
          if (!strncmp(ends[i], "end", 3)) snprintf(m, sizeof m, "unexpected end of template, expected '%s'", ends[i]);
        LEAVE(P, jp_fail(P, t, DI_ERR_FORMAT, "%s", m));
      }
      break;
    }
    if (t->kind == TK_TEXT) {
      jnode *x = jp_mk(P, N_TEXT, t);
      if (!x) break;
      x->lit = jv_str(P->a, t->s, t->len, JT_CLEAN);
      jp_vpush(P, &v, x);
      P->pos++;
    } else if (t->kind == TK_VAR_BEGIN) {
      P->pos++;
      jnode *x = jp_node2(P, N_OUTPUT, t, jp_parse_tuple_or_expr(P, true), NULL);
      if (!x || !jp_expect_kind(P, TK_VAR_END, "'}}'")) break;
      jp_vpush(P, &v, x);
    } else if (t->kind == TK_BLOCK_BEGIN) {
      P->pos++;
      if (is_end(jp_cur(P), ends)) break;
      jnode *x = parse_statement(P);
      if (!x) break;
      jp_vpush(P, &v, x);
    } else {
      jp_fail(P, t, DI_ERR_FORMAT, "unexpected %s", jp_tok_desc(t));
      break;
    }
  }
  if (P->err) LEAVE(P, NULL);
  LEAVE(P, jp_with_kids(body, &v));
}

di_code jinja_parse(jarena *a, const jtok *toks, size_t n, jnode **root, di_status *st) {
  parser P = {.a = a, .t = toks, .n = n, .st = st};
  jnode *r = parse_body(&P, NULL);
  if (!r || P.err) return st->code ? st->code : DI_ERR_FORMAT;
  if (jp_cur(&P)->kind != TK_EOF) {
    jp_fail(&P, jp_cur(&P), DI_ERR_FORMAT, "unexpected '%s'", jp_cur(&P)->s ? jp_cur(&P)->s : "tag");
    return st->code;
  }
  *root = r;
  return DI_OK;
}
