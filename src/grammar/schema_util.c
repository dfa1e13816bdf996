/* JSON Schema helpers (see schema_util.h). */
#include "grammar/schema_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *annotations[] = {"title", "description", "default", "examples", "$comment", "$schema",
                                    "$id", "id", "deprecated", "readOnly", "writeOnly", "$defs",
                                    "definitions", "$anchor", "$vocabulary", "contentEncoding",
                                    "contentMediaType", "contentSchema", "example", "markdownDescription",
                                    "$dynamicAnchor", "$recursiveAnchor", "discriminator", "xml",
                                    "externalDocs", "errorMessage", "strict", "x-stainless-any"};

bool su_is_annotation(const char *kw) {
  for (size_t i = 0; i < sizeof annotations / sizeof annotations[0]; i++)
    if (!strcmp(kw, annotations[i])) return true;
  return !strncmp(kw, "x-", 2);
}

static const json_t *find_anchor(const json_t *n, const char *name, int depth) {
  if (depth > 64) return NULL;
  if (json_is_object(n)) {
    const json_t *a = json_object_get(n, "$anchor");
    if (json_is_string(a) && !strcmp(json_string_value(a), name)) return n;
    const json_t *id = json_object_get(n, "$id");
    if (json_is_string(id) && json_string_value(id)[0] == '#' && !strcmp(json_string_value(id) + 1, name)) return n;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)n, k, v) {
      if (!strcmp(k, "enum") || !strcmp(k, "const")) continue;
      const json_t *r = find_anchor(v, name, depth + 1);
      if (r) return r;
    }
  } else if (json_is_array(n)) {
    for (size_t i = 0; i < json_array_size(n); i++) {
      const json_t *r = find_anchor(json_array_get(n, i), name, depth + 1);
      if (r) return r;
    }
  }
  return NULL;
}

static int hexv(int c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

const json_t *su_resolve(const json_t *root, const char *ref, di_status *st) {
  const char *p = ref;
  const json_t *id = json_object_get(root, "$id");
  if (*p != '#') {
    size_t il = json_is_string(id) ? strlen(json_string_value(id)) : 0;
    const char *hash = strchr(p, '#');
    size_t pl = hash ? (size_t)(hash - p) : strlen(p);
    if (il && pl == il && !strncmp(p, json_string_value(id), il)) p += pl;
    else if (!hash && il && pl == il) p += pl;
    else {
      di_errorf(st, DI_ERR_UNSUPPORTED, "$ref '%.200s': only references inside this schema are supported", ref);
      return NULL;
    }
    if (!*p) return root;
  }
  p++; /* '#' */
  if (*p && *p != '/') {
    const json_t *a = find_anchor(root, p, 0);
    if (!a) di_errorf(st, DI_ERR_INVALID, "$ref '%.200s': no such $anchor", ref);
    return a;
  }
  const json_t *cur = root;
  while (*p == '/') {
    p++;
    char tok[512];
    size_t n = 0;
    while (*p && *p != '/' && n + 1 < sizeof tok) {
      char c = *p++;
      if (c == '~' && (*p == '0' || *p == '1')) c = *p++ == '0' ? '~' : '/';
      else if (c == '%' && hexv(p[0]) >= 0 && hexv(p[1]) >= 0) {
        c = (char)(hexv(p[0]) * 16 + hexv(p[1]));
        p += 2;
      }
      tok[n++] = c;
    }
    tok[n] = 0;
    if (json_is_object(cur)) cur = json_object_get(cur, tok);
    else if (json_is_array(cur)) {
      char *end;
      long i = strtol(tok, &end, 10);
      cur = *end || i < 0 ? NULL : json_array_get(cur, (size_t)i);
    } else cur = NULL;
    if (!cur) {
      di_errorf(st, DI_ERR_INVALID, "$ref '%.200s': the pointer leads nowhere (at '%.100s')", ref, tok);
      return NULL;
    }
  }
  return cur;
}

/* ---- allOf ---- */

static json_t *all_of(const json_t *a, const json_t *b) {
  return json_pack("{s:[OO]}", "allOf", a, b);
}

static bool is_min_kw(const char *k) {
  return !strcmp(k, "minimum") || !strcmp(k, "minLength") || !strcmp(k, "minItems") ||
         !strcmp(k, "minProperties") || !strcmp(k, "minContains");
}
static bool is_max_kw(const char *k) {
  return !strcmp(k, "maximum") || !strcmp(k, "maxLength") || !strcmp(k, "maxItems") ||
         !strcmp(k, "maxProperties") || !strcmp(k, "maxContains");
}

static json_t *types_of(const json_t *t) {
  if (json_is_string(t)) return json_pack("[O]", t);
  return json_incref((json_t *)t);
}

static bool has_type(const json_t *arr, const char *t) {
  for (size_t i = 0; i < json_array_size(arr); i++)
    if (!strcmp(json_string_value(json_array_get(arr, i)) ? json_string_value(json_array_get(arr, i)) : "", t))
      return true;
  return false;
}

json_t *su_merge(const json_t *a, const json_t *b, di_status *st) {
  if (json_is_true(a)) return json_incref((json_t *)b);
  if (json_is_true(b)) return json_incref((json_t *)a);
  if (json_is_false(a) || json_is_false(b)) return json_false();
  if (!json_is_object(a) || !json_is_object(b)) {
    di_errorf(st, DI_ERR_INVALID, "allOf: a subschema is neither an object nor a boolean");
    return NULL;
  }
  json_t *r = json_deep_copy(a);
  const char *k;
  json_t *vb;
  json_object_foreach((json_t *)b, k, vb) {
    json_t *va = json_object_get(r, k);
    if (!va) {
      json_object_set(r, k, vb);
      continue;
    }
    if (su_is_annotation(k) || json_equal(va, vb)) continue;
    if (!strcmp(k, "properties") || !strcmp(k, "patternProperties") || !strcmp(k, "$defs") || !strcmp(k, "definitions")) {
      if (!json_is_object(va) || !json_is_object(vb)) goto conflict;
      json_t *m = json_deep_copy(va);
      const char *pk;
      json_t *pv;
      json_object_foreach(vb, pk, pv) {
        json_t *pa = json_object_get(m, pk);
        json_object_set_new(m, pk, pa ? all_of(pa, pv) : json_incref(pv));
      }
      json_object_set_new(r, k, m);
    } else if (!strcmp(k, "required")) {
      json_t *m = json_deep_copy(va);
      for (size_t i = 0; i < json_array_size(vb); i++) {
        bool dup = false;
        for (size_t j = 0; j < json_array_size(m); j++) dup |= json_equal(json_array_get(m, j), json_array_get(vb, i));
        if (!dup) json_array_append(m, json_array_get(vb, i));
      }
      json_object_set_new(r, k, m);
    } else if (!strcmp(k, "type")) {
      json_t *ta = types_of(va), *tb = types_of(vb), *m = json_array();
      for (size_t i = 0; i < json_array_size(ta); i++) {
        const char *t = json_string_value(json_array_get(ta, i));
        if (!t) continue;
        if (has_type(tb, t)) json_array_append_new(m, json_string(t));
        else if (!strcmp(t, "integer") && has_type(tb, "number")) json_array_append_new(m, json_string("integer"));
        else if (!strcmp(t, "number") && has_type(tb, "integer")) json_array_append_new(m, json_string("integer"));
      }
      json_decref(ta);
      json_decref(tb);
      json_object_set_new(r, k, m);
    } else if (!strcmp(k, "enum")) {
      json_t *m = json_array();
      for (size_t i = 0; i < json_array_size(va); i++)
        for (size_t j = 0; j < json_array_size(vb); j++)
          if (json_equal(json_array_get(va, i), json_array_get(vb, j))) {
            json_array_append(m, json_array_get(va, i));
            break;
          }
      json_object_set_new(r, k, m);
    } else if (!strcmp(k, "const")) {
      json_object_set_new(r, "enum", json_array()); /* two different constants: nothing */
    } else if (is_min_kw(k) && json_is_number(va) && json_is_number(vb)) {
      if (json_number_value(vb) > json_number_value(va)) json_object_set(r, k, vb);
    } else if (is_max_kw(k) && json_is_number(va) && json_is_number(vb)) {
      if (json_number_value(vb) < json_number_value(va)) json_object_set(r, k, vb);
    } else if (!strcmp(k, "additionalProperties") || !strcmp(k, "items") || !strcmp(k, "additionalItems") ||
               !strcmp(k, "propertyNames") || !strcmp(k, "contains")) {
      if (json_is_array(va) || json_is_array(vb)) goto conflict;
      json_object_set_new(r, k, all_of(va, vb));
    } else if (!strcmp(k, "not")) { /* neither a nor b: not (a or b) */
      json_object_set_new(r, k, json_pack("{s:[O,O]}", "anyOf", va, vb));
    } else if (!strcmp(k, "allOf")) {
      json_t *m = json_deep_copy(va);
      json_array_extend(m, vb);
      json_object_set_new(r, k, m);
    } else if ((!strcmp(k, "anyOf") || !strcmp(k, "oneOf")) && json_array_size(va) * json_array_size(vb) <= 64) {
      json_t *m = json_array();
      for (size_t i = 0; i < json_array_size(va); i++)
        for (size_t j = 0; j < json_array_size(vb); j++)
          json_array_append_new(m, all_of(json_array_get(va, i), json_array_get(vb, j)));
      /* exactly one pair (i, j) holds iff exactly one i and exactly one j do,
       * so two oneOfs combine into a oneOf of the pairs */
      json_object_set_new(r, k, m);
    } else {
      goto conflict;
    }
  }
  return r;
conflict:
  di_errorf(st, DI_ERR_UNSUPPORTED, "allOf: cannot combine two different '%s'", k);
  json_decref(r);
  return NULL;
}

/* ---- integer ranges ---- */

static int32_t digits_any(gx *g, int n) { return gx_rep(g, gx_bytes(g, '0', '9'), n, n); }

/* Decimal strings of equal length n between lo and hi (inclusive). */
static int32_t same_len(gx *g, const char *lo, const char *hi, int n) {
  if (n == 0) return GX_EMPTY;
  /* a full range ("00..0" to "99..9") is any n digits; without this the
   * two-sided split below doubles per digit */
  int full = 0;
  while (full < n && lo[full] == '0' && hi[full] == '9') full++;
  if (full == n) return digits_any(g, n);
  if (lo[0] == hi[0]) return gx_seq2(g, gx_bytes(g, (uint8_t)lo[0], (uint8_t)lo[0]), same_len(g, lo + 1, hi + 1, n - 1));
  char nines[24], zeros[24];
  memset(nines, '9', (size_t)n);
  memset(zeros, '0', (size_t)n);
  int32_t a[3];
  a[0] = gx_seq2(g, gx_bytes(g, (uint8_t)lo[0], (uint8_t)lo[0]), same_len(g, lo + 1, nines, n - 1));
  a[1] = lo[0] + 1 <= hi[0] - 1 ? gx_seq2(g, gx_bytes(g, (uint8_t)(lo[0] + 1), (uint8_t)(hi[0] - 1)), digits_any(g, n - 1))
                                : GX_NOTHING;
  a[2] = gx_seq2(g, gx_bytes(g, (uint8_t)hi[0], (uint8_t)hi[0]), same_len(g, zeros, hi + 1, n - 1));
  return gx_alt(g, a, 3);
}

static int ndig(unsigned long long v) {
  int n = 1;
  while (v >= 10) v /= 10, n++;
  return n;
}

/* Non-negative integers in [lo, hi] (hi_inf: unbounded). */
static int32_t nonneg(gx *g, unsigned long long lo, unsigned long long hi, bool hi_inf) {
  int32_t alts[24];
  size_t n = 0;
  int dl = ndig(lo), dh = hi_inf ? 20 : ndig(hi);
  for (int d = dl; d <= dh && d <= 19; d++) {
    unsigned long long p10 = 1; /* 10^(d-1) */
    for (int k = 1; k < d; k++) p10 *= 10;
    unsigned long long a = d == dl ? lo : p10;
    unsigned long long b = !hi_inf && d == dh ? hi : p10 * 10 - 1;
    char sa[24], sb[24];
    snprintf(sa, sizeof sa, "%llu", a);
    snprintf(sb, sizeof sb, "%llu", b);
    alts[n++] = same_len(g, sa, sb, d);
  }
  if (hi_inf) alts[n++] = gx_seq2(g, gx_bytes(g, '1', '9'), gx_rep(g, gx_bytes(g, '0', '9'), 19, -1));
  return gx_alt(g, alts, n);
}

int32_t su_int_range(gx *g, long long lo, bool lo_inf, long long hi, bool hi_inf) {
  if (!lo_inf && !hi_inf && lo > hi) return GX_NOTHING;
  int32_t alts[2];
  size_t n = 0;
  /* negative part: -(m) for m in [max(1, -hi), -lo] */
  if (lo_inf || lo < 0) {
    unsigned long long mlo = hi_inf || hi >= 0 ? 1 : (unsigned long long)(-(hi + 1)) + 1;
    unsigned long long mhi = lo_inf ? 0 : (unsigned long long)(-(lo + 1)) + 1;
    alts[n++] = gx_seq2(g, gx_str(g, "-"), nonneg(g, mlo, mhi, lo_inf));
  }
  if (hi_inf || hi >= 0) {
    unsigned long long a = lo_inf || lo < 0 ? 0 : (unsigned long long)lo;
    alts[n++] = nonneg(g, a, hi_inf ? 0 : (unsigned long long)hi, hi_inf);
  }
  return gx_alt(g, alts, n);
}

/* ---- formats ---- */

/* days per month, 29 February in leap years only */
#define LEAP "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)"
#define DATE                                                                                       \
  "([0-9]{4}-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|[0-9]{4}-(0[469]|11)-(0[1-9]|[12][0-9]|30)|" \
  "[0-9]{4}-02-(0[1-9]|1[0-9]|2[0-8])|" LEAP "-02-29)"
#define TIME "([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
#define H16 "[0-9a-fA-F]{1,4}"
#define IPV4 "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"

/* RFC 3986 URI and relative reference (IP literals loosely: hex digits,
 * colons and dots in brackets) */
#define PCT "%[0-9A-Fa-f]{2}"
#define PCHAR "([A-Za-z0-9\\-._~!$&'()*+,;=:@]|" PCT ")"
#define SEG PCHAR "*"
#define SEGNZ PCHAR "+"
#define SEGNZNC "([A-Za-z0-9\\-._~!$&'()*+,;=@]|" PCT ")+"
#define AUTH                                                                                          \
  "(([A-Za-z0-9\\-._~!$&'()*+,;=:]|" PCT ")*@)?(\\[[0-9A-Fa-fvV:.]+\\]|([A-Za-z0-9\\-._~!$&'()*+,;=]|" PCT \
  ")*)(:[0-9]*)?"
#define SCHEME "[A-Za-z][A-Za-z0-9+.-]*"
#define HIER "(//" AUTH "(/" SEG ")*|/(" SEGNZ "(/" SEG ")*)?|" SEGNZ "(/" SEG ")*)?"
#define REL "(//" AUTH "(/" SEG ")*|/(" SEGNZ "(/" SEG ")*)?|" SEGNZNC "(/" SEG ")*)?"
#define QF "(\\?(" PCHAR "|[/?])*)?(#(" PCHAR "|[/?])*)?"
/* RFC 6570 URI template: literals and {operator varspec,...} expressions */
#define VARCHAR "([A-Za-z0-9_]|" PCT ")"
#define VARSPEC VARCHAR "(\\.?" VARCHAR ")*(:[1-9][0-9]{0,3}|\\*)?"

static const struct {
  const char *name, *re;
} formats[] = {
    {"date", "^" DATE "$"},
    {"time", "^" TIME "$"},
    {"date-time", "^" DATE "[Tt]" TIME "$"},
    {"duration", "^P([0-9]+W|([0-9]+Y)?([0-9]+M)?([0-9]+D)?(T([0-9]+H)?([0-9]+M)?([0-9]+(\\.[0-9]+)?S)?)?)$"},
    {"email", "^[^\\s@\"<>()\\[\\],;:\\\\]+@[^\\s@\"<>()\\[\\],;:\\\\]+$"},
    {"hostname", "^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\\.?$"},
    {"ipv4", "^" IPV4 "$"},
    {"ipv6", "^(" H16 ":){7}" H16 "$|^((" H16 ":){0,7}" H16 ")?::((" H16 ":){0,7}" H16 ")?$|^(" H16 ":){6}" IPV4 "$|^((" H16 ":){0,5}" H16 ")?::((" H16 ":){0,5}" H16 ":)?" IPV4 "$"},
    {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
    {"uri", "^" SCHEME ":" HIER QF "$"},
    {"uri-reference", "^" SCHEME ":" HIER QF "$|^" REL QF "$"},
    {"uri-template", "^([^\\x00-\\x20\"'%<>\\\\^`{|}\\x7F]|" PCT "|\\{[+#./;?&=,!@|]?" VARSPEC "(," VARSPEC ")*\\})*$"},
};

const char *su_format_regex(const char *format) {
  for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
    if (!strcmp(formats[i].name, format)) return formats[i].re;
  return NULL;
}
