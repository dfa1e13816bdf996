/* Helpers of the JSON Schema front end: $ref resolution, allOf merging,
 * integer ranges and format patterns. */
#ifndef DI_GRAMMAR_SCHEMA_UTIL_H
#define DI_GRAMMAR_SCHEMA_UTIL_H

#include <jansson.h>

#include "grammar/gx.h"
#include "util/status.h"

/* Resolves a local reference ("#", "#/a/b~1c", "#name" for $anchor, or the
 * root's own $id followed by one of those) against root. Borrowed; NULL with st
 * set (naming the reference) if it cannot be resolved here. */
const json_t *su_resolve(const json_t *root, const char *ref, di_status *st);

/* The schema both a and b describe (allOf), as a new reference; NULL with st
 * naming the keyword when they cannot be combined. */
json_t *su_merge(const json_t *a, const json_t *b, di_status *st);

/* Decimal integers (as Python prints them) in [lo, hi]; lo_inf / hi_inf make
 * that side unbounded. */
int32_t su_int_range(gx *g, long long lo, bool lo_inf, long long hi, bool hi_inf);

/* The regex (ECMAScript, anchored) of a string format, NULL if the format is
 * not one we enforce. */
const char *su_format_regex(const char *format);

/* Whether no two of the schemas s[0..n) provably share an instance (then
 * oneOf equals anyOf over them); when not, *pi < *pj name a pair that may
 * overlap. Conservative and bounded: unsure answers false. $refs resolve
 * against root. */
bool su_all_disjoint(const json_t *root, const json_t *const *s, size_t n, size_t *pi, size_t *pj);

/* Whether value v satisfies schema s ($refs against root): SV_UNKNOWN, with
 * *why naming the keyword, when that cannot be decided here (formats, $ref
 * beside other keywords, multipleOf on fractions near a multiple, ...). */
typedef enum sv_result { SV_INVALID, SV_VALID, SV_UNKNOWN } sv_result;
sv_result su_validate(const json_t *root, const json_t *s, const json_t *v, const char **why);

/* Keywords that never change validity. */
bool su_is_annotation(const char *kw);

#endif
