/* Whether two JSON Schemas provably admit no common instance (see
 * schema_util.h). Used for oneOf: when every pair of branches is disjoint,
 * "exactly one" equals "at least one" and the branches compile as anyOf.
 *
 * Only proofs are returned: every rule below says "no instance satisfies
 * both"; anything not covered answers false (maybe overlapping). A schema is
 * read as the conjunction of its own keywords, its $ref target and its allOf
 * members, so any one of those being disjoint from the other side suffices;
 * an anyOf/oneOf is disjoint when all its branches are. */
#include <math.h>
#include <string.h>

#include "grammar/schema_util.h"

enum { DJ_MAX_DEPTH = 24, DJ_MAX_STEPS = 200000 }; /* steps: for all pairs of one oneOf */

typedef struct dj {
  const json_t *root;
  size_t steps;
} dj;

static bool disjoint(dj *c, const json_t *a, const json_t *b, int depth);

/* Values equal as JSON Schema compares them (1 == 1.0). */
static bool val_eq(const json_t *x, const json_t *y) {
  if (json_is_number(x) && json_is_number(y)) return json_number_value(x) == json_number_value(y);
  return json_equal((json_t *)x, (json_t *)y);
}

enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_INT = 32, T_NUM = 64, T_ALL = 127 };

static unsigned type_bit(const char *t) {
  static const char *names[] = {"null", "boolean", "object", "array", "string", "integer", "number"};
  for (unsigned i = 0; i < 7; i++)
    if (!strcmp(t, names[i])) return 1u << i;
  return T_ALL; /* unknown: assume anything (the compiler reports it) */
}

static unsigned value_types(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_NULL: return T_NULL;
  case JSON_TRUE:
  case JSON_FALSE: return T_BOOL;
  case JSON_OBJECT: return T_OBJ;
  case JSON_ARRAY: return T_ARR;
  case JSON_STRING: return T_STR;
  case JSON_INTEGER: return T_INT | T_NUM;
  case JSON_REAL: return json_real_value(v) == floor(json_real_value(v)) ? T_INT | T_NUM : T_NUM;
  }
  return T_ALL;
}

/* The types a schema's own keywords allow; integer is within number. */
static unsigned own_types(const json_t *s) {
  const json_t *t = json_object_get(s, "type");
  unsigned m = 0;
  if (json_is_string(t)) m = type_bit(json_string_value(t));
  else if (json_is_array(t)) {
    size_t i;
    json_t *e;
    json_array_foreach((json_t *)t, i, e) m |= json_is_string(e) ? type_bit(json_string_value(e)) : T_ALL;
  } else m = T_ALL;
  if (json_is_true(json_object_get(s, "nullable"))) m |= T_NULL;
  if (m & T_NUM) m |= T_INT;
  return m;
}

/* The values a schema's const/enum allow, or NULL. */
static const json_t *own_values(const json_t *s, json_t **owned) {
  const json_t *cv = json_object_get(s, "const");
  *owned = NULL;
  if (cv) {
    *owned = json_array();
    json_array_append(*owned, (json_t *)cv);
    return *owned;
  }
  const json_t *ev = json_object_get(s, "enum");
  return json_is_array(ev) ? ev : NULL;
}

/* The schema a property's value must satisfy under s's own keywords; NULL
 * when that is not known here (patternProperties). json_false() when s
 * forbids the property. */
static const json_t *prop_schema(const json_t *s, const char *name) {
  const json_t *props = json_object_get(s, "properties");
  const json_t *ps = json_is_object(props) ? json_object_get(props, name) : NULL;
  if (ps) return ps;
  const json_t *pp = json_object_get(s, "patternProperties");
  if (json_is_object(pp) && json_object_size(pp)) return NULL;
  const json_t *ap = json_object_get(s, "additionalProperties");
  return ap ? ap : json_true();
}

/* Whether v certainly fails s (conservative: false when unsure). */
static bool not_instance(dj *c, const json_t *v, const json_t *s, int depth) {
  if (json_is_false(s)) return true;
  if (!json_is_object(s) || depth > DJ_MAX_DEPTH || ++c->steps > DJ_MAX_STEPS) return false;
  const json_t *ref = json_object_get(s, "$ref");
  if (json_is_string(ref)) {
    di_status st = {0};
    const json_t *t = su_resolve(c->root, json_string_value(ref), &st);
    if (t && not_instance(c, v, t, depth + 1)) return true;
  }
  const json_t *all = json_object_get(s, "allOf");
  size_t i;
  json_t *e;
  json_array_foreach((json_t *)all, i, e) if (not_instance(c, v, e, depth + 1)) return true;
  if (!(own_types(s) & value_types(v))) return true;
  json_t *owned;
  const json_t *vals = own_values(s, &owned);
  bool out = false;
  if (vals) {
    out = true;
    json_array_foreach((json_t *)vals, i, e) if (val_eq(e, v)) out = false;
  }
  json_decref(owned);
  if (out) return true;
  if (json_is_object(v)) {
    const json_t *req = json_object_get(s, "required");
    json_array_foreach((json_t *)req, i, e) if (json_is_string(e) && !json_object_get(v, json_string_value(e))) return true;
    const char *k;
    json_t *pv;
    json_object_foreach((json_t *)v, k, pv) {
      const json_t *ps = prop_schema(s, k);
      if (ps && not_instance(c, pv, ps, depth + 1)) return true;
    }
  }
  return false;
}

/* Every value of vals fails s. */
static bool values_outside(dj *c, const json_t *vals, const json_t *s, int depth) {
  size_t i;
  json_t *e;
  json_array_foreach((json_t *)vals, i, e) {
    if (not_instance(c, e, s, depth)) continue;
    /* the full check of one value, where the quick rules above are unsure */
    if (++c->steps > DJ_MAX_STEPS || su_validate(c->root, s, e, NULL) != SV_INVALID) return false;
  }
  return true;
}

static bool get_num(const json_t *s, const char *k, double *v) {
  const json_t *x = json_object_get(s, k);
  if (!json_is_number(x)) return false;
  *v = json_number_value(x);
  return true;
}

/* Numeric ranges that cannot meet (draft-04 boolean exclusives read as
 * inclusive bounds, which only weakens the proof). */
static bool ranges_apart(const json_t *a, const json_t *b) {
  double lo, hi;
  bool lo_x, hi_x;
  for (int side = 0; side < 2; side++) {
    const json_t *x = side ? b : a, *y = side ? a : b;
    bool has_hi = false, has_lo = false;
    if (get_num(x, "exclusiveMaximum", &hi)) has_hi = hi_x = true;
    else if (get_num(x, "maximum", &hi)) has_hi = true, hi_x = false;
    if (get_num(y, "exclusiveMinimum", &lo)) has_lo = lo_x = true;
    else if (get_num(y, "minimum", &lo)) has_lo = true, lo_x = false;
    if (has_hi && has_lo && (hi < lo || (hi == lo && (hi_x || lo_x)))) return true;
  }
  return false;
}

/* Objects satisfying both a's and b's own keywords: none when some property
 * one side requires has value schemas that are disjoint (a side that
 * forbids the property counts as false). */
static bool objects_apart(dj *c, const json_t *a, const json_t *b, int depth) {
  for (int side = 0; side < 2; side++) {
    const json_t *x = side ? b : a, *y = side ? a : b;
    const json_t *req = json_object_get(x, "required");
    size_t i;
    json_t *r;
    json_array_foreach((json_t *)req, i, r) {
      if (!json_is_string(r)) continue;
      const char *name = json_string_value(r);
      const json_t *px = prop_schema(x, name), *py = prop_schema(y, name);
      if (px && py && disjoint(c, px, py, depth + 1)) return true;
    }
    /* a property both may have, required by neither, cannot separate them */
  }
  return false;
}

/* a's and b's own keywords (no $ref, allOf, anyOf, oneOf) admit nothing in common. */
static bool own_disjoint(dj *c, const json_t *a, const json_t *b, int depth) {
  unsigned ta = own_types(a), tb = own_types(b), t = ta & tb;
  json_t *oa, *ob;
  const json_t *va = own_values(a, &oa), *vb = own_values(b, &ob);
  bool out = false;
  if (!t) out = true;
  else if (va && vb) {
    out = true;
    size_t i, j;
    json_t *x, *y;
    json_array_foreach((json_t *)va, i, x) json_array_foreach((json_t *)vb, j, y) if (val_eq(x, y)) out = false;
  } else if (va) out = values_outside(c, va, b, depth + 1);
  else if (vb) out = values_outside(c, vb, a, depth + 1);
  json_decref(oa);
  json_decref(ob);
  if (out) return true;
  /* every type both allow must be told apart */
  if (t & (T_NULL | T_BOOL | T_ARR | T_STR)) return false;
  if ((t & (T_INT | T_NUM)) && !ranges_apart(a, b)) return false;
  if ((t & T_OBJ) && !objects_apart(c, a, b, depth)) return false;
  return true;
}

/* a's other parts: its $ref target and allOf members, each of which a implies. */
static bool part_disjoint(dj *c, const json_t *a, const json_t *b, int depth) {
  const json_t *ref = json_object_get(a, "$ref");
  if (json_is_string(ref)) {
    di_status st = {0};
    const json_t *t = su_resolve(c->root, json_string_value(ref), &st);
    if (t && disjoint(c, t, b, depth + 1)) return true;
  }
  const json_t *all = json_object_get(a, "allOf");
  size_t i;
  json_t *e;
  json_array_foreach((json_t *)all, i, e) if (disjoint(c, e, b, depth + 1)) return true;
  static const char *alts[] = {"anyOf", "oneOf"};
  for (int k = 0; k < 2; k++) {
    const json_t *v = json_object_get(a, alts[k]);
    if (!json_is_array(v) || !json_array_size(v)) continue;
    bool all_apart = true;
    json_array_foreach((json_t *)v, i, e) if (!(all_apart = disjoint(c, e, b, depth + 1))) break;
    if (all_apart) return true;
  }
  return false;
}

static bool disjoint(dj *c, const json_t *a, const json_t *b, int depth) {
  if (json_is_false(a) || json_is_false(b)) return true;
  if (!json_is_object(a) || !json_is_object(b)) return false;
  if (depth > DJ_MAX_DEPTH || ++c->steps > DJ_MAX_STEPS) return false;
  return part_disjoint(c, a, b, depth) || part_disjoint(c, b, a, depth) || own_disjoint(c, a, b, depth);
}

bool su_all_disjoint(const json_t *root, const json_t *const *s, size_t n, size_t *pi, size_t *pj) {
  dj c = {.root = root};
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++)
      if (!disjoint(&c, s[i], s[j], 0)) {
        *pi = i;
        *pj = j;
        return false;
      }
  return true;
}
