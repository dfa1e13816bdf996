/* String languages of the JSON Schema front end built as automata where
 * keywords combine by intersection or difference (fsa.h): a string under
 * several of pattern / format / minLength / maxLength, and object keys
 * (patternProperties regions, named properties left out). All languages are
 * of the text between the quotes, as json.dumps(ensure_ascii=False) writes
 * it, so a key or value has exactly one spelling. */
#ifndef DI_GRAMMAR_SCHEMA_LANG_H
#define DI_GRAMMAR_SCHEMA_LANG_H

#include "grammar/automaton.h"
#include "grammar/fsa.h"
#include "grammar/json.h"

/* per automaton, and in all per grammar (products cost ~256 steps a state) */
enum { SL_MAX_STATES = 1 << 16, SL_BUDGET = 1 << 19 };

/* DFA of a regex (search semantics, as `pattern`), NULL re: any string;
 * mn / mx (-1: none) bound the length in characters. */
di_code sl_regex_dfa(gx *g, const char *re, size_t len, di_status *st, ga *out);
di_code sl_length_dfa(gx *g, gjson *j, long long mn, long long mx, di_status *st, ga *out);
/* DFA of exactly the given strings (encoded as keys are). */
di_code sl_names_dfa(gx *g, const char *const *names, size_t n, di_status *st, ga *out);
/* out = a op b within the grammar's budget. */
di_code sl_product(gx *g, const ga *a, const ga *b, fsa_op op, ga *out, di_status *st);
/* *acc = *acc op b (acc replaced, b kept). */
di_code sl_and(gx *g, ga *acc, const ga *b, fsa_op op, di_status *st);
/* Whether the encoded form of the string s is in the language of d. */
bool sl_matches(const ga *d, const char *s, size_t n);

#endif
