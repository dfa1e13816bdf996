/* JSON Schema -> grammar. Each schema node becomes an expression; $ref
 * targets become rules (so recursion works); allOf and $ref-with-siblings
 * are merged first; anyOf/oneOf take their siblings into every branch.
 * Validity keywords that cannot be enforced are compile errors naming them.
 * oneOf compiles as anyOf when its branches provably exclude each other
 * (su_all_disjoint); a oneOf whose branches list required properties
 * ("exactly one of these") is enforced exactly (compile_oneof_required); any
 * other oneOf is a compile error, since accepting an instance that matches
 * two branches would let invalid output through. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"
#include "grammar/json.h"
#include "grammar/regex.h"
#include "grammar/schema_lang.h"
#include "grammar/schema_util.h"

typedef struct refent {
  const json_t *node;
  int32_t rule;
} refent;

typedef struct sc {
  gx *g;
  gjson j;
  const json_t *root;
  di_status *st;
  bool err;
  refent *refs;
  size_t n_refs, cap_refs;
  int depth;
  size_t steps;
} sc;

enum { MAX_DEPTH = 96, MAX_STEPS = 200000 };

static int32_t fail(sc *c, di_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int32_t fail(sc *c, di_code code, const char *fmt, ...) {
  if (!c->err) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    di_errorf(c->st, code, "JSON Schema: %s", msg);
  }
  c->err = true;
  return GX_NOTHING;
}

static int32_t compile(sc *c, const json_t *s);
static bool compile_oneof(sc *c, const json_t *s, int32_t *out);

static int32_t any_value(sc *c) { return gj_any_value(&c->j); }

/* A schema reached through $ref: one rule per target node. */
static int32_t ref_rule(sc *c, const json_t *target, const char *ref) {
  for (size_t i = 0; i < c->n_refs; i++)
    if (c->refs[i].node == target) return gx_ref(c->g, c->refs[i].rule);
  if (c->n_refs == c->cap_refs) {
    c->cap_refs = c->cap_refs ? c->cap_refs * 2 : 16;
    c->refs = realloc(c->refs, c->cap_refs * sizeof *c->refs);
    if (!c->refs) abort();
  }
  int32_t r = gx_rule_new(c->g, ref);
  c->refs[c->n_refs++] = (refent){.node = target, .rule = r};
  gx_rule_define(c->g, r, compile(c, target));
  return gx_ref(c->g, r);
}

static bool only_annotations_besides(const json_t *s, const char *a, const char *b) {
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)s, k, v) {
    if (!strcmp(k, a) || (b && !strcmp(k, b)) || su_is_annotation(k)) continue;
    return false;
  }
  return true;
}

static json_t *without(const json_t *s, const char *key) {
  json_t *r = json_copy((json_t *)s);
  json_object_del(r, key);
  return r;
}

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
    if (!rc && have) rc = sl_and(&acc, &b, FSA_AND, c->st);
    ga_free(&b);
    have = true;
  }
  if (!rc && (mn > 0 || mx >= 0)) {
    rc = sl_length_dfa(c->g, &c->j, mn, mx, c->st, &b);
    if (!rc) rc = sl_and(&acc, &b, FSA_AND, c->st);
    ga_free(&b);
  }
  int32_t r = rc ? GX_NOTHING : fsa_to_gx(c->g, &acc);
  ga_free(&acc);
  if (rc) c->err = true;
  return r;
}

static int32_t compile_string(sc *c, const json_t *s) {
  gx *g = c->g;
  const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
  const json_t *mnl = json_object_get(s, "minLength"), *mxl = json_object_get(s, "maxLength");
  long long mn = json_is_number(mnl) ? (long long)json_number_value(mnl) : 0;
  long long mx = json_is_number(mxl) ? (long long)json_number_value(mxl) : -1;
  /* the one assertion format whose language this engine cannot build: a
   * valid ECMAScript regex (nested groups and classes) */
  if (json_is_string(fmt) && !strcmp(json_string_value(fmt), "regex"))
    return fail(c, DI_ERR_UNSUPPORTED, "format 'regex' is not supported (the validity of a regex is not enforced)");
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
    if (mx > 100000) return fail(c, DI_ERR_UNSUPPORTED, "maxLength %lld is too large to enforce", mx);
    if (mn > 100000) return fail(c, DI_ERR_UNSUPPORTED, "minLength %lld is too large to enforce", mn);
    if (mn == 0 && mx < 0) return gj_any_string(&c->j);
    body = gx_rep(g, gj_any_char(&c->j), (int32_t)mn, (int32_t)mx);
  }
  return gx_seq3(g, gx_str(g, "\""), body, gx_str(g, "\""));
}

/* ---- numbers ---- */

static bool get_num(const json_t *s, const char *k, double *v) {
  const json_t *x = json_object_get(s, k);
  if (!json_is_number(x)) return false;
  *v = json_number_value(x);
  return true;
}

static int32_t compile_integer(sc *c, const json_t *s) {
  double lo = 0, hi = 0, m = 0;
  bool has_lo = get_num(s, "minimum", &lo), has_hi = get_num(s, "maximum", &hi);
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
  if (get_num(s, "multipleOf", &m) && m != 1) {
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
    return fail(c, DI_ERR_UNSUPPORTED, "multipleOf %g on integers is not supported", m);
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
static int32_t compile_number(sc *c, const json_t *s) {
  static const char *kws[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"};
  bool any = false;
  for (size_t i = 0; i < 5; i++) any |= json_object_get(s, kws[i]) && !json_is_false(json_object_get(s, kws[i]));
  if (!any) return gj_number(&c->j);
  gx *g = c->g;
  if (json_object_get(s, "multipleOf")) return fail(c, DI_ERR_UNSUPPORTED, "'multipleOf' on a number (not integer) is not supported");
  double d;
  if (get_num(s, "minimum", &d) && d == 0 && !json_is_true(json_object_get(s, "exclusiveMinimum")) &&
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
  if (get_num(s, "minimum", &d)) lo = d, lo_inf = false, lo_x = json_is_true(exl);
  if (json_is_number(exl) && (lo_inf || json_number_value(exl) >= lo)) lo = json_number_value(exl), lo_inf = false, lo_x = true;
  if (get_num(s, "maximum", &d)) hi = d, hi_inf = false, hi_x = json_is_true(exh);
  if (json_is_number(exh) && (hi_inf || json_number_value(exh) <= hi)) hi = json_number_value(exh), hi_inf = false, hi_x = true;
  const char *which = lo_inf ? "maximum" : "minimum";
  if ((!lo_inf && (lo != floor(lo) || fabs(lo) > 1e15)) || (!hi_inf && (hi != floor(hi) || fabs(hi) > 1e15)))
    return fail(c, DI_ERR_UNSUPPORTED, "'%s' on a number with a bound that is not an integer is not supported", which);
  long long L = (long long)lo, H = (long long)hi;
  /* negative texts: -w with -hi (<, <=) w (<, <=) -lo */
  int32_t pos = nonneg_decimal(g, L, lo_x, lo_inf, H, hi_x, hi_inf);
  int32_t neg = nonneg_decimal(g, -H, hi_x, hi_inf, -L, lo_x, lo_inf);
  return gx_alt2(g, pos, gx_seq2(g, gx_str(g, "-"), neg));
}

/* ---- objects ---- */

/* Keys that are not one of names[] (quoted, escaped). Walks a trie of the
 * names code point by code point: leaving it at any point gives a free string. */
typedef struct kt {
  const char **names;
  size_t n;
} kt;

static int32_t key_excl(sc *c, const kt *t, const size_t *idx, size_t n_idx, size_t off, int depth, int32_t rest) {
  gx *g = c->g;
  if (n_idx == 0 || depth > 256) return rest;
  int32_t *alts = malloc(sizeof *alts * (n_idx + 2));
  size_t na = 0;
  bool ends = false;
  gx_cpset used = {0};
  size_t *sub = malloc(sizeof *sub * n_idx);
  for (size_t i = 0; i < n_idx; i++) {
    const char *nm = t->names[idx[i]];
    if (!nm[off]) {
      ends = true;
      continue;
    }
    /* the next code point of this name */
    unsigned char b0 = (unsigned char)nm[off];
    size_t L = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    uint32_t cp = L == 1 ? b0 : b0 & (0x3F >> (L - 1));
    for (size_t k = 1; k < L && nm[off + k]; k++) cp = cp << 6 | ((unsigned char)nm[off + k] & 0x3F);
    bool seen = false;
    for (size_t u = 0; u < used.n; u++) seen |= used.r[u][0] == cp;
    if (seen) continue;
    gx_cpset_add(&used, cp, cp);
    size_t ns = 0;
    for (size_t k = 0; k < n_idx; k++)
      if (!strncmp(t->names[idx[k]] + off, nm + off, L) && strlen(t->names[idx[k]] + off) >= L) sub[ns++] = idx[k];
    gx_cpset one = {0};
    gx_cpset_add(&one, cp, cp);
    int32_t ch = gj_encode_chars(g, &one, NULL);
    gx_cpset_free(&one);
    size_t *copy = malloc(sizeof *copy * (ns ? ns : 1));
    memcpy(copy, sub, ns * sizeof *copy);
    alts[na++] = gx_seq2(g, ch, key_excl(c, t, copy, ns, off + L, depth + 1, rest));
    free(copy);
    if (na + 2 > n_idx + 2) break;
  }
  if (!ends) alts[na++] = gx_str(g, "\"");
  gx_cpset_negate(&used);
  int32_t other = gj_encode_chars(g, &used, NULL);
  gx_cpset_free(&used);
  alts[na++] = gx_seq2(g, other, rest);
  int32_t r = gx_alt(g, alts, na);
  free(alts);
  free(sub);
  return r;
}

static int32_t as_rule(sc *c, const char *name, int32_t e, size_t nodes_before) {
  if (c->g->n_nodes - nodes_before < 24) return e;
  int32_t r = gx_rule_new(c->g, name);
  gx_rule_define(c->g, r, e);
  return gx_ref(c->g, r);
}

/* The members of an object in the order perm: each optional one may be
 * left out, the extras (if any) come last. */
static int32_t members(sc *c, const int32_t *kv, const bool *required, const size_t *perm, size_t n, int32_t extra) {
  gx *g = c->g;
  /* B_i: members i.. after something was written, each preceded by ", "
   * (rules, so the "first member" choice below shares them) */
  int32_t comma = gj_comma(&c->j);
  int32_t tail = extra == GX_NOTHING ? GX_EMPTY : gx_star(g, gx_seq2(g, comma, extra));
  int32_t *B = malloc(sizeof *B * (n + 2));
  B[n] = tail;
  size_t first_req = n;
  for (size_t i = 0; i < n; i++)
    if (required[perm[i]]) {
      first_req = i;
      break;
    }
  for (size_t i = n; i-- > 0;) {
    int32_t m = gx_seq2(g, comma, kv[perm[i]]);
    int32_t e = gx_seq2(g, required[perm[i]] ? m : gx_opt(g, m), B[i + 1]);
    if (i <= first_req + 1 && i > 0 && first_req > 0) {
      int32_t r = gx_rule_new(g, "members");
      gx_rule_define(g, r, e);
      e = gx_ref(g, r);
    }
    B[i] = e;
  }
  /* the first member written: member j (all before it optional), or an extra */
  int32_t *alts = malloc(sizeof *alts * (n + 2));
  size_t na = 0;
  for (size_t j = 0; j <= first_req && j < n; j++) alts[na++] = gx_seq2(g, kv[perm[j]], B[j + 1]);
  if (first_req == n) {
    if (extra != GX_NOTHING) alts[na++] = gx_seq2(g, extra, tail);
    alts[na++] = GX_EMPTY;
  }
  int32_t r = gx_alt(g, alts, na);
  free(alts);
  free(B);
  return r;
}

/* What patternProperties and propertyNames say about keys: an automaton per
 * pattern (key contents, search semantics) and one of the names
 * propertyNames allows. */
enum { MAX_KEY_PATTERNS = 6 }; /* regions: every subset of patterns a key may match */
typedef struct keyrules {
  size_t n;
  const json_t *sch[MAX_KEY_PATTERNS];
  ga k[MAX_KEY_PATTERNS];
  ga pn;
  bool has_pn;
} keyrules;

static void keyrules_free(keyrules *kr) {
  for (size_t i = 0; i < kr->n; i++) ga_free(&kr->k[i]);
  ga_free(&kr->pn);
}

/* false (c->err set) when a keyword cannot be enforced */
static bool key_rules(sc *c, const json_t *pprops, const json_t *pnames, keyrules *kr) {
  if (json_is_object(pprops) && json_object_size(pprops) > MAX_KEY_PATTERNS) {
    fail(c, DI_ERR_UNSUPPORTED, "'patternProperties' with more than %d patterns is not supported", MAX_KEY_PATTERNS);
    return false;
  }
  const char *pk;
  json_t *pv;
  if (json_is_object(pprops))
    json_object_foreach((json_t *)pprops, pk, pv) {
      if (sl_regex_dfa(c->g, pk, strlen(pk), c->st, &kr->k[kr->n])) {
        c->err = true;
        keyrules_free(kr);
        return false;
      }
      kr->sch[kr->n++] = pv;
    }
  if (!pnames || json_is_true(pnames) || (json_is_object(pnames) && only_annotations_besides(pnames, "type", NULL)))
    return true;
  /* names as strings under pattern / format / length bounds */
  const json_t *t = json_is_object(pnames) ? json_object_get(pnames, "type") : NULL;
  const char *kw;
  json_t *kv;
  bool ok = json_is_object(pnames) && (!t || (json_is_string(t) && !strcmp(json_string_value(t), "string")));
  if (ok)
    json_object_foreach((json_t *)pnames, kw, kv) ok &= su_is_annotation(kw) || !strcmp(kw, "type") ||
                                                       !strcmp(kw, "pattern") || !strcmp(kw, "minLength") ||
                                                       !strcmp(kw, "maxLength") || !strcmp(kw, "format");
  const json_t *pat = ok ? json_object_get(pnames, "pattern") : NULL, *fmt = ok ? json_object_get(pnames, "format") : NULL;
  const char *fre = json_is_string(fmt) ? su_format_regex(json_string_value(fmt)) : NULL;
  if (!ok || (pat && !json_is_string(pat)) || (fmt && !fre)) {
    keyrules_free(kr);
    fail(c, DI_ERR_UNSUPPORTED, "'propertyNames' is only supported with pattern, format, minLength and maxLength");
    return false;
  }
  double d;
  long long mn = get_num(pnames, "minLength", &d) ? (long long)d : 0, mx = get_num(pnames, "maxLength", &d) ? (long long)d : -1;
  ga b = {0};
  di_code rc = sl_length_dfa(c->g, &c->j, mn, mx, c->st, &kr->pn);
  if (!rc && pat) {
    rc = sl_regex_dfa(c->g, json_string_value(pat), json_string_length(pat), c->st, &b);
    if (!rc) rc = sl_and(&kr->pn, &b, FSA_AND, c->st);
    ga_free(&b);
  }
  if (!rc && fre) {
    rc = sl_regex_dfa(c->g, fre, strlen(fre), c->st, &b);
    if (!rc) rc = sl_and(&kr->pn, &b, FSA_AND, c->st);
    ga_free(&b);
  }
  kr->has_pn = true;
  if (rc) {
    c->err = true;
    keyrules_free(kr);
    return false;
  }
  return true;
}

/* The schema of a member named name: ps (NULL: none) and that of every
 * pattern the name matches, merged; owned copies go to *owned. NULL with
 * c->err set if they cannot be merged. */
static const json_t *with_patterns(sc *c, const keyrules *kr, const char *name, const json_t *ps, json_t **owned) {
  json_t *m = NULL;
  for (size_t k = 0; k < kr->n; k++) {
    if (!sl_matches(&kr->k[k], name, strlen(name))) continue;
    if (!ps) {
      ps = kr->sch[k];
      continue;
    }
    json_t *nm = su_merge(ps, kr->sch[k], c->st);
    json_decref(m);
    if (!nm) {
      c->err = true;
      return NULL;
    }
    ps = m = nm;
  }
  if (m) json_array_append_new(*owned, m);
  return ps;
}

/* Members beyond the named ones: a key in each nonempty region (the
 * patterns it matches and those it does not, names left out, within
 * propertyNames) with the merged schema of the patterns it matches, or
 * additionalProperties where it matches none. */
static int32_t key_regions(sc *c, const keyrules *kr, const char *const *names, size_t n, const json_t *addl) {
  gx *g = c->g;
  ga base = {0}, nm = {0};
  di_code rc = sl_length_dfa(g, &c->j, 0, -1, c->st, &base);
  if (!rc && kr->has_pn) rc = sl_and(&base, &kr->pn, FSA_AND, c->st);
  if (!rc) rc = sl_names_dfa(g, names, n, c->st, &nm);
  if (!rc) rc = sl_and(&base, &nm, FSA_AND_NOT, c->st);
  ga_free(&nm);
  int32_t alts[1 << MAX_KEY_PATTERNS];
  size_t na = 0;
  for (uint32_t set = 0; !rc && !c->err && set < (1u << kr->n); set++) {
    if (set == 0 && json_is_false(addl)) continue;
    ga r = {0};
    const ga *cur = &base;
    for (size_t k = 0; !rc && k < kr->n; k++) {
      ga nx;
      rc = fsa_product(cur, &kr->k[k], set >> k & 1 ? FSA_AND : FSA_AND_NOT, SL_MAX_STATES, &nx, c->st);
      ga_free(&r);
      if (!rc) r = nx, cur = &r;
    }
    if (rc || fsa_empty(cur)) {
      ga_free(&r);
      continue;
    }
    json_t *vs = NULL;
    for (size_t k = 0; k < kr->n && !c->err; k++) {
      if (!(set >> k & 1)) continue;
      json_t *m = vs ? su_merge(vs, kr->sch[k], c->st) : json_incref((json_t *)kr->sch[k]);
      json_decref(vs);
      vs = m;
      if (!m) c->err = true;
    }
    if (!c->err) {
      int32_t key = gx_seq3(g, gx_str(g, "\""), fsa_to_gx(g, cur), gx_str(g, "\""));
      size_t before = g->n_nodes;
      int32_t val = set ? compile(c, vs) : addl && !json_is_true(addl) ? compile(c, addl) : any_value(c);
      val = as_rule(c, "additional", val, before);
      alts[na++] = gx_seq3(g, key, gj_colon(&c->j), val);
    }
    json_decref(vs);
    ga_free(&r);
  }
  ga_free(&base);
  if (rc) c->err = true;
  return c->err ? GX_NOTHING : gx_alt(g, alts, na);
}

static int32_t compile_object(sc *c, const json_t *s) {
  gx *g = c->g;
  static const char *unsupported[] = {"dependencies", "dependentRequired", "dependentSchemas",
                                      "unevaluatedProperties"};
  for (size_t i = 0; i < 4; i++) {
    const json_t *v = json_object_get(s, unsupported[i]);
    if (v && !(json_is_object(v) && json_object_size(v) == 0) && !json_is_true(v))
      return fail(c, DI_ERR_UNSUPPORTED, "'%s' is not supported", unsupported[i]);
  }
  const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
  const json_t *addl = json_object_get(s, "additionalProperties");
  const json_t *pprops = json_object_get(s, "patternProperties");
  const json_t *pnames = json_object_get(s, "propertyNames");
  bool addl_false = json_is_false(addl);
  keyrules kr = {0};
  if (!key_rules(c, pprops, pnames, &kr)) return GX_NOTHING;
  bool has_pp = kr.n > 0;
  /* Member order: the required properties in the order `required` lists
   * them, then the optional ones in the order of `properties` (what
   * MaskBench's instances and common engines use). */
  size_t np = json_is_object(props) ? json_object_size(props) : 0, nr = json_array_size(req);
  const char **names = calloc(np + nr + 1, sizeof *names);
  const json_t **schemas = calloc(np + nr + 1, sizeof *schemas);
  bool *required = calloc(np + nr + 1, 1);
  size_t n = 0;
  int32_t result = GX_NOTHING;
  json_t *owned = json_array(); /* merged property schemas */
  for (size_t i = 0; i < nr; i++) {
    const char *rn = json_string_value(json_array_get(req, i));
    if (!rn) {
      fail(c, DI_ERR_INVALID, "'required' must list strings");
      goto out;
    }
    bool dup = false;
    for (size_t k = 0; k < n; k++) dup |= !strcmp(names[k], rn);
    if (dup) continue;
    const json_t *ps = np ? json_object_get(props, rn) : NULL;
    if (kr.has_pn && !sl_matches(&kr.pn, rn, strlen(rn))) goto out; /* a required name propertyNames forbids */
    bool by_pattern = false;
    for (size_t k = 0; k < kr.n; k++) by_pattern |= sl_matches(&kr.k[k], rn, strlen(rn));
    if (!ps && !by_pattern) {
      if (addl_false) goto out; /* required but not allowed: no object fits */
      ps = addl ? addl : json_true();
    }
    ps = with_patterns(c, &kr, rn, ps, &owned);
    if (!ps) goto out;
    names[n] = rn;
    schemas[n] = ps;
    required[n++] = true;
  }
  if (np) {
    const char *k;
    json_t *pv;
    json_object_foreach((json_t *)props, k, pv) {
      bool dup = false;
      for (size_t i = 0; i < n && !dup; i++) dup = required[i] && !strcmp(names[i], k);
      if (dup || (kr.has_pn && !sl_matches(&kr.pn, k, strlen(k)))) continue;
      const json_t *ps = with_patterns(c, &kr, k, pv, &owned);
      if (!ps) goto out;
      names[n] = k;
      schemas[n++] = ps;
    }
  }
  const json_t *v;
  double d;
  size_t n_req = 0;
  for (size_t i = 0; i < n; i++) n_req += required[i];
  if (get_num(s, "minProperties", &d) && d > (double)n_req) {
    fail(c, DI_ERR_UNSUPPORTED, "'minProperties' beyond the required properties is not supported");
    goto out;
  }
  if (get_num(s, "maxProperties", &d) && (!addl_false || has_pp || d < (double)n)) {
    fail(c, DI_ERR_UNSUPPORTED, "'maxProperties' is not supported");
    goto out;
  }
  (void)v;
  /* the extra members */
  int32_t extra = GX_NOTHING;
  if (has_pp || kr.has_pn) {
    extra = key_regions(c, &kr, names, n, addl);
    if (c->err) goto out;
  } else if (!addl_false) {
    kt t = {.names = names, .n = n};
    size_t *idx = malloc(sizeof *idx * (n + 1));
    for (size_t i = 0; i < n; i++) idx[i] = i;
    size_t before = g->n_nodes;
    /* past the names: any characters, then the closing quote */
    int32_t rest = gx_seq2(g, gx_star(g, gj_any_char(&c->j)), gx_str(g, "\""));
    int32_t key = gx_seq2(g, gx_str(g, "\""), key_excl(c, &t, idx, n, 0, 0, rest));
    free(idx);
    key = as_rule(c, "key", key, before);
    before = g->n_nodes;
    int32_t val = addl && !json_is_true(addl) ? compile(c, addl) : any_value(c);
    val = as_rule(c, "additional", val, before);
    extra = gx_seq3(g, key, gj_colon(&c->j), val);
  }
  /* members */
  int32_t *kv = calloc(n + 1, sizeof *kv);
  for (size_t i = 0; i < n; i++) {
    gbuf b = {0};
    gj_quote(&b, names[i], strlen(names[i]));
    int32_t key = gx_lit(g, b.p, b.n);
    free(b.p);
    size_t before = g->n_nodes;
    int32_t val = compile(c, schemas[i]);
    char rn[64];
    snprintf(rn, sizeof rn, "prop:%.50s", names[i]);
    val = as_rule(c, rn, val, before);
    kv[i] = gx_seq3(g, key, gj_colon(&c->j), val);
  }
  /* Two member orders are accepted: required-first (above) and the order of
   * `properties`; instances in the wild use both, and both are valid. */
  size_t *perm = calloc(n + 1, sizeof *perm), *perm2 = calloc(n + 1, sizeof *perm2), k2 = 0;
  for (size_t i = 0; i < n; i++) perm[i] = i;
  if (np) {
    const char *pk;
    json_t *pv;
    json_object_foreach((json_t *)props, pk, pv)
      for (size_t i = 0; i < n; i++)
        if (!strcmp(names[i], pk)) {
          perm2[k2++] = i;
          break;
        }
  }
  for (size_t i = 0; i < n; i++) {
    bool in = false;
    for (size_t k = 0; k < k2 && !in; k++) in = perm2[k] == i;
    if (!in) perm2[k2++] = i;
  }
  int32_t content = members(c, kv, required, perm, n, extra);
  if (memcmp(perm, perm2, n * sizeof *perm))
    content = gx_alt2(g, content, members(c, kv, required, perm2, n, extra));
  free(perm);
  free(perm2);
  result = gx_seq3(g, gj_open(&c->j, '{'), content, gj_close(&c->j, '}'));
  free(kv);
out:
  free(names);
  free(schemas);
  free(required);
  json_decref(owned);
  keyrules_free(&kr);
  return result;
}

/* ---- arrays ---- */

static int32_t compile_array(sc *c, const json_t *s) {
  gx *g = c->g;
  const json_t *v;
  if ((v = json_object_get(s, "contains")) && !json_is_true(v) && !(json_is_object(v) && json_object_size(v) == 0))
    return fail(c, DI_ERR_UNSUPPORTED, "'contains' is not supported");
  if ((v = json_object_get(s, "unevaluatedItems")) && !json_is_true(v))
    return fail(c, DI_ERR_UNSUPPORTED, "'unevaluatedItems' is not supported");
  double d;
  long long mn = get_num(s, "minItems", &d) ? (long long)d : 0;
  long long mx = get_num(s, "maxItems", &d) ? (long long)d : -1;
  if (json_is_true(json_object_get(s, "uniqueItems")) && !(mx >= 0 && mx <= 1))
    return fail(c, DI_ERR_UNSUPPORTED, "'uniqueItems' is not supported");
  if (mn > 2000 || mx > 2000) return fail(c, DI_ERR_UNSUPPORTED, "minItems/maxItems above 2000 are not supported");
  const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
  const json_t *rest_s = NULL;
  const json_t *tuple = NULL;
  if (json_is_array(prefix)) {
    tuple = prefix;
    rest_s = items;
  } else if (json_is_array(items)) {
    tuple = items;
    rest_s = json_object_get(s, "additionalItems");
  } else {
    rest_s = items;
  }
  size_t k = json_array_size(tuple);
  int32_t rest = rest_s && !json_is_true(rest_s) ? compile(c, rest_s) : any_value(c);
  if (json_is_false(rest_s) || rest == GX_NOTHING) {
    if (mx < 0 || mx > (long long)k) mx = (long long)k;
    rest = GX_NOTHING;
  }
  if (mx >= 0 && mn > mx) return GX_NOTHING;
  int32_t comma = gj_comma(&c->j);
  /* items after the tuple: rest repeated, each after ", " */
  long long rlo = mn > (long long)k ? mn - (long long)k : 0, rhi = mx < 0 ? -1 : mx - (long long)k;
  if (rhi >= 0 && rhi < rlo) return GX_NOTHING;
  int32_t after = rest == GX_NOTHING ? GX_EMPTY : gx_rep(g, gx_seq2(g, comma, rest), (int32_t)rlo, (int32_t)rhi);
  int32_t content;
  if (k == 0) {
    if (rest == GX_NOTHING) content = GX_EMPTY;
    else {
      int32_t more = gx_rep(g, gx_seq2(g, comma, rest), mn > 0 ? (int32_t)mn - 1 : 0, mx < 0 ? -1 : (int32_t)mx - 1);
      content = gx_seq2(g, rest, more);
      if (mn == 0) content = gx_opt(g, content);
    }
  } else {
    /* tuple items nest: item i is optional when i >= minItems */
    int32_t tailx = after;
    for (size_t i = k; i-- > 0;) {
      int32_t it = compile(c, json_array_get(tuple, i));
      int32_t e = gx_seq2(g, i ? gx_seq2(g, comma, it) : it, tailx);
      tailx = (long long)i >= mn ? gx_opt(g, e) : e;
      if (mx >= 0 && (long long)i >= mx) tailx = GX_EMPTY;
    }
    content = tailx;
  }
  return gx_seq3(g, gj_open(&c->j, '['), content, gj_close(&c->j, ']'));
}

/* ---- dispatch ---- */

static const char *type_names[] = {"null", "boolean", "object", "array", "string", "integer", "number"};

static int32_t compile_type(sc *c, const json_t *s, const char *t) {
  gx *g = c->g;
  if (!strcmp(t, "null")) return gx_str(g, "null");
  if (!strcmp(t, "boolean")) return gx_alt2(g, gx_str(g, "true"), gx_str(g, "false"));
  if (!strcmp(t, "string")) return compile_string(c, s);
  if (!strcmp(t, "integer")) return compile_integer(c, s);
  if (!strcmp(t, "number")) return compile_number(c, s);
  if (!strcmp(t, "object")) return compile_object(c, s);
  if (!strcmp(t, "array")) return compile_array(c, s);
  return fail(c, DI_ERR_INVALID, "unknown type '%s'", t);
}

static bool value_has_type(const json_t *v, const char *t) {
  switch (json_typeof(v)) {
  case JSON_NULL: return !strcmp(t, "null");
  case JSON_TRUE:
  case JSON_FALSE: return !strcmp(t, "boolean");
  case JSON_STRING: return !strcmp(t, "string");
  case JSON_INTEGER: return !strcmp(t, "integer") || !strcmp(t, "number");
  case JSON_REAL: return !strcmp(t, "number") || (!strcmp(t, "integer") && json_real_value(v) == floor(json_real_value(v)));
  case JSON_OBJECT: return !strcmp(t, "object");
  case JSON_ARRAY: return !strcmp(t, "array");
  }
  return false;
}

static int32_t compile_obj(sc *c, const json_t *s) {
  gx *g = c->g;
  const json_t *v;
  /* $ref */
  if ((v = json_object_get(s, "$ref"))) {
    if (!json_is_string(v)) return fail(c, DI_ERR_INVALID, "'$ref' must be a string");
    const json_t *t = su_resolve(c->root, json_string_value(v), c->st);
    if (!t) return c->err = true, GX_NOTHING;
    if (only_annotations_besides(s, "$ref", NULL)) return ref_rule(c, t, json_string_value(v));
    json_t *rest = without(s, "$ref");
    json_t *m = su_merge(t, rest, c->st);
    json_decref(rest);
    if (!m) return c->err = true, GX_NOTHING;
    int32_t r = compile(c, m);
    json_decref(m);
    return r;
  }
  /* allOf: merged into one schema */
  if ((v = json_object_get(s, "allOf"))) {
    if (!json_is_array(v)) return fail(c, DI_ERR_INVALID, "'allOf' must be an array");
    json_t *m = without(s, "allOf");
    for (size_t i = 0; i < json_array_size(v) && m; i++) {
      const json_t *e = json_array_get(v, i);
      json_t *owned = NULL;
      while (json_is_object(e) && json_is_string(json_object_get(e, "$ref")) && c->depth < MAX_DEPTH) {
        const json_t *t = su_resolve(c->root, json_string_value(json_object_get(e, "$ref")), c->st);
        if (!t) {
          json_decref(m);
          json_decref(owned);
          return c->err = true, GX_NOTHING;
        }
        json_t *rest = without(e, "$ref");
        json_t *nx = su_merge(t, rest, c->st);
        json_decref(rest);
        json_decref(owned);
        owned = nx;
        e = nx;
        c->depth++;
        if (!nx) break;
      }
      json_t *nm = e ? su_merge(m, e, c->st) : NULL;
      json_decref(owned);
      json_decref(m);
      m = nm;
    }
    if (!m) return c->err = true, GX_NOTHING;
    int32_t r = compile(c, m);
    json_decref(m);
    return r;
  }
  /* anyOf / oneOf: siblings go into every branch */
  const char *which = json_object_get(s, "anyOf") ? "anyOf" : json_object_get(s, "oneOf") ? "oneOf" : NULL;
  int32_t one;
  if (which && !strcmp(which, "oneOf") && compile_oneof(c, s, &one)) return one;
  if (which) {
    v = json_object_get(s, which);
    if (!json_is_array(v) || json_array_size(v) == 0) return fail(c, DI_ERR_INVALID, "'%s' must be a non-empty array", which);
    json_t *rest = without(s, which);
    bool plain = only_annotations_besides(rest, "", NULL);
    size_t n = json_array_size(v);
    int32_t *alts = malloc(sizeof *alts * n);
    for (size_t i = 0; i < n && !c->err; i++) {
      if (plain) {
        alts[i] = compile(c, json_array_get(v, i));
        continue;
      }
      json_t *m = su_merge(rest, json_array_get(v, i), c->st);
      if (!m) {
        c->err = true;
        alts[i] = GX_NOTHING;
        break;
      }
      alts[i] = compile(c, m);
      json_decref(m);
    }
    json_decref(rest);
    int32_t r = c->err ? GX_NOTHING : gx_alt(g, alts, n);
    free(alts);
    return r;
  }
  /* types in play */
  bool allowed[7];
  const json_t *t = json_object_get(s, "type");
  for (int i = 0; i < 7; i++) allowed[i] = t == NULL;
  if (json_is_string(t) || json_is_array(t)) {
    for (size_t k = 0; k < (json_is_array(t) ? json_array_size(t) : 1); k++) {
      const char *tn = json_string_value(json_is_array(t) ? json_array_get(t, k) : t);
      bool known = false;
      for (int i = 0; tn && i < 7; i++)
        if (!strcmp(tn, type_names[i])) allowed[i] = known = true;
      if (!known) return fail(c, DI_ERR_INVALID, "unknown type '%s'", tn ? tn : "(not a string)");
    }
  } else if (t) {
    return fail(c, DI_ERR_INVALID, "'type' must be a string or an array of strings");
  }
  if (json_is_true(json_object_get(s, "nullable"))) allowed[0] = true;
  if (allowed[6]) allowed[5] = false; /* number covers integer */
  /* not */
  if ((v = json_object_get(s, "not"))) {
    if (json_is_object(v) && json_object_size(v) == 0) return GX_NOTHING;
    if (json_is_true(v)) return GX_NOTHING;
    const json_t *nt = json_is_object(v) ? json_object_get(v, "type") : NULL;
    if (!json_is_false(v) && !(nt && only_annotations_besides(v, "type", NULL)))
      return fail(c, DI_ERR_UNSUPPORTED, "'not' is only supported with a bare 'type'");
    for (size_t k = 0; nt && k < (json_is_array(nt) ? json_array_size(nt) : 1); k++) {
      const char *tn = json_string_value(json_is_array(nt) ? json_array_get(nt, k) : nt);
      for (int i = 0; tn && i < 7; i++)
        if (!strcmp(tn, type_names[i])) {
          allowed[i] = false;
          if (i == 6) allowed[5] = false;
        }
    }
  }
  if ((v = json_object_get(s, "if")) && (json_object_get(s, "then") || json_object_get(s, "else")))
    return fail(c, DI_ERR_UNSUPPORTED, "'if'/'then'/'else' is not supported");
  /* const / enum */
  const json_t *cv = json_object_get(s, "const"), *ev = json_object_get(s, "enum");
  if (cv || ev) {
    size_t n = cv ? 1 : json_array_size(ev);
    if (ev && !json_is_array(ev)) return fail(c, DI_ERR_INVALID, "'enum' must be an array");
    int32_t *alts = malloc(sizeof *alts * (n + 1));
    size_t na = 0;
    for (size_t i = 0; i < n; i++) {
      const json_t *x = cv ? cv : json_array_get(ev, i);
      bool ok = false;
      for (int k = 0; k < 7; k++) ok |= allowed[k] && value_has_type(x, type_names[k]);
      if (allowed[6] && json_is_integer(x)) ok = true;
      if (ok) alts[na++] = gj_literal(&c->j, x);
    }
    int32_t r = gx_alt(g, alts, na);
    free(alts);
    return r;
  }
  int32_t alts[7];
  size_t na = 0;
  for (int i = 0; i < 7 && !c->err; i++)
    if (allowed[i]) alts[na++] = compile_type(c, s, type_names[i]);
  return c->err ? GX_NOTHING : gx_alt(g, alts, na);
}

static bool req_has(const json_t *req, const char *name) {
  size_t k;
  json_t *r;
  json_array_foreach((json_t *)req, k, r) if (!strcmp(json_string_value(r), name)) return true;
  return false;
}

/* Properties of R_j not in R_i; *last = one of them. */
static size_t req_extra(const json_t *ri, const json_t *rj, const char **last) {
  size_t n = 0, k;
  json_t *r;
  json_array_foreach((json_t *)rj, k, r) if (!req_has(ri, json_string_value(r))) n++, *last = json_string_value(r);
  return n;
}

/* oneOf whose branches list required properties (and maybe their schemas),
 * "exactly one of these must be present", the common form of exclusivity,
 * in the cases compile_oneof_required enforces exactly. Other oneOfs are
 * compiled as anyOf (exclusivity not enforced; see the file comment). */
enum { ONEOF_MAX_COMBOS = 64 }; /* alternatives one oneOf branch may become */

static bool oneof_required_only(const json_t *v) {
  if (!json_is_array(v) || json_array_size(v) < 2) return false;
  size_t i;
  json_t *b;
  json_array_foreach((json_t *)v, i, b) {
    json_t *req = json_object_get(b, "required");
    if (!json_is_object(b) || !json_is_array(req)) return false;
    const char *key;
    json_t *kv;
    json_object_foreach(b, key, kv) {
      if (su_is_annotation(key) || !strcmp(key, "required") || !strcmp(key, "properties")) continue;
      if (!strcmp(key, "type") && json_is_string(kv) && !strcmp(json_string_value(kv), "object")) continue;
      return false;
    }
    size_t k;
    json_t *r;
    json_array_foreach(req, k, r) if (!json_is_string(r)) return false;
  }
  size_t n = json_array_size(v);
  for (i = 0; i < n; i++) {
    size_t combos = 1;
    for (size_t j = 0; j < n; j++) {
      const char *last = NULL;
      const json_t *bj = json_array_get(v, j);
      size_t extra = i == j ? 1 : req_extra(json_object_get(json_array_get(v, i), "required"), json_object_get(bj, "required"), &last);
      /* none, with property schemas in j, would need j's schemas negated */
      if (extra == 0 && json_object_get(bj, "properties")) return false;
      if (extra) combos *= extra;
      if (combos > ONEOF_MAX_COMBOS) return false;
    }
  }
  return true;
}

/* Branch i holds exactly when its required set R_i is present and, for every
 * other branch j, not all of R_j is: some property of R_j \ R_i is absent.
 * Branch i becomes the alternatives that each forbid one such property per
 * other branch (their overlap is harmless); forbidding is enough for j to
 * fail, stricter than needed when j's property schemas would fail anyway.
 * A branch j with R_j within R_i (and no property schemas) makes branch i
 * unsatisfiable. */
static int32_t compile_oneof_required(sc *c, const json_t *s, const json_t *v) {
  json_t *rest = without(s, "oneOf");
  /* with two or more branches only objects can match exactly one: a
   * non-object satisfies every required-only branch or none */
  json_t *obj = json_pack("{s:s}", "type", "object");
  json_t *ro = su_merge(rest, obj, c->st);
  json_decref(obj);
  json_decref(rest);
  if (!ro) return c->err = true, GX_NOTHING;
  rest = ro;
  size_t n = json_array_size(v);
  int32_t *alts = malloc(sizeof *alts * n);
  const json_t **extra = malloc(sizeof *extra * n); /* per j: R_j \ R_i as a JSON array */
  size_t *pick = malloc(sizeof *pick * n);
  int32_t sub[ONEOF_MAX_COMBOS];
  for (size_t i = 0; i < n && !c->err; i++) {
    const json_t *ri = json_object_get(json_array_get(v, i), "required");
    bool dead = false;
    json_t *lists = json_array();
    for (size_t j = 0; j < n; j++) {
      json_t *e = json_array();
      const json_t *rj = json_object_get(json_array_get(v, j), "required");
      size_t k;
      json_t *r;
      if (j != i) json_array_foreach((json_t *)rj, k, r) if (!req_has(ri, json_string_value(r))) json_array_append(e, r);
      if (j != i && !json_array_size(e)) dead = true;
      json_array_append_new(lists, e);
      extra[j] = e;
      pick[j] = 0;
    }
    size_t n_sub = 0;
    while (!dead && !c->err && n_sub < ONEOF_MAX_COMBOS) {
      json_t *m = su_merge(rest, json_array_get(v, i), c->st);
      if (!m) {
        c->err = true;
        break;
      }
      json_t *props = json_object_get(m, "properties");
      json_t *np = json_is_object(props) ? json_copy(props) : json_object();
      for (size_t j = 0; j < n; j++)
        if (j != i) json_object_set_new(np, json_string_value(json_array_get(extra[j], pick[j])), json_false());
      json_object_set_new(m, "properties", np);
      sub[n_sub++] = compile(c, m);
      json_decref(m);
      size_t j = 0; /* next combination, odometer order */
      for (; j < n; j++) {
        if (j == i) continue;
        if (++pick[j] < json_array_size(extra[j])) break;
        pick[j] = 0;
      }
      if (j == n) break;
    }
    json_decref(lists);
    alts[i] = dead || c->err ? GX_NOTHING : gx_alt(c->g, sub, n_sub);
  }
  json_decref(rest);
  int32_t r = c->err ? GX_NOTHING : gx_alt(c->g, alts, n);
  free(alts);
  free(extra);
  free(pick);
  return r;
}

/* A branch that is only a $ref, followed to what it names (borrowed). */
static const json_t *deref(sc *c, const json_t *b) {
  for (int hops = 0; hops < 32 && json_is_object(b) && json_is_string(json_object_get(b, "$ref")) &&
                     only_annotations_besides(b, "$ref", NULL);
       hops++) {
    di_status st = {0};
    const json_t *t = su_resolve(c->root, json_string_value(json_object_get(b, "$ref")), &st);
    if (!t) break;
    b = t;
  }
  return b;
}

/* oneOf: returns false when its branches provably exclude each other (then
 * it compiles as anyOf); else compiles it exactly into *out when it is a
 * choice of required-property sets, or fails naming two branches that may
 * both match. */
static bool compile_oneof(sc *c, const json_t *s, int32_t *out) {
  const json_t *v = json_object_get(s, "oneOf");
  if (!json_is_array(v) || json_array_size(v) < 2) return false; /* the anyOf path checks the shape */
  size_t n = json_array_size(v);
  json_t *rest = without(s, "oneOf");
  bool plain = only_annotations_besides(rest, "", NULL);
  json_t *br = json_array();
  const json_t **eff = malloc(sizeof *eff * n);
  json_t **owned = calloc(n, sizeof *owned);
  for (size_t i = 0; i < n; i++) {
    const json_t *b = deref(c, json_array_get(v, i));
    json_array_append(br, (json_t *)b);
    eff[i] = b;
    if (!plain) { /* the siblings narrow each branch: compare what each really admits */
      di_status st = {0};
      owned[i] = su_merge(rest, b, &st);
      if (owned[i]) eff[i] = owned[i];
    }
  }
  size_t pi = 0, pj = 0;
  bool disjoint = su_all_disjoint(c->root, eff, n, &pi, &pj), handled = true;
  if (disjoint) handled = false;
  else if (oneof_required_only(br)) *out = compile_oneof_required(c, s, br);
  else
    *out = fail(c, DI_ERR_UNSUPPORTED,
                "'oneOf' whose branches %zu and %zu may both match is not supported (exclusivity cannot be enforced)", pi, pj);
  for (size_t i = 0; i < n; i++) json_decref(owned[i]);
  free(owned);
  free(eff);
  json_decref(br);
  json_decref(rest);
  return handled;
}

static int32_t compile(sc *c, const json_t *s) {
  if (c->err) return GX_NOTHING;
  if (++c->steps > MAX_STEPS) return fail(c, DI_ERR_RANGE, "schema too large (over %d subschemas expanded)", MAX_STEPS);
  if (json_is_true(s)) return any_value(c);
  if (json_is_false(s)) return GX_NOTHING;
  if (!json_is_object(s)) return fail(c, DI_ERR_INVALID, "a schema must be an object or a boolean");
  if (++c->depth > MAX_DEPTH) return fail(c, DI_ERR_RANGE, "schema nested more than %d levels deep", MAX_DEPTH);
  int32_t r = compile_obj(c, s);
  c->depth--;
  return r;
}

int32_t gfe_json_schema(gx *g, const char *src, size_t len, const di_grammar_opts *o, di_status *st) {
  json_error_t je;
  json_t *root = json_loadb(src, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
  if (!root) {
    di_errorf(st, DI_ERR_INVALID, "JSON Schema: not JSON: %s at line %d column %d", je.text, je.line, je.column);
    return -1;
  }
  sc c = {.g = g, .root = root, .st = st};
  gj_init(&c.j, g, o->ws);
  int32_t rule = gx_rule_new(g, "root");
  int32_t body = compile(&c, root);
  if (o->ws == DI_JSON_WS_FREE) /* a little leading whitespace, as models like to write */
    body = gx_seq2(g, gx_rep(g, gx_alt(g, (int32_t[]){gx_str(g, " "), gx_str(g, "\n"), gx_str(g, "\t")}, 3), 0, 4), body);
  gx_rule_define(g, rule, body);
  free(c.refs);
  json_decref(root);
  return c.err ? -1 : rule;
}

int32_t gfe_json_any(gx *g, const di_grammar_opts *o) {
  gjson j;
  gj_init(&j, g, o->ws);
  int32_t rule = gx_rule_new(g, "root");
  int32_t member = gx_seq3(g, gj_any_string(&j), gj_colon(&j), gj_any_value(&j));
  int32_t obj = gx_seq3(g, gj_open(&j, '{'), gx_opt(g, gx_seq2(g, member, gx_star(g, gx_seq2(g, gj_comma(&j), member)))),
                        gj_close(&j, '}'));
  gx_rule_define(g, rule, obj);
  return rule;
}
