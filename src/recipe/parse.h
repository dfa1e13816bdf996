/* Shared between the expression parser (parser.c) and the statement parser
 * (parse_stmt.c); internal to src/recipe. */
#ifndef DI_RECIPE_PARSE_H
#define DI_RECIPE_PARSE_H

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

const jtok *jp_cur(parser *P);
const jtok *jp_peek(parser *P, size_t k);
jnode *jp_fail(parser *P, const jtok *t, di_code code, const char *fmt, const char *arg);
bool jp_is_op(const jtok *t, const char *op);
bool jp_is_name(const jtok *t, const char *nm);
const char *jp_tok_desc(const jtok *t);
bool jp_expect_op(parser *P, const char *op);
bool jp_expect_kind(parser *P, int kind, const char *what);
jnode *jp_mk(parser *P, int kind, const jtok *t);
bool jp_vpush(parser *P, nvec *v, jnode *x);
jnode *jp_with_kids(jnode *n, nvec *v);
jnode *jp_node2(parser *P, int kind, const jtok *t, jnode *a, jnode *b);
const char *jp_dup_tok(parser *P, const jtok *t);
bool jp_enter(parser *P);
#define LEAVE(P, x) do { P->depth--; return (x); } while (0)

jnode *jp_parse_expr(parser *P);
jnode *jp_parse_or(parser *P);
jnode *jp_parse_tuple_or_expr(parser *P, bool condexpr);
bool jp_parse_call_args(parser *P, nvec *args);
jnode *jp_parse_filter_expr(parser *P, jnode *node);
jnode *jp_parse_postfix(parser *P, jnode *n);
jnode *jp_parse_primary(parser *P);
jnode *jp_parse_unary(parser *P, bool with_filter);

#endif
