/* Regular-language operations on call-free DFAs (from ga_expr_dfa): the
 * product automaton for intersection and difference, emptiness and
 * membership, and embedding a result in a grammar as one expression. The
 * JSON Schema front end uses them where keywords combine as languages: a
 * pattern with minLength/maxLength or a format, and object keys that match
 * some patternProperties but not others nor a named property. */
#ifndef DI_GRAMMAR_FSA_H
#define DI_GRAMMAR_FSA_H

#include <stdbool.h>
#include <stddef.h>

#include "grammar/automaton.h"

typedef enum fsa_op { FSA_AND, FSA_AND_NOT } fsa_op;

/* out = a and b, or a and not b (strings of a that b rejects), over the
 * reachable state pairs; DI_ERR_RANGE past max_states. */
di_code fsa_product(const ga *a, const ga *b, fsa_op op, uint32_t max_states, ga *out, di_status *st);
bool fsa_empty(const ga *a);
bool fsa_accepts(const ga *a, const char *s, size_t n);
/* a without its dead states as a GXK_AUT expression of g; GX_NOTHING when a
 * admits nothing. a is left as it was. */
int32_t fsa_to_gx(gx *g, const ga *a);

#endif
