/* Automata for string languages of the JSON Schema front end (see schema_lang.h). */
#include "grammar/schema_lang.h"

#include <stdlib.h>
#include <string.h>

#include "grammar/fsa.h"
#include "grammar/regex.h"

/* Charges n states to g's budget; DI_ERR_RANGE once it is spent. */
static di_code charge(gx *g, size_t n, di_status *st) {
  g->fsa_states += n;
  if (g->fsa_states <= SL_BUDGET) return DI_OK;
  return di_errorf(st, DI_ERR_RANGE, "patterns too large: more than %d automaton states for this schema", SL_BUDGET);
}

static uint32_t left(const gx *g) {
  size_t l = g->fsa_states >= SL_BUDGET ? 1 : SL_BUDGET - g->fsa_states;
  return (uint32_t)(l < SL_MAX_STATES ? l : SL_MAX_STATES);
}

static di_code expr_dfa(gx *g, int32_t e, ga *out, di_status *st) {
  di_code rc = ga_expr_dfa(g, e, left(g), out, st);
  if (!rc && (rc = charge(g, out->n_st, st))) ga_free(out);
  return rc;
}

di_code sl_product(gx *g, const ga *a, const ga *b, fsa_op op, ga *out, di_status *st) {
  di_code rc = fsa_product(a, b, op, left(g), out, st);
  if (!rc && (rc = charge(g, out->n_st, st))) ga_free(out);
  return rc;
}

di_code sl_regex_dfa(gx *g, const char *re, size_t len, di_status *st, ga *out) {
  /* one automaton: regex groups must not become rules here */
  bool split = g->split_groups;
  g->split_groups = false;
  int32_t e = rx_compile(g, re, len, true, gj_encode_chars, NULL, st);
  g->split_groups = split;
  if (e < 0) return st->code ? st->code : DI_ERR_INVALID;
  return expr_dfa(g, e, out, st);
}

di_code sl_length_dfa(gx *g, gjson *j, long long mn, long long mx, di_status *st, ga *out) {
  if (mx > 4000 || mn > 4000)
    return di_errorf(st, DI_ERR_UNSUPPORTED, "length bound %lld with a pattern or format is too large to enforce",
                     mx > mn ? mx : mn);
  int32_t e = gx_rep(g, gj_any_char(j), (int32_t)mn, (int32_t)mx);
  return expr_dfa(g, e, out, st);
}

di_code sl_names_dfa(gx *g, const char *const *names, size_t n, di_status *st, ga *out) {
  int32_t *alts = malloc(sizeof *alts * (n + 1));
  if (!alts) abort();
  for (size_t i = 0; i < n; i++) {
    gbuf b = {0};
    gj_quote(&b, names[i], strlen(names[i]));
    alts[i] = gx_lit(g, b.p + 1, b.n - 2);
    free(b.p);
  }
  int32_t e = gx_alt(g, alts, n);
  free(alts);
  return expr_dfa(g, e, out, st);
}

di_code sl_and(gx *g, ga *acc, const ga *b, fsa_op op, di_status *st) {
  ga r;
  di_code rc = sl_product(g, acc, b, op, &r, st);
  if (rc) return rc;
  ga_free(acc);
  *acc = r;
  return DI_OK;
}

bool sl_matches(const ga *d, const char *s, size_t n) {
  gbuf b = {0};
  gj_quote(&b, s, n);
  bool m = fsa_accepts(d, b.p + 1, b.n - 2);
  free(b.p);
  return m;
}
