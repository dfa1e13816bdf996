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

#endif
