/* Structured output: grammars compiled from JSON Schema, "any JSON", regex or
 * GBNF, and per-request matchers that give the set of allowed next tokens as
 * a bitmask over the vocabulary.
 *
 * A di_grammar is immutable once compiled (its lazily filled per-state token
 * caches are internally locked), shared by reference count and cached by a
 * hash of (kind, options, source, tokenizer). A di_gmatcher belongs to one
 * request (one thread at a time). */
#ifndef DI_GRAMMAR_H
#define DI_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"
#include "util/status.h"

typedef enum di_grammar_kind {
  DI_GRAMMAR_JSON_SCHEMA,
  DI_GRAMMAR_JSON_ANY, /* response_format json_object: any JSON object */
  DI_GRAMMAR_REGEX,    /* the whole output matches (ECMAScript syntax) */
  DI_GRAMMAR_GBNF,     /* llama.cpp grammar, root rule "root" */
} di_grammar_kind;

/* Whitespace in generated JSON. */
typedef enum di_json_ws {
  DI_JSON_WS_PYTHON,  /* ", " and ": " exactly (Python json.dumps, MaskBench's harness) */
  DI_JSON_WS_COMPACT, /* "," and ":" */
  DI_JSON_WS_FREE,    /* any JSON whitespace between tokens (bounded runs) */
} di_json_ws;

typedef struct di_grammar_opts {
  di_json_ws ws;
  /* Tool calls: when before or after is set, the language is the front
   * end's, wrapped as before X after, repeated 1..max_repeat times (0 = once,
   * -1 = unbounded) with sep between the repetitions. */
  const char *before, *after, *sep;
  int max_repeat;
} di_grammar_opts;

typedef struct di_grammar di_grammar;
typedef struct di_gmatcher di_gmatcher;

/* Compiles src (a JSON Schema text, a regex, a GBNF text; ignored for
 * JSON_ANY) for tokenizer tok (NULL: a byte-level grammar whose matchers take
 * di_gmatcher_accept_bytes only, for validation and fuzzing). Returns a reference; release it. Errors name
 * the keyword / position at fault (DI_ERR_INVALID or DI_ERR_UNSUPPORTED). */
di_code di_grammar_compile(const di_tokenizer *tok, di_grammar_kind kind, const char *src, size_t len,
                           const di_grammar_opts *opts, di_grammar **out, di_status *st);
void di_grammar_release(di_grammar *g);
di_grammar *di_grammar_retain(di_grammar *g); /* another reference; returns g */
int32_t di_grammar_n_vocab(const di_grammar *g);
/* Number of 32-bit words in a mask. */
size_t di_grammar_mask_words(const di_grammar *g);

di_code di_gmatcher_new(di_grammar *g, di_gmatcher **out, di_status *st);
void di_gmatcher_free(di_gmatcher *m);
/* A copy with the same state and history (for n > 1 choices). */
di_gmatcher *di_gmatcher_fork(const di_gmatcher *m);

/* mask[i/32] bit i%32 = token i allowed next. End-of-generation ids are
 * allowed exactly when the output so far is complete. */
void di_gmatcher_fill_mask(di_gmatcher *m, uint32_t *mask);
/* Advances over one token; false (state unchanged) if it is not allowed.
 * An end-of-generation id is accepted only in an accepting state. */
bool di_gmatcher_accept_token(di_gmatcher *m, int32_t id);
/* Advances over raw bytes (tests); false and unchanged if not a valid prefix. */
bool di_gmatcher_accept_bytes(di_gmatcher *m, const char *s, size_t n);
/* Undoes the last n accepted tokens (speculative decoding); n is clamped. */
void di_gmatcher_rollback(di_gmatcher *m, size_t n);
size_t di_gmatcher_n_accepted(const di_gmatcher *m);
/* The text so far is a complete match. */
bool di_gmatcher_is_accepting(const di_gmatcher *m);
/* No byte can follow (only end of generation remains). */
bool di_gmatcher_is_finished(const di_gmatcher *m);

#endif
