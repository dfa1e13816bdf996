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

#include "grammar/schema_sc.h"

enum { MAX_DEPTH = 96, MAX_STEPS = 200000 };

int32_t sc_fail(sc *c, di_code code, const char *fmt, ...) {
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

static bool compile_oneof(sc *c, const json_t *s, int32_t *out);

int32_t sc_any_value(sc *c) { return gj_any_value(&c->j); }

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
  gx_rule_define(c->g, r, sc_compile(c, target));
  return gx_ref(c->g, r);
}

bool sc_only_annotations(const json_t *s, const char *a, const char *b) {
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)s, k, v) {
    if (!strcmp(k, a) || (b && !strcmp(k, b)) || su_is_annotation(k)) continue;
    return false;
  }
  return true;
}

json_t *sc_without(const json_t *s, const char *key) {
  json_t *r = json_copy((json_t *)s);
  json_object_del(r, key);
  return r;
}

/* ---- arrays ---- */

static int32_t compile_array(sc *c, const json_t *s) {
  gx *g = c->g;
  const json_t *v;
  if ((v = json_object_get(s, "contains")) && !json_is_true(v) && !(json_is_object(v) && json_object_size(v) == 0))
    return sc_fail(c, DI_ERR_UNSUPPORTED, "'contains' is not supported");
  if ((v = json_object_get(s, "unevaluatedItems")) && !json_is_true(v))
    return sc_fail(c, DI_ERR_UNSUPPORTED, "'unevaluatedItems' is not supported");
  double d;
  long long mn = sc_get_num(s, "minItems", &d) ? (long long)d : 0;
  long long mx = sc_get_num(s, "maxItems", &d) ? (long long)d : -1;
  if (json_is_true(json_object_get(s, "uniqueItems")) && !(mx >= 0 && mx <= 1))
    return sc_fail(c, DI_ERR_UNSUPPORTED, "'uniqueItems' is not supported");
  if (mn > 2000 || mx > 2000) return sc_fail(c, DI_ERR_UNSUPPORTED, "minItems/maxItems above 2000 are not supported");
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
  int32_t rest = rest_s && !json_is_true(rest_s) ? sc_compile(c, rest_s) : sc_any_value(c);
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
    if (rest == GX_NOTHING || mx == 0) content = GX_EMPTY; /* (mx - 1 below would read as unbounded) */
    else {
      int32_t more = gx_rep(g, gx_seq2(g, comma, rest), mn > 0 ? (int32_t)mn - 1 : 0, mx < 0 ? -1 : (int32_t)mx - 1);
      content = gx_seq2(g, rest, more);
      if (mn == 0) content = gx_opt(g, content);
    }
  } else {
    /* tuple items nest: item i is optional when i >= minItems */
    int32_t tailx = after;
    for (size_t i = k; i-- > 0;) {
      int32_t it = sc_compile(c, json_array_get(tuple, i));
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
  if (!strcmp(t, "string")) return sc_string(c, s);
  if (!strcmp(t, "integer")) return sc_integer(c, s);
  if (!strcmp(t, "number")) return sc_number(c, s);
  if (!strcmp(t, "object")) return sc_object(c, s);
  if (!strcmp(t, "array")) return compile_array(c, s);
  return sc_fail(c, DI_ERR_INVALID, "unknown type '%s'", t);
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

/* Whether n says only "these properties are present" (required, or allOf
 * of such); their names are appended to out. */
static bool required_only(const json_t *n, json_t *out, int depth) {
  if (!json_is_object(n) || depth > 8) return false;
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)n, k, v) {
    if (su_is_annotation(k)) continue;
    if (!strcmp(k, "required") && json_is_array(v)) {
      size_t i;
      json_t *e;
      json_array_foreach(v, i, e) {
        if (!json_is_string(e)) return false;
        json_array_append(out, e);
      }
    } else if (!strcmp(k, "allOf") && json_is_array(v)) {
      size_t i;
      json_t *e;
      json_array_foreach(v, i, e) if (!required_only(e, out, depth + 1)) return false;
    } else {
      return false;
    }
  }
  return true;
}

/* s with not: {required: names}: an object (required holds on anything
 * else) without at least one of names, each name forbidden in turn. */
static int32_t missing_one(sc *c, const json_t *s, const json_t *names) {
  json_t *rest = sc_without(s, "not");
  size_t n = json_array_size(names);
  int32_t *alts = malloc(sizeof *alts * (n + 1));
  for (size_t i = 0; i < n && !c->err; i++) {
    json_t *patch = json_pack("{s:s,s:{s:b}}", "type", "object", "properties", json_string_value(json_array_get(names, i)), 0);
    json_t *m = patch ? su_merge(rest, patch, c->st) : NULL;
    alts[i] = m ? sc_compile(c, m) : GX_NOTHING;
    if (!m) c->err = true;
    json_decref(m);
    json_decref(patch);
  }
  json_decref(rest);
  int32_t r = c->err ? GX_NOTHING : gx_alt(c->g, alts, n);
  free(alts);
  return r;
}

static int32_t compile_obj(sc *c, const json_t *s) {
  gx *g = c->g;
  const json_t *v;
  /* $ref */
  if ((v = json_object_get(s, "$ref"))) {
    if (!json_is_string(v)) return sc_fail(c, DI_ERR_INVALID, "'$ref' must be a string");
    const json_t *t = su_resolve(c->root, json_string_value(v), c->st);
    if (!t) return c->err = true, GX_NOTHING;
    if (sc_only_annotations(s, "$ref", NULL)) return ref_rule(c, t, json_string_value(v));
    json_t *rest = sc_without(s, "$ref");
    json_t *m = su_merge(t, rest, c->st);
    json_decref(rest);
    if (!m) return c->err = true, GX_NOTHING;
    int32_t r = sc_compile(c, m);
    json_decref(m);
    return r;
  }
  /* allOf: merged into one schema */
  if ((v = json_object_get(s, "allOf"))) {
    if (!json_is_array(v)) return sc_fail(c, DI_ERR_INVALID, "'allOf' must be an array");
    json_t *m = sc_without(s, "allOf");
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
        json_t *rest = sc_without(e, "$ref");
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
    int32_t r = sc_compile(c, m);
    json_decref(m);
    return r;
  }
  /* anyOf / oneOf: siblings go into every branch */
  const char *which = json_object_get(s, "anyOf") ? "anyOf" : json_object_get(s, "oneOf") ? "oneOf" : NULL;
  int32_t one;
  if (which && !strcmp(which, "oneOf") && compile_oneof(c, s, &one)) return one;
  if (which) {
    v = json_object_get(s, which);
    if (!json_is_array(v) || json_array_size(v) == 0) return sc_fail(c, DI_ERR_INVALID, "'%s' must be a non-empty array", which);
    json_t *rest = sc_without(s, which);
    bool plain = sc_only_annotations(rest, "", NULL);
    size_t n = json_array_size(v);
    int32_t *alts = malloc(sizeof *alts * n);
    for (size_t i = 0; i < n && !c->err; i++) {
      if (plain) {
        alts[i] = sc_compile(c, json_array_get(v, i));
        continue;
      }
      json_t *m = su_merge(rest, json_array_get(v, i), c->st);
      if (!m) {
        c->err = true;
        alts[i] = GX_NOTHING;
        break;
      }
      alts[i] = sc_compile(c, m);
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
      if (!known) return sc_fail(c, DI_ERR_INVALID, "unknown type '%s'", tn ? tn : "(not a string)");
    }
  } else if (t) {
    return sc_fail(c, DI_ERR_INVALID, "'type' must be a string or an array of strings");
  }
  if (json_is_true(json_object_get(s, "nullable"))) allowed[0] = true;
  if (allowed[6]) allowed[5] = false; /* number covers integer */
  /* const / enum: the values listed that the rest of the schema admits */
  const json_t *cv = json_object_get(s, "const"), *ev = json_object_get(s, "enum");
  if (cv || ev) {
    size_t n = cv ? 1 : json_array_size(ev);
    if (!cv && !json_is_array(ev)) return sc_fail(c, DI_ERR_INVALID, "'enum' must be an array");
    json_t *rest = sc_without(s, cv ? "const" : "enum");
    bool plain = sc_only_annotations(rest, "type", "nullable");
    int32_t *alts = malloc(sizeof *alts * (n + 1));
    size_t na = 0;
    for (size_t i = 0; i < n && !c->err; i++) {
      const json_t *x = cv ? cv : json_array_get(ev, i);
      bool ok = false;
      for (int k = 0; k < 7; k++) ok |= allowed[k] && value_has_type(x, type_names[k]);
      if (allowed[6] && json_is_integer(x)) ok = true;
      const char *why = NULL;
      sv_result r = ok && !plain ? su_validate(c->root, rest, x, &why) : SV_VALID;
      if (r == SV_UNKNOWN)
        sc_fail(c, DI_ERR_UNSUPPORTED, "'%s' beside '%s', which cannot be checked on its values", cv ? "const" : "enum", why);
      if (ok && r == SV_VALID) alts[na++] = gj_literal(&c->j, x);
    }
    json_decref(rest);
    int32_t r = c->err ? GX_NOTHING : gx_alt(g, alts, na);
    free(alts);
    return r;
  }
  /* not */
  if ((v = json_object_get(s, "not"))) {
    if (json_is_object(v) && json_object_size(v) == 0) return GX_NOTHING;
    if (json_is_true(v)) return GX_NOTHING;
    json_t *req = json_array();
    if (required_only(v, req, 0) && json_array_size(req)) {
      int32_t r = missing_one(c, s, req);
      json_decref(req);
      return r;
    }
    json_decref(req);
    const json_t *nt = json_is_object(v) ? json_object_get(v, "type") : NULL;
    if (!json_is_false(v) && !(nt && sc_only_annotations(v, "type", NULL)))
      return sc_fail(c, DI_ERR_UNSUPPORTED, "'not' is only supported with a bare 'type' or 'required'");
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
    return sc_fail(c, DI_ERR_UNSUPPORTED, "'if'/'then'/'else' is not supported");
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
  json_t *rest = sc_without(s, "oneOf");
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
      sub[n_sub++] = sc_compile(c, m);
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
                     sc_only_annotations(b, "$ref", NULL);
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
  json_t *rest = sc_without(s, "oneOf");
  bool plain = sc_only_annotations(rest, "", NULL);
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
    *out = sc_fail(c, DI_ERR_UNSUPPORTED,
                "'oneOf' whose branches %zu and %zu may both match is not supported (exclusivity cannot be enforced)", pi, pj);
  for (size_t i = 0; i < n; i++) json_decref(owned[i]);
  free(owned);
  free(eff);
  json_decref(br);
  json_decref(rest);
  return handled;
}

int32_t sc_compile(sc *c, const json_t *s) {
  if (c->err) return GX_NOTHING;
  if (++c->steps > MAX_STEPS) return sc_fail(c, DI_ERR_RANGE, "schema too large (over %d subschemas expanded)", MAX_STEPS);
  if (json_is_true(s)) return sc_any_value(c);
  if (json_is_false(s)) return GX_NOTHING;
  if (!json_is_object(s)) return sc_fail(c, DI_ERR_INVALID, "a schema must be an object or a boolean");
  if (++c->depth > MAX_DEPTH) return sc_fail(c, DI_ERR_RANGE, "schema nested more than %d levels deep", MAX_DEPTH);
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
  int32_t body = sc_compile(&c, root);
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
