#include "util/topk.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int pair_cmp(const void *a, const void *b) {
  di_topk_pair x = *(const di_topk_pair *)a, y = *(const di_topk_pair *)b;
  return di_topk_before(x, y) ? -1 : di_topk_before(y, x) ? 1 : 0;
}

/* Moves the m best pairs to the front (quickselect), then sorts them. */
void di_topk_select(di_topk_pair *a, int n, int m) {
  if (m < n) {
    int lo = 0, hi = n - 1, k = m - 1;
    while (lo < hi) {
      di_topk_pair pivot = a[lo + (hi - lo) / 2];
      int i = lo, j = hi;
      while (i <= j) {
        while (di_topk_before(a[i], pivot)) i++;
        while (di_topk_before(pivot, a[j])) j--;
        if (i <= j) {
          di_topk_pair t = a[i];
          a[i++] = a[j];
          a[j--] = t;
        }
      }
      if (k <= j) hi = j;
      else if (k >= i) lo = i;
      else break;
    }
  }
  qsort(a, (size_t)m, sizeof *a, pair_cmp);
}

/* Each 512-logit chunk's maximum is taken in 8 independent lanes (a single
 * running best is one long load-compare-cmov chain, ~7 cycles per logit; the
 * lanes' `x > m ? x : m` is maxps); only the first chunk holding the overall
 * maximum is scanned again for its index. A 49,152-logit row: 18.6 -> 6.7 us,
 * 16 of them on the main thread in every step of 16 streams. */
#define ARGMAX_CHUNK 512
int32_t di_argmax(const float *l, int n) {
  if (l[0] != l[0]) return 0;
  float best = -INFINITY;
  int bc = -1;
  for (int c0 = 0; c0 < n; c0 += ARGMAX_CHUNK) {
    const int c1 = n - c0 < ARGMAX_CHUNK ? n : c0 + ARGMAX_CHUNK;
    float m[8];
    for (int k = 0; k < 8; k++) m[k] = -INFINITY;
    int i = c0;
    for (; i + 8 <= c1; i += 8)
      for (int k = 0; k < 8; k++) m[k] = l[i + k] > m[k] ? l[i + k] : m[k];
    for (; i < c1; i++) m[0] = l[i] > m[0] ? l[i] : m[0];
    for (int k = 0; k < 8; k++)
      if (m[k] > best) best = m[k], bc = c0;
  }
  if (bc < 0) return 0; /* nothing above -inf: the scan keeps index 0 */
  for (int i = bc;; i++)
    if (l[i] == best) return i;
}


int di_topk_slice(const float *l, int w, int32_t id0, int k, float temperature, di_topk_pair *scratch, di_topk_pair *out) {
  if (k == 1) {
    di_topk_pair best = {-INFINITY, -1};
    for (int j = 0; j < w; j++)
      if (l[j] > best.v) best = (di_topk_pair){l[j], id0 + j};
    out[0] = best;
    return 1;
  }
  const float inv_t = 1.0f / temperature; /* as the sampler computes it, so the same bits */
  for (int j = 0; j < w; j++) scratch[j] = (di_topk_pair){l[j] * inv_t, id0 + j};
  const int c = k < w ? k : w;
  di_topk_select(scratch, w, c);
  memcpy(out, scratch, (size_t)c * sizeof *out);
  return c;
}

void di_topk_merge(di_topk_pair *parts, int n, int k, float l0, di_topk_pair *out) {
  if (k > 1) {
    di_topk_select(parts, n, k);
    memcpy(out, parts, (size_t)k * sizeof *out);
    return;
  }
  if (l0 != l0) { /* di_argmax: a NaN at 0 stays best */
    out[0] = (di_topk_pair){l0, 0};
    return;
  }
  di_topk_pair best = {-INFINITY, -1};
  for (int i = 0; i < n; i++) /* slices in order: the first of equal maxima wins */
    if (parts[i].id >= 0 && (best.id < 0 || parts[i].v > best.v)) best = parts[i];
  out[0] = best.id < 0 ? (di_topk_pair){-INFINITY, 0} : best;
}
