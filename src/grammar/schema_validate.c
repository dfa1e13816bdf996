/* A three-valued JSON Schema validator for single values (see schema_util.h).
 * The compiler uses it where a schema lists its values (enum / const): each
 * value is kept only when the rest of the schema provably holds for it, so
 * keywords beside an enum (bounds, patterns, `not`, ...) are enforced
 * exactly. Anything it cannot decide is SV_UNKNOWN with the keyword named;
 * callers treat that as an error, never as valid. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/schema_lang.h"
#include "grammar/schema_util.h"

typedef struct vctx {
  const json_t *root;
  const char *why;
  int depth;
} vctx;

static sv_result unknown(vctx *c, const char *kw) {
  if (!c->why) c->why = kw;
  return SV_UNKNOWN;
}

static sv_result and3(sv_result a, sv_result b) {
  if (a == SV_INVALID || b == SV_INVALID) return SV_INVALID;
  return a == SV_UNKNOWN || b == SV_UNKNOWN ? SV_UNKNOWN : SV_VALID;
}

/* JSON equality as JSON Schema defines it (1 equals 1.0). */
static bool jeq(const json_t *a, const json_t *b) {
  if (json_is_number(a) && json_is_number(b)) {
    if (json_is_integer(a) && json_is_integer(b)) return json_integer_value(a) == json_integer_value(b);
    return json_number_value(a) == json_number_value(b);
  }
  if (json_typeof(a) != json_typeof(b)) return false;
  switch (json_typeof(a)) {
  case JSON_STRING:
    return json_string_length(a) == json_string_length(b) &&
           !memcmp(json_string_value(a), json_string_value(b), json_string_length(a));
  case JSON_ARRAY:
    if (json_array_size(a) != json_array_size(b)) return false;
    for (size_t i = 0; i < json_array_size(a); i++)
      if (!jeq(json_array_get(a, i), json_array_get(b, i))) return false;
    return true;
  case JSON_OBJECT: {
    if (json_object_size(a) != json_object_size(b)) return false;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)a, k, v) {
      const json_t *w = json_object_get(b, k);
      if (!w || !jeq(v, w)) return false;
    }
    return true;
  }
  default: return true;
  }
}

static bool has_type(const json_t *v, const char *t) {
  if (!t) return false;
  if (!strcmp(t, "integer"))
    return json_is_integer(v) || (json_is_real(v) && isfinite(json_real_value(v)) && floor(json_real_value(v)) == json_real_value(v));
  if (!strcmp(t, "number")) return json_is_number(v);
  if (!strcmp(t, "string")) return json_is_string(v);
  if (!strcmp(t, "object")) return json_is_object(v);
  if (!strcmp(t, "array")) return json_is_array(v);
  if (!strcmp(t, "boolean")) return json_is_boolean(v);
  if (!strcmp(t, "null")) return json_is_null(v);
  return false;
}

static size_t code_points(const json_t *s) {
  size_t n = 0;
  const unsigned char *p = (const unsigned char *)json_string_value(s);
  for (size_t i = 0; i < json_string_length(s); i++) n += (p[i] & 0xC0) != 0x80;
  return n;
}

/* SV_VALID when the string s matches pattern re (search semantics). */
static sv_result pattern_match(vctx *c, const char *re, size_t len, const char *s, size_t n) {
  gx g;
  gx_init(&g, 1u << 20);
  ga d = {0};
  di_status st = {0};
  sv_result r = sl_regex_dfa(&g, re, len, &st, &d) ? unknown(c, "pattern") : sl_matches(&d, s, n) ? SV_VALID : SV_INVALID;
  ga_free(&d);
  gx_free(&g);
  return r;
}

static sv_result val(vctx *c, const json_t *s, const json_t *v);

static sv_result multiple_of(vctx *c, const json_t *m, const json_t *v) {
  double x = json_number_value(v), d = json_number_value(m);
  if (!(d > 0)) return unknown(c, "multipleOf");
  if (json_is_integer(v) && json_is_integer(m)) return json_integer_value(v) % json_integer_value(m) == 0 ? SV_VALID : SV_INVALID;
  double q = x / d;
  if (!isfinite(q)) return unknown(c, "multipleOf");
  /* binary fractions round: only a quotient far from an integer is decided */
  return fabs(q - nearbyint(q)) > 1e-6 * (fabs(q) > 1 ? fabs(q) : 1) ? SV_INVALID : unknown(c, "multipleOf");
}

static sv_result bound(const json_t *s, const char *k, const json_t *kv, const json_t *v) {
  double x = json_number_value(v), b = json_number_value(kv);
  bool lo = !strcmp(k, "minimum") || !strcmp(k, "exclusiveMinimum");
  bool strict = k[0] == 'e' || json_is_true(json_object_get(s, lo ? "exclusiveMinimum" : "exclusiveMaximum"));
  bool ok = lo ? (strict ? x > b : x >= b) : (strict ? x < b : x <= b);
  return ok ? SV_VALID : SV_INVALID;
}

static sv_result val_array(vctx *c, const json_t *s, const char *k, const json_t *kv, const json_t *v) {
  size_t n = json_array_size(v);
  sv_result r = SV_VALID;
  if (!strcmp(k, "minItems")) return json_is_number(kv) && (double)n >= json_number_value(kv) ? SV_VALID : SV_INVALID;
  if (!strcmp(k, "maxItems")) return json_is_number(kv) && (double)n <= json_number_value(kv) ? SV_VALID : SV_INVALID;
  if (!strcmp(k, "uniqueItems")) {
    for (size_t i = 0; json_is_true(kv) && i < n; i++)
      for (size_t j = i + 1; j < n; j++)
        if (jeq(json_array_get(v, i), json_array_get(v, j))) return SV_INVALID;
    return SV_VALID;
  }
  const json_t *prefix = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
  if (!strcmp(k, "prefixItems") || (!strcmp(k, "items") && json_is_array(kv))) {
    for (size_t i = 0; i < n && i < json_array_size(kv) && r != SV_INVALID; i++)
      r = and3(r, val(c, json_array_get(kv, i), json_array_get(v, i)));
    return r;
  }
  if (!strcmp(k, "items") || !strcmp(k, "additionalItems")) {
    size_t from = 0;
    if (!strcmp(k, "items")) from = json_array_size(prefix);
    else if (json_is_array(items)) from = json_array_size(items);
    else return SV_VALID; /* additionalItems without an items array: no effect */
    for (size_t i = from; i < n && r != SV_INVALID; i++) r = and3(r, val(c, kv, json_array_get(v, i)));
    return r;
  }
  if (!strcmp(k, "contains")) {
    if (json_object_get(s, "minContains") || json_object_get(s, "maxContains")) return unknown(c, "minContains");
    r = SV_INVALID;
    for (size_t i = 0; i < n && r != SV_VALID; i++) {
      sv_result e = val(c, kv, json_array_get(v, i));
      if (e != SV_INVALID) r = e;
    }
    return r;
  }
  return SV_VALID;
}

static bool matches_some_pattern(vctx *c, const json_t *pp, const char *key, sv_result *r) {
  const char *pk;
  json_t *pv;
  bool any = false;
  json_object_foreach((json_t *)pp, pk, pv) {
    sv_result m = pattern_match(c, pk, strlen(pk), key, strlen(key));
    if (m == SV_UNKNOWN) *r = SV_UNKNOWN;
    any |= m == SV_VALID;
  }
  return any;
}

static sv_result val_object(vctx *c, const json_t *s, const char *k, const json_t *kv, const json_t *v) {
  sv_result r = SV_VALID;
  const char *key;
  json_t *x;
  if (!strcmp(k, "required")) {
    for (size_t i = 0; i < json_array_size(kv); i++) {
      const char *name = json_string_value(json_array_get(kv, i));
      if (!name || !json_object_get(v, name)) return SV_INVALID;
    }
    return SV_VALID;
  }
  if (!strcmp(k, "minProperties")) return json_is_number(kv) && (double)json_object_size(v) >= json_number_value(kv) ? SV_VALID : SV_INVALID;
  if (!strcmp(k, "maxProperties")) return json_is_number(kv) && (double)json_object_size(v) <= json_number_value(kv) ? SV_VALID : SV_INVALID;
  if (!strcmp(k, "properties")) {
    json_object_foreach((json_t *)v, key, x) {
      const json_t *ps = json_object_get(kv, key);
      if (ps) r = and3(r, val(c, ps, x));
    }
    return r;
  }
  if (!strcmp(k, "patternProperties")) {
    const char *pk;
    json_t *pv;
    json_object_foreach((json_t *)v, key, x) json_object_foreach((json_t *)kv, pk, pv) {
      sv_result m = pattern_match(c, pk, strlen(pk), key, strlen(key));
      r = and3(r, m == SV_VALID ? val(c, pv, x) : m == SV_UNKNOWN ? SV_UNKNOWN : SV_VALID);
    }
    return r;
  }
  if (!strcmp(k, "additionalProperties")) {
    const json_t *props = json_object_get(s, "properties"), *pp = json_object_get(s, "patternProperties");
    json_object_foreach((json_t *)v, key, x) {
      if (json_object_get(props, key)) continue;
      if (json_is_object(pp) && matches_some_pattern(c, pp, key, &r)) continue;
      r = and3(r, val(c, kv, x));
    }
    return r;
  }
  if (!strcmp(k, "propertyNames")) {
    json_object_foreach((json_t *)v, key, x) {
      json_t *name = json_string(key);
      r = and3(r, name ? val(c, kv, name) : unknown(c, "propertyNames"));
      json_decref(name);
    }
    return r;
  }
  if (!strcmp(k, "dependentRequired") || !strcmp(k, "dependentSchemas") || !strcmp(k, "dependencies")) {
    const char *dk;
    json_t *dv;
    json_object_foreach((json_t *)kv, dk, dv) {
      if (!json_object_get(v, dk)) continue;
      if (json_is_array(dv)) {
        for (size_t i = 0; i < json_array_size(dv); i++) {
          const char *name = json_string_value(json_array_get(dv, i));
          if (!name || !json_object_get(v, name)) return SV_INVALID;
        }
      } else {
        r = and3(r, val(c, dv, v));
      }
    }
    return r;
  }
  return SV_VALID;
}

static bool applies_to(const char *k, const char *const *kws) {
  for (size_t i = 0; kws[i]; i++)
    if (!strcmp(k, kws[i])) return true;
  return false;
}

static sv_result val(vctx *c, const json_t *s, const json_t *v) {
  static const char *num_kw[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", NULL};
  static const char *str_kw[] = {"minLength", "maxLength", "pattern", "format", NULL};
  static const char *arr_kw[] = {"items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains", NULL};
  static const char *obj_kw[] = {"required", "properties", "patternProperties", "additionalProperties", "propertyNames",
                                 "minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "dependencies", NULL};
  static const char *undecided[] = {"unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef", NULL};
  if (json_is_true(s)) return SV_VALID;
  if (json_is_false(s)) return SV_INVALID;
  if (!json_is_object(s)) return unknown(c, "a schema that is not an object");
  if (++c->depth > 64) return c->depth--, unknown(c, "$ref");
  sv_result r = SV_VALID;
  const char *k;
  json_t *kv;
  json_object_foreach((json_t *)s, k, kv) {
    if (r == SV_INVALID) break;
    if (su_is_annotation(k) || !strcmp(k, "nullable") || !strcmp(k, "then") || !strcmp(k, "else") ||
        !strcmp(k, "minContains") || !strcmp(k, "maxContains"))
      continue;
    if (applies_to(k, undecided)) {
      r = and3(r, unknown(c, k));
    } else if (!strcmp(k, "$ref")) {
      /* siblings of $ref count in 2019-09 and later but not before: undecidable here */
      bool alone = true;
      const char *k2;
      json_t *v2;
      json_object_foreach((json_t *)s, k2, v2) alone &= !strcmp(k2, "$ref") || su_is_annotation(k2);
      di_status st = {0};
      const json_t *t = alone && json_is_string(kv) ? su_resolve(c->root, json_string_value(kv), &st) : NULL;
      r = and3(r, t ? val(c, t, v) : unknown(c, "$ref"));
    } else if (!strcmp(k, "type")) {
      bool ok = json_is_true(json_object_get(s, "nullable")) && json_is_null(v);
      if (json_is_string(kv)) ok |= has_type(v, json_string_value(kv));
      for (size_t i = 0; json_is_array(kv) && i < json_array_size(kv); i++) ok |= has_type(v, json_string_value(json_array_get(kv, i)));
      if (!ok) r = SV_INVALID;
    } else if (!strcmp(k, "enum")) {
      bool in = false;
      for (size_t i = 0; json_is_array(kv) && i < json_array_size(kv) && !in; i++) in = jeq(json_array_get(kv, i), v);
      if (!in) r = SV_INVALID;
    } else if (!strcmp(k, "const")) {
      if (!jeq(kv, v)) r = SV_INVALID;
    } else if (applies_to(k, num_kw)) {
      if (!json_is_number(v) || json_is_boolean(kv)) continue;
      if (!json_is_number(kv)) r = and3(r, unknown(c, k));
      else r = and3(r, !strcmp(k, "multipleOf") ? multiple_of(c, kv, v) : bound(s, k, kv, v));
    } else if (applies_to(k, str_kw)) {
      if (!json_is_string(v)) continue;
      if (!strcmp(k, "format")) r = and3(r, unknown(c, "format"));
      else if (!strcmp(k, "pattern"))
        r = and3(r, json_is_string(kv) ? pattern_match(c, json_string_value(kv), json_string_length(kv), json_string_value(v), json_string_length(v))
                                       : unknown(c, k));
      else if (!json_is_number(kv)) r = and3(r, unknown(c, k));
      else if ((double)code_points(v) < json_number_value(kv) ? k[1] == 'i' : (double)code_points(v) > json_number_value(kv) && k[1] == 'a')
        r = SV_INVALID;
    } else if (applies_to(k, arr_kw)) {
      if (json_is_array(v)) r = and3(r, val_array(c, s, k, kv, v));
    } else if (applies_to(k, obj_kw)) {
      if (json_is_object(v)) r = and3(r, val_object(c, s, k, kv, v));
    } else if (!strcmp(k, "allOf") || !strcmp(k, "anyOf") || !strcmp(k, "oneOf")) {
      size_t n = json_array_size(kv), n_valid = 0, n_unknown = 0;
      for (size_t i = 0; i < n; i++) {
        sv_result e = val(c, json_array_get(kv, i), v);
        n_valid += e == SV_VALID;
        n_unknown += e == SV_UNKNOWN;
      }
      sv_result e = !strcmp(k, "allOf") ? (n_valid == n ? SV_VALID : n_valid + n_unknown == n ? SV_UNKNOWN : SV_INVALID)
                    : !strcmp(k, "anyOf") ? (n_valid ? SV_VALID : n_unknown ? SV_UNKNOWN : SV_INVALID)
                    : n_valid > 1 ? SV_INVALID : n_unknown ? SV_UNKNOWN : n_valid == 1 ? SV_VALID : SV_INVALID;
      if (!json_is_array(kv) || n == 0) e = unknown(c, k);
      r = and3(r, e);
    } else if (!strcmp(k, "not")) {
      sv_result e = val(c, kv, v);
      r = and3(r, e == SV_UNKNOWN ? SV_UNKNOWN : e == SV_VALID ? SV_INVALID : SV_VALID);
    } else if (!strcmp(k, "if")) {
      sv_result e = val(c, kv, v);
      const json_t *branch = json_object_get(s, e == SV_VALID ? "then" : "else");
      r = and3(r, e == SV_UNKNOWN ? unknown(c, "if") : branch ? val(c, branch, v) : SV_VALID);
    }
    /* any other keyword is unknown to JSON Schema and has no effect */
  }
  c->depth--;
  return r;
}

sv_result su_validate(const json_t *root, const json_t *s, const json_t *v, const char **why) {
  vctx c = {.root = root};
  sv_result r = val(&c, s, v);
  if (why) *why = c.why;
  return r;
}
