/* The JSON Schema compiler's state and the entry points its files share
 * (schema.c: dispatch, $ref, combinators; schema_scalar.c: strings and
 * numbers; schema_object.c: objects). Private to those files. */
#ifndef DI_GRAMMAR_SCHEMA_SC_H
#define DI_GRAMMAR_SCHEMA_SC_H

#include <jansson.h>

#include "grammar/fsa.h"
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

/* Sets the error (the first one wins) and returns GX_NOTHING. */
int32_t sc_fail(sc *c, di_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The expression of schema s (GX_NOTHING with c->err set on failure). */
int32_t sc_compile(sc *c, const json_t *s);
int32_t sc_any_value(sc *c);
/* Whether s has no keyword but a, b (may be NULL) and annotations. */
bool sc_only_annotations(const json_t *s, const char *a, const char *b);
/* A copy of s without key. */
json_t *sc_without(const json_t *s, const char *key);
bool sc_get_num(const json_t *s, const char *k, double *v);

int32_t sc_string(sc *c, const json_t *s);
int32_t sc_integer(sc *c, const json_t *s);
int32_t sc_number(sc *c, const json_t *s);
int32_t sc_object(sc *c, const json_t *s);

#endif
