/* A compiled grammar: one deterministic automaton per rule whose edges read a
 * byte range or call another rule (a recursive transition network). The
 * matcher runs it as a pushdown automaton: a stack of return states, with
 * nondeterminism only where several rules may be entered at one point. */
#ifndef DI_GRAMMAR_AUTOMATON_H
#define DI_GRAMMAR_AUTOMATON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "grammar/gx.h"
#include "util/status.h"

/* Grows array p (capacity cap, in elements) to hold need elements, doubling;
 * the compilers treat running out of memory as fatal. */
#define GROW(p, cap, need)                                                                  \
  do {                                                                                      \
    if ((need) > (cap)) {                                                                   \
      size_t nc_ = (cap) ? (cap)*2 : 64;                                                    \
      while (nc_ < (need)) nc_ *= 2;                                                        \
      void *q_ = realloc((p), nc_ * sizeof *(p));                                           \
      if (!q_) abort();                                                                     \
      (p) = q_;                                                                             \
      (cap) = nc_;                                                                          \
    }                                                                                       \
  } while (0)

typedef struct ga_range {
  uint8_t lo, hi;
  int32_t to;
} ga_range;

typedef struct ga_call {
  int32_t rule, ret; /* enter rule, come back to state ret */
} ga_call;

typedef struct ga_state {
  int32_t rule;
  uint32_t r_off, r_n; /* byte edges in ga.ranges, sorted, disjoint */
  uint32_t c_off, c_n; /* call edges in ga.calls */
  bool final;          /* the rule may end here */
} ga_state;

typedef struct ga {
  ga_state *st;
  uint32_t n_st;
  ga_range *ranges;
  uint32_t n_ranges;
  ga_call *calls;
  uint32_t n_calls;
  int32_t *rule_start; /* per rule */
  uint32_t n_rules;
  int32_t root;  /* root rule */
  char **rule_names;
} ga;

typedef struct ga_limits {
  uint32_t max_nfa_states; /* per compile, after repetition expansion */
  uint32_t max_dfa_states;
} ga_limits;

/* Compiles g (root = rule id) into a. Errors: an undefined rule, a budget
 * exceeded ("grammar too large"), left recursion (names the rule), or a
 * grammar that admits no string. */
di_code ga_compile(const gx *g, int32_t root, const ga_limits *lim, ga *a, di_status *st);
void ga_free(ga *a);
/* The DFA (one rule, start state 0, no calls) of expression x of g, which
 * must not reference rules; at most max_states states. Dead states are kept. */
di_code ga_expr_dfa(const gx *g, int32_t x, uint32_t max_states, ga *a, di_status *st);

/* The target of byte b from state s, or -1. */
static inline int32_t ga_step(const ga *a, int32_t s, uint8_t b) {
  const ga_state *S = &a->st[s];
  /* indexes, not a pointer to the state's first range: an automaton with no
   * ranges has a NULL array, and NULL + 0 is undefined */
  uint32_t lo = S->r_off, hi = S->r_off + S->r_n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (b > a->ranges[mid].hi) lo = mid + 1;
    else if (b < a->ranges[mid].lo) hi = mid;
    else return a->ranges[mid].to;
  }
  return -1;
}

#endif
