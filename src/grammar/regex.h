/* ECMAScript regular expressions (the syntax JSON Schema `pattern` uses) to
 * grammar expressions. Characters are turned into bytes by a caller-given
 * encoder, so one parser serves raw UTF-8 output and JSON string contents
 * (where a quote or a newline is written escaped). */
#ifndef DI_GRAMMAR_REGEX_H
#define DI_GRAMMAR_REGEX_H

#include "grammar/gx.h"
#include "util/status.h"

typedef int32_t (*rx_encode_fn)(gx *g, const gx_cpset *chars, void *ctx);

/* search: JSON Schema semantics (the pattern may match anywhere unless
 * anchored with ^ / $); otherwise the whole text must match. Returns an
 * expression id or -1 with st naming the offset and construct at fault
 * (lookaround, backreferences, word boundaries are rejected). */
int32_t rx_compile(gx *g, const char *src, size_t len, bool search, rx_encode_fn enc, void *ctx,
                   di_status *st);

int32_t rx_encode_utf8(gx *g, const gx_cpset *chars, void *ctx);

#endif
