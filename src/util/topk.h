/* Selections over logits with one total order (larger value first, then the
 * smaller id), so every selection is deterministic even with ties and gives
 * the same answer whether it runs over a whole row or merges the selections
 * of its slices (tensor parallel sampling on split logits). */
#ifndef DI_UTIL_TOPK_H
#define DI_UTIL_TOPK_H

#include <stdbool.h>
#include <stdint.h>

typedef struct di_topk_pair {
  float v;
  int32_t id;
} di_topk_pair;

static inline bool di_topk_before(di_topk_pair a, di_topk_pair b) { return a.v > b.v || (a.v == b.v && a.id < b.id); }

/* Moves the m best of a[0..n) to the front, sorted (m <= n). */
void di_topk_select(di_topk_pair *a, int n, int m);

/* The first index of the largest of l[0..n), NaNs skipped; 0 when l[0] is
 * NaN or nothing is above -inf (the plain scan `l[i] > l[best]`'s answer). */
int32_t di_argmax(const float *l, int n);

/* Sampling on split logits (graph/forward_tp.c): the reduction of a slice
 * l[0..w) of a logits row, whose first token is id0, into out: k = 1: the
 * slice's first largest {l, id}, NaNs skipped ({-inf, -1}: nothing above
 * -inf); k > 1: its min(k, w) best pairs {l * (1 / temperature), id} (the
 * pairs the sampler's top-k selects from), best first, selected in scratch
 * (w pairs). Returns the pairs written. */
int di_topk_slice(const float *l, int w, int32_t id0, int k, float temperature, di_topk_pair *scratch, di_topk_pair *out);
/* The merge of a row's slice reductions, n pairs in slice order (reordered
 * in place), into out: k = 1: the whole row's di_argmax as {l, id} (l0: the
 * row's logit 0, whose NaN wins); k > 1: the row's k best pairs, best
 * first, the same as a top-k selection over the whole row (k <= n). */
void di_topk_merge(di_topk_pair *parts, int n, int k, float l0, di_topk_pair *out);

#endif
