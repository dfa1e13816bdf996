/* JSON Schema objects: members in the orders accepted, keys past the named
 * ones, patternProperties regions and propertyNames (see schema.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/schema_sc.h"

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

/* Any key but the declared names, quotes included. As an automaton (any
 * string minus the names' trie, a product) every key that has left the
 * names is in one state, the string body, which masks share and decide
 * cheaply; the expression of key_excl (the fallback where the product is
 * over budget) leaves one copy of the body per trie node. */
static int32_t other_keys(sc *c, const char **names, size_t n) {
  gx *g = c->g;
  ga base = {0}, nm = {0};
  di_status st = {0};
  di_code rc = sl_length_dfa(g, &c->j, 0, -1, &st, &base);
  if (!rc && n) rc = sl_names_dfa(g, names, n, &st, &nm);
  if (!rc && n) rc = sl_and(g, &base, &nm, FSA_AND_NOT, &st);
  ga_free(&nm);
  int32_t key;
  if (!rc) {
    key = gx_seq3(g, gx_str(g, "\""), fsa_to_gx(g, &base), gx_str(g, "\""));
  } else {
    kt t = {.names = names, .n = n};
    size_t *idx = malloc(sizeof *idx * (n + 1));
    for (size_t i = 0; i < n; i++) idx[i] = i;
    /* past the names: any characters, then the closing quote */
    int32_t rest = gx_seq2(g, gx_star(g, gj_any_char(&c->j)), gx_str(g, "\""));
    key = gx_seq2(g, gx_str(g, "\""), key_excl(c, &t, idx, n, 0, 0, rest));
    free(idx);
  }
  ga_free(&base);
  return key;
}

static int32_t as_rule(sc *c, const char *name, int32_t e, size_t nodes_before) {
  if (c->g->n_nodes - nodes_before < 24) return e;
  int32_t r = gx_rule_new(c->g, name);
  gx_rule_define(c->g, r, e);
  return gx_ref(c->g, r);
}

/* The members of an object in the order perm: each optional one may be
 * left out, the extras (if any) come last. */
static int32_t members(sc *c, const int32_t *kv, const bool *required, const size_t *perm, size_t n, int32_t extra,
                       bool nonempty) {
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
    if (!nonempty) alts[na++] = GX_EMPTY;
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
    sc_fail(c, DI_ERR_UNSUPPORTED, "'patternProperties' with more than %d patterns is not supported", MAX_KEY_PATTERNS);
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
  if (!pnames || json_is_true(pnames) || (json_is_object(pnames) && sc_only_annotations(pnames, "type", NULL)))
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
    sc_fail(c, DI_ERR_UNSUPPORTED, "'propertyNames' is only supported with pattern, format, minLength and maxLength");
    return false;
  }
  double d;
  long long mn = sc_get_num(pnames, "minLength", &d) ? (long long)d : 0, mx = sc_get_num(pnames, "maxLength", &d) ? (long long)d : -1;
  ga b = {0};
  di_code rc = sl_length_dfa(c->g, &c->j, mn, mx, c->st, &kr->pn);
  if (!rc && pat) {
    rc = sl_regex_dfa(c->g, json_string_value(pat), json_string_length(pat), c->st, &b);
    if (!rc) rc = sl_and(c->g, &kr->pn, &b, FSA_AND, c->st);
    ga_free(&b);
  }
  if (!rc && fre) {
    rc = sl_regex_dfa(c->g, fre, strlen(fre), c->st, &b);
    if (!rc) rc = sl_and(c->g, &kr->pn, &b, FSA_AND, c->st);
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
  if (!rc && kr->has_pn) rc = sl_and(c->g, &base, &kr->pn, FSA_AND, c->st);
  if (!rc) rc = sl_names_dfa(g, names, n, c->st, &nm);
  if (!rc) rc = sl_and(c->g, &base, &nm, FSA_AND_NOT, c->st);
  ga_free(&nm);
  int32_t alts[1 << MAX_KEY_PATTERNS];
  size_t na = 0;
  for (uint32_t set = 0; !rc && !c->err && set < (1u << kr->n); set++) {
    if (set == 0 && json_is_false(addl)) continue;
    ga r = {0};
    const ga *cur = &base;
    for (size_t k = 0; !rc && k < kr->n; k++) {
      ga nx;
      rc = sl_product(c->g, cur, &kr->k[k], set >> k & 1 ? FSA_AND : FSA_AND_NOT, &nx, c->st);
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
      int32_t val = set ? sc_compile(c, vs) : addl && !json_is_true(addl) ? sc_compile(c, addl) : sc_any_value(c);
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

/* Members as members() does, their number within [lo, hi] (hi -1: no upper
 * bound). B(i, k): members i.. after k were written (k saturates at lo when
 * there is no upper bound); each is a rule, having two parents. */
static int32_t members_counted(sc *c, const int32_t *kv, const bool *required, const size_t *perm, size_t n,
                               int32_t extra, int lo, int hi) {
  gx *g = c->g;
  int cap = hi >= 0 ? hi : lo;
  size_t W = (size_t)cap + 1;
  int32_t comma = gj_comma(&c->j);
  int32_t ce = extra == GX_NOTHING ? GX_NOTHING : gx_seq2(g, comma, extra);
  int32_t *B = malloc(sizeof *B * (n + 1) * W);
  if (!B) abort();
  for (int k = 0; k <= cap; k++) {
    int need = lo > k ? lo - k : 0;
    B[n * W + (size_t)k] = ce == GX_NOTHING ? (need ? GX_NOTHING : GX_EMPTY) : gx_rep(g, ce, need, hi >= 0 ? hi - k : -1);
  }
  for (size_t i = n; i-- > 0;)
    for (int k = 0; k <= cap; k++) {
      int nk = hi >= 0 || k + 1 < lo ? k + 1 : lo;
      int32_t take = nk > cap ? GX_NOTHING : gx_seq3(g, comma, kv[perm[i]], B[(i + 1) * W + (size_t)nk]);
      int32_t e = required[perm[i]] ? take : gx_alt2(g, take, B[(i + 1) * W + (size_t)k]);
      int32_t r = gx_rule_new(g, "members");
      gx_rule_define(g, r, e);
      B[i * W + (size_t)k] = gx_ref(g, r);
    }
  /* the first member written (no comma before it): member j, all before it
   * optional and left out, or an extra after every named one was left out */
  int nk0 = hi >= 0 || lo > 1 ? 1 : lo;
  int32_t *alts = malloc(sizeof *alts * (n + 2));
  size_t na = 0;
  bool all_optional = true;
  for (size_t j = 0; j < n && nk0 <= cap; j++) {
    alts[na++] = gx_seq2(g, kv[perm[j]], B[(j + 1) * W + (size_t)nk0]);
    if (required[perm[j]]) {
      all_optional = false;
      break;
    }
  }
  if (all_optional) {
    if (extra != GX_NOTHING && nk0 <= cap) alts[na++] = gx_seq2(g, extra, B[n * W + (size_t)nk0]);
    if (lo == 0) alts[na++] = GX_EMPTY;
  }
  int32_t r = gx_alt(g, alts, na);
  free(alts);
  free(B);
  return r;
}

int32_t sc_object(sc *c, const json_t *s) {
  gx *g = c->g;
  static const char *unsupported[] = {"dependencies", "dependentRequired", "dependentSchemas",
                                      "unevaluatedProperties"};
  for (size_t i = 0; i < 4; i++) {
    const json_t *v = json_object_get(s, unsupported[i]);
    if (v && !(json_is_object(v) && json_object_size(v) == 0) && !json_is_true(v))
      return sc_fail(c, DI_ERR_UNSUPPORTED, "'%s' is not supported", unsupported[i]);
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
      sc_fail(c, DI_ERR_INVALID, "'required' must list strings");
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
  /* minProperties 1 without required members: the empty object left out */
  bool nonempty = sc_get_num(s, "minProperties", &d) && d > 0 && d <= 1 && n_req == 0;
  /* other member counts: members_counted, for small bounds */
  double lo_d = 0, hi_d = -1;
  bool has_lo = sc_get_num(s, "minProperties", &lo_d), has_hi = sc_get_num(s, "maxProperties", &hi_d);
  bool counted = (has_lo && lo_d > (double)n_req && !nonempty) ||
                 (has_hi && (!addl_false || has_pp || kr.has_pn || hi_d < (double)n));
  if (counted && ((has_lo && lo_d > 64) || (has_hi && hi_d > 64) || (has_hi && hi_d < 0))) {
    sc_fail(c, DI_ERR_UNSUPPORTED, "'%s' above 64 is not supported", has_lo && lo_d > 64 ? "minProperties" : "maxProperties");
    goto out;
  }
  int cnt_lo = has_lo && lo_d > 0 ? (int)ceil(lo_d) : 0, cnt_hi = has_hi ? (int)floor(hi_d) : -1;
  (void)v;
  /* the extra members */
  int32_t extra = GX_NOTHING;
  if (has_pp || kr.has_pn) {
    extra = key_regions(c, &kr, names, n, addl);
    if (c->err) goto out;
  } else if (!addl_false) {
    size_t before = g->n_nodes;
    int32_t key = other_keys(c, names, n);
    key = as_rule(c, "key", key, before);
    before = g->n_nodes;
    int32_t val = addl && !json_is_true(addl) ? sc_compile(c, addl) : sc_any_value(c);
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
    int32_t val = sc_compile(c, schemas[i]);
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
  int32_t content = counted ? members_counted(c, kv, required, perm, n, extra, cnt_lo, cnt_hi)
                            : members(c, kv, required, perm, n, extra, nonempty);
  if (memcmp(perm, perm2, n * sizeof *perm))
    content = gx_alt2(g, content, counted ? members_counted(c, kv, required, perm2, n, extra, cnt_lo, cnt_hi)
                                          : members(c, kv, required, perm2, n, extra, nonempty));
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
