/* JSON Schema strings and numbers (see schema.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/schema_sc.h"

/* ---- strings ---- */

/* A string under two or more of pattern, format and a length bound: the
 * product of their automata (each alone stays an expression). */
static int32_t string_intersection(sc *c, const json_t *pat, const char *fre, long long mn, long long mx) {
  ga acc = {0}, b = {0};
  di_code rc = DI_OK;
  bool have = false;
  if (json_is_string(pat)) {
    rc = sl_regex_dfa(c->g, json_string_value(pat), json_string_length(pat), c->st, &acc);
    have = true;
  }
  if (!rc && fre) {
    rc = sl_regex_dfa(c->g, fre, strlen(fre), c->st, have ? &b : &acc);
    if (!rc && have) rc = sl_and(c->g, &acc, &b, FSA_AND, c->st);
    ga_free(&b);
    have = true;
  }
  if (!rc && (mn > 0 || mx >= 0)) {
    rc = sl_length_dfa(c->g, &c->j, mn, mx, c->st, &b);
    if (!rc) rc = sl_and(c->g, &acc, &b, FSA_AND, c->st);
    ga_free(&b);
  }
  int32_t r = rc ? GX_NOTHING : fsa_to_gx(c->g, &acc);
  ga_free(&acc);
  if (rc) c->err = true;
  return r;
}

int32_t sc_string(sc *c, const json_t *s) {
  gx *g = c->g;
  const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
  const json_t *mnl = json_object_get(s, "minLength"), *mxl = json_object_get(s, "maxLength");
  long long mn = json_is_number(mnl) ? (long long)json_number_value(mnl) : 0;
  long long mx = json_is_number(mxl) ? (long long)json_number_value(mxl) : -1;
  /* the one assertion format whose language this engine cannot build: a
   * valid ECMAScript regex (nested groups and classes) */
  if (json_is_string(fmt) && !strcmp(json_string_value(fmt), "regex"))
    return sc_fail(c, DI_ERR_UNSUPPORTED, "format 'regex' is not supported (the validity of a regex is not enforced)");
  const char *fre = json_is_string(fmt) ? su_format_regex(json_string_value(fmt)) : NULL;
  int n_constraints = (json_is_string(pat) ? 1 : 0) + (fre ? 1 : 0) + (mn > 0 || mx >= 0 ? 1 : 0);
  int32_t body;
  if (n_constraints > 1) {
    body = string_intersection(c, pat, fre, mn, mx);
    if (c->err) return GX_NOTHING;
  } else if (json_is_string(pat) || fre) {
    const char *re = json_is_string(pat) ? json_string_value(pat) : fre;
    size_t rl = json_is_string(pat) ? json_string_length(pat) : strlen(re);
    body = rx_compile(g, re, rl, true, gj_encode_chars, NULL, c->st);
    if (body < 0) {
      c->err = true;
      return GX_NOTHING;
    }
  } else {
    if (mx > 100000) return sc_fail(c, DI_ERR_UNSUPPORTED, "maxLength %lld is too large to enforce", mx);
    if (mn > 100000) return sc_fail(c, DI_ERR_UNSUPPORTED, "minLength %lld is too large to enforce", mn);
    if (mn == 0 && mx < 0) return gj_any_string(&c->j);
    body = gx_rep(g, gj_any_char(&c->j), (int32_t)mn, (int32_t)mx);
  }
  return gx_seq3(g, gx_str(g, "\""), body, gx_str(g, "\""));
}

/* ---- numbers ---- */

bool sc_get_num(const json_t *s, const char *k, double *v) {
  const json_t *x = json_object_get(s, k);
  if (!json_is_number(x)) return false;
  *v = json_number_value(x);
  return true;
}

int32_t sc_integer(sc *c, const json_t *s) {
  double lo = 0, hi = 0, m = 0;
  bool has_lo = sc_get_num(s, "minimum", &lo), has_hi = sc_get_num(s, "maximum", &hi);
  long long L = 0, H = 0;
  /* draft-04 boolean exclusive*, later numeric */
  const json_t *exl = json_object_get(s, "exclusiveMinimum"), *exh = json_object_get(s, "exclusiveMaximum");
  if (has_lo) L = (long long)ceil(lo);
  if (json_is_true(exl) && has_lo && floor(lo) == lo) L++;
  if (json_is_number(exl)) {
    double e = json_number_value(exl);
    long long el = (long long)floor(e) + 1;
    if (!has_lo || el > L) L = el;
    has_lo = true;
  }
  if (has_hi) H = (long long)floor(hi);
  if (json_is_true(exh) && has_hi && floor(hi) == hi) H--;
  if (json_is_number(exh)) {
    double e = json_number_value(exh);
    long long eh = (long long)ceil(e) - 1;
    if (!has_hi || eh < H) H = eh;
    has_hi = true;
  }
  if (sc_get_num(s, "multipleOf", &m) && m != 1) {
    if (m == floor(m) && m > 0 && !has_lo && !has_hi && m <= 10 && (m == 2 || m == 5 || m == 10)) {
      /* the last digit decides */
      gx *g = c->g;
      int32_t lead = gx_seq2(g, gx_bytes(g, '1', '9'), gx_star(g, gx_bytes(g, '0', '9')));
      int32_t pos;
      if (m == 10) pos = gx_alt2(g, gx_str(g, "0"), gx_seq2(g, lead, gx_str(g, "0")));
      else if (m == 5) pos = gx_seq2(g, gx_opt(g, lead), gx_alt2(g, gx_str(g, "0"), gx_str(g, "5")));
      else pos = gx_seq2(g, gx_opt(g, lead), gx_alt(g, (int32_t[]){gx_str(g, "0"), gx_str(g, "2"), gx_str(g, "4"), gx_str(g, "6"), gx_str(g, "8")}, 5));
      return gx_seq2(g, gx_opt(g, gx_str(g, "-")), pos);
    }
    return sc_fail(c, DI_ERR_UNSUPPORTED, "multipleOf %g on integers is not supported", m);
  }
  if (!has_lo && !has_hi) return gj_integer(&c->j);
  return su_int_range(c->g, L, !has_lo, H, !has_hi);
}

/* Non-negative decimals w = I.f (no exponent) with lo (<, <=) w (<, <=) hi for
 * integer bounds (lo_inf / hi_inf: none). I in [a, hi - 1] takes any
 * fraction; I = hi only a zero one (hi inclusive); I = lo only a nonzero one
 * (lo exclusive). */
static int32_t nonneg_decimal(gx *g, long long lo, bool lo_x, bool lo_inf, long long hi, bool hi_x, bool hi_inf) {
  int32_t digit = gx_bytes(g, '0', '9');
  int32_t any_frac = gx_opt(g, gx_seq2(g, gx_str(g, "."), gx_plus(g, digit)));
  int32_t zero_frac = gx_opt(g, gx_seq2(g, gx_str(g, "."), gx_plus(g, gx_str(g, "0"))));
  int32_t nonzero_frac = gx_seq(g, (int32_t[]){gx_str(g, "."), gx_star(g, digit), gx_bytes(g, '1', '9'), gx_star(g, digit)}, 4);
  int32_t alts[3];
  size_t n = 0;
  long long a = lo_inf || lo < 0 ? 0 : lo_x ? lo + 1 : lo;
  if (hi_inf || a <= hi - 1) alts[n++] = gx_seq2(g, su_int_range(g, a, false, hi_inf ? 0 : hi - 1, hi_inf), any_frac);
  if (!hi_inf && !hi_x && hi >= 0 && (lo_inf || hi > lo || (hi == lo && !lo_x)))
    alts[n++] = gx_seq2(g, su_int_range(g, hi, false, hi, false), zero_frac);
  if (!lo_inf && lo_x && lo >= 0 && (hi_inf || hi >= lo + 1))
    alts[n++] = gx_seq2(g, su_int_range(g, lo, false, lo, false), nonzero_frac);
  return gx_alt(g, alts, n);
}

/* Bounds on a number: integer-valued ones are enforced exactly on decimals
 * without an exponent (an instance written with one, like 1e-05, is
 * refused: never an accepted value out of range); x >= 0 alone keeps the
 * exponent. */
int32_t sc_number(sc *c, const json_t *s) {
  static const char *kws[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"};
  bool any = false;
  for (size_t i = 0; i < 5; i++) any |= json_object_get(s, kws[i]) && !json_is_false(json_object_get(s, kws[i]));
  if (!any) return gj_number(&c->j);
  gx *g = c->g;
  if (json_object_get(s, "multipleOf")) return sc_fail(c, DI_ERR_UNSUPPORTED, "'multipleOf' on a number (not integer) is not supported");
  double d;
  if (sc_get_num(s, "minimum", &d) && d == 0 && !json_is_true(json_object_get(s, "exclusiveMinimum")) &&
      !json_object_get(s, "maximum") && !json_object_get(s, "exclusiveMaximum") &&
      !json_is_number(json_object_get(s, "exclusiveMinimum"))) {
    int32_t ip = gx_alt2(g, gx_str(g, "0"), gx_seq2(g, gx_bytes(g, '1', '9'), gx_star(g, gx_bytes(g, '0', '9'))));
    int32_t frac = gx_opt(g, gx_seq2(g, gx_str(g, "."), gx_plus(g, gx_bytes(g, '0', '9'))));
    int32_t ex = gx_opt(g, gx_seq3(g, gx_alt2(g, gx_str(g, "e"), gx_str(g, "E")),
                                   gx_opt(g, gx_alt2(g, gx_str(g, "+"), gx_str(g, "-"))), gx_plus(g, gx_bytes(g, '0', '9'))));
    return gx_seq3(g, ip, frac, ex);
  }
  /* the tightest of each side, draft-04 boolean exclusives or later numeric ones */
  bool lo_inf = true, hi_inf = true, lo_x = false, hi_x = false;
  double lo = 0, hi = 0;
  const json_t *exl = json_object_get(s, "exclusiveMinimum"), *exh = json_object_get(s, "exclusiveMaximum");
  if (sc_get_num(s, "minimum", &d)) lo = d, lo_inf = false, lo_x = json_is_true(exl);
  if (json_is_number(exl) && (lo_inf || json_number_value(exl) >= lo)) lo = json_number_value(exl), lo_inf = false, lo_x = true;
  if (sc_get_num(s, "maximum", &d)) hi = d, hi_inf = false, hi_x = json_is_true(exh);
  if (json_is_number(exh) && (hi_inf || json_number_value(exh) <= hi)) hi = json_number_value(exh), hi_inf = false, hi_x = true;
  const char *which = lo_inf ? "maximum" : "minimum";
  if ((!lo_inf && (lo != floor(lo) || fabs(lo) > 1e15)) || (!hi_inf && (hi != floor(hi) || fabs(hi) > 1e15)))
    return sc_fail(c, DI_ERR_UNSUPPORTED, "'%s' on a number with a bound that is not an integer is not supported", which);
  long long L = (long long)lo, H = (long long)hi;
  /* negative texts: -w with -hi (<, <=) w (<, <=) -lo */
  int32_t pos = nonneg_decimal(g, L, lo_x, lo_inf, H, hi_x, hi_inf);
  int32_t neg = nonneg_decimal(g, -H, hi_x, hi_inf, -L, lo_x, lo_inf);
  return gx_alt2(g, pos, gx_seq2(g, gx_str(g, "-"), neg));
}
