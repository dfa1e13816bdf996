/* The internal grammar every front end (JSON Schema, regex, GBNF) builds:
 * rules whose bodies are expressions over byte ranges, sequences,
 * alternations, bounded/unbounded repetition and references to rules.
 * grammar_compile turns it into per-rule byte automata the matcher walks.
 *
 * Builder calls never fail individually: past the node budget they set
 * `overflow` and return GX_NOTHING, and compile reports "grammar too large",
 * so front ends stay free of error plumbing for each node. */
#ifndef DI_GRAMMAR_GX_H
#define DI_GRAMMAR_GX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { GX_NOTHING = 0, GX_EMPTY = 1 }; /* the two fixed expression ids */

typedef enum gx_kind { GXK_NOTHING, GXK_EMPTY, GXK_BYTES, GXK_SEQ, GXK_ALT, GXK_REP, GXK_REF, GXK_AUT } gx_kind;

/* An explicit byte automaton embedded as one expression (GXK_AUT): what
 * intersection and difference of regular languages produce (fsa.h), which
 * sequences and alternations cannot say compactly. Start state 0; edges of
 * state s are e[off[s] .. off[s + 1]). */
typedef struct gx_aut_edge {
  uint8_t lo, hi;
  int32_t to;
} gx_aut_edge;
typedef struct gx_aut {
  uint32_t n_st;
  uint32_t *off;
  gx_aut_edge *e;
  bool *final;
} gx_aut;

typedef struct gx_node {
  uint8_t kind, lo, hi;
  int32_t min, max; /* REP: max -1 = unbounded */
  int32_t kid_off, nkids; /* SEQ/ALT: kids in gx.kids; REP: one kid */
  int32_t ref;            /* REF: rule id; AUT: index in gx.auts */
} gx_node;

typedef struct gx_rule {
  char name[64];
  int32_t body; /* -1 = declared, not yet defined */
} gx_rule;

typedef struct gx {
  gx_node *nodes;
  size_t n_nodes, cap_nodes;
  int32_t *kids;
  size_t n_kids, cap_kids;
  gx_rule *rules;
  size_t n_rules, cap_rules;
  gx_aut *auts;
  size_t n_auts, cap_auts, aut_cost; /* aut_cost: states + edges, counted in the budget */
  size_t fsa_states; /* automaton states built for products so far (schema_lang.c bounds it) */
  size_t max_nodes; /* budget (nodes + kids + automaton edges) */
  bool overflow;
  /* Regex groups become rules of their own: each rule's automaton stays
   * small where one determinised automaton would blow up (the stack sets
   * carry the nondeterminism instead). Set for a second attempt. */
  bool split_groups;
} gx;

void gx_init(gx *g, size_t max_nodes);
void gx_free(gx *g);

int32_t gx_rule_new(gx *g, const char *name); /* returns a rule id */
void gx_rule_define(gx *g, int32_t rule, int32_t body);
int32_t gx_ref(gx *g, int32_t rule);

int32_t gx_bytes(gx *g, uint8_t lo, uint8_t hi);
int32_t gx_lit(gx *g, const char *s, size_t n);
int32_t gx_str(gx *g, const char *s); /* NUL-terminated literal */
int32_t gx_seq(gx *g, const int32_t *items, size_t n);
int32_t gx_alt(gx *g, const int32_t *items, size_t n);
int32_t gx_seq2(gx *g, int32_t a, int32_t b);
int32_t gx_seq3(gx *g, int32_t a, int32_t b, int32_t c);
int32_t gx_alt2(gx *g, int32_t a, int32_t b);
int32_t gx_rep(gx *g, int32_t e, int32_t min, int32_t max); /* max -1 = unbounded */
int32_t gx_star(gx *g, int32_t e);
int32_t gx_plus(gx *g, int32_t e);
int32_t gx_opt(gx *g, int32_t e);
/* Takes ownership of a (its arrays are freed with g); GX_NOTHING past the budget. */
int32_t gx_aut_take(gx *g, gx_aut *a);

/* A set of Unicode code points as sorted, disjoint, inclusive ranges. */
typedef struct gx_cpset {
  uint32_t (*r)[2];
  size_t n, cap;
} gx_cpset;
void gx_cpset_add(gx_cpset *s, uint32_t lo, uint32_t hi); /* any order; normalised lazily */
void gx_cpset_normalize(gx_cpset *s);                     /* sort + merge */
void gx_cpset_negate(gx_cpset *s);                        /* within [0, 0x10FFFF] */
void gx_cpset_free(gx_cpset *s);
/* UTF-8 encodings of the code points in s (surrogates excluded). */
int32_t gx_utf8_class(gx *g, const gx_cpset *s);
int32_t gx_utf8_range(gx *g, uint32_t lo, uint32_t hi);
size_t gx_utf8_encode(uint32_t cp, char out[4]);

#endif
