/* JSON pieces shared by the JSON Schema and "any JSON" front ends, and the
 * Python-compatible serialiser (json.dumps(ensure_ascii=False)) that both the
 * grammar's literals and grammar-bench's instances use. */
#ifndef DI_GRAMMAR_JSON_H
#define DI_GRAMMAR_JSON_H

#include <jansson.h>

#include "grammar/grammar.h"
#include "grammar/gx.h"

typedef struct gjson {
  gx *g;
  di_json_ws ws;
  int32_t r_value, r_string, r_number, r_integer, r_ws; /* rules made on first use, -1 before */
  int32_t any_char; /* one character inside a string (escaped as Python does), -1 before first use */
} gjson;

void gj_init(gjson *j, gx *g, di_json_ws ws);
/* rx_encode_fn: characters as they appear inside a JSON string (Python's
 * escapes for '"', '\\' and controls). ctx unused. */
int32_t gj_encode_chars(gx *g, const gx_cpset *chars, void *ctx);
int32_t gj_any_value(gjson *j);
int32_t gj_any_string(gjson *j);
/* Any one character inside a JSON string (built once per grammar). */
int32_t gj_any_char(gjson *j);
int32_t gj_number(gjson *j);
int32_t gj_integer(gjson *j);
int32_t gj_open(gjson *j, char c);  /* "{" / "[" (+ whitespace) */
int32_t gj_close(gjson *j, char c); /* (whitespace +) "}" / "]" */
int32_t gj_comma(gjson *j);
int32_t gj_colon(gjson *j);
/* The canonical text of a value, with this mode's separators. */
int32_t gj_literal(gjson *j, const json_t *v);
/* A JSON string literal's bytes for s (quotes included), appended to buf. */
typedef struct gbuf {
  char *p;
  size_t n, cap;
} gbuf;
void gbuf_put(gbuf *b, const char *s, size_t n);
void gj_quote(gbuf *b, const char *s, size_t n);
/* Python's json.dumps(v, ensure_ascii=False) text; malloc'ed. */
char *gj_py_dumps(const json_t *v);
/* Python repr of a float ("1.0", "1e-05", "1.5e+16", "Infinity"). */
void gj_py_float(double d, char out[32]);

#endif
