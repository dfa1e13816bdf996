/* Stacks of the pushdown matcher as hash-consed persistent lists: a node is
 * (automaton state, parent node), so equal stacks are equal ids, sets of
 * stacks are sets of ints, and a fork or a rollback copies or truncates
 * arrays. Node 0 is the bottom (no state). Nodes are only ever appended, so
 * truncating to an earlier size undoes everything since (speculative token
 * walks, rolled-back tokens). */
#ifndef DI_GRAMMAR_POOL_H
#define DI_GRAMMAR_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/automaton.h"

typedef struct gp {
  int32_t *state, *parent, *next;
  uint32_t *seen; /* closure stamps per node */
  size_t n, cap;
  int32_t *head;
  size_t hcap;
  uint32_t stamp;
} gp;

void gp_init(gp *p);
void gp_free(gp *p);
bool gp_copy(gp *dst, const gp *src);
int32_t gp_intern(gp *p, int32_t state, int32_t parent);
void gp_truncate(gp *p, size_t n);

/* A growable set of node ids. */
typedef struct gset {
  int32_t *v;
  size_t n, cap;
} gset;
void gset_push(gset *s, int32_t x);
void gset_free(gset *s);

/* Steps every node of in (whose states have byte edges) over byte b and
 * closes the result: rule calls are entered, finished rules return to their
 * parents. out gets only nodes that can read another byte; *popped is set when
 * a finished rule returned to the bottom (the whole grammar matched, or, in a
 * context-free walk started from one state, the walk left that state's rule). */
void gp_step(gp *p, const ga *a, const gset *in, uint8_t b, gset *out, bool *popped);
/* The closure of a single node (the start of a match). */
void gp_close(gp *p, const ga *a, int32_t node, gset *out, bool *popped);

#endif
