/* Prefix-cache hits across layer groups, and bounded replay of the
 * sliding-window state that a hit does not find.
 *
 * A hit at P (the main table's cached run of full-attention blocks) needs,
 * in every sliding-window table, the window of position P: the blocks
 * holding positions [P - W + 1, P). Window blocks that left their
 * sequence's window stay cached until evicted, and the prefix cache evicts
 * those between checkpoints first (kv/prefix.h), keeping the window ending
 * at every multiple of C (kv/table.h). When the window at P is gone, the
 * sequence maps the full-attention blocks of [0, P) and the windows of the
 * last checkpoint S <= P that survives (an earlier one, or position 0 with
 * empty windows, when a later one was evicted: a longer replay, never an
 * approximation), and computes [S, P) again as ordinary prefill work: the
 * forward writes only the sliding-window layers for those positions
 * (di_batch_seq.full_cached) and reads the full-attention KV from the cache.
 * Row invariance makes every recomputed window row bit-identical to the
 * cold run's, so what follows P is too.
 *
 * Models whose every layer slides (or --swa-window) have no full-attention
 * group: their hit is the latest window that survives, at the end of the
 * known prefix or at a checkpoint, and the positions between it and the end
 * of the known prefix count as replayed. */
#include "engine/engine_internal.h"

#include <stdlib.h>

#include "kv/prefix.h"

/* The window tables of a sequence: its sliding-window tables, and its main
 * table when every layer slides. */
static int window_tables(di_engine *e, di_seq *s, di_kv_table **out) {
  int n = 0;
  if (e->be.policy == DI_KV_POLICY_WINDOW) out[n++] = &s->table;
  for (int k = 0; k < e->be.n_swa_tables; k++) out[n++] = &s->swa[k];
  return n;
}

/* Maps every window table's window of position nb * bs from the cache; all
 * or nothing (nb = 0: empty windows, always there). */
static bool windows_at(di_engine *e, di_seq *s, di_kv_table **wt, int n_wt, int nb) {
  const int bs = e->pool->block_size;
  for (int k = 0; k < n_wt; k++)
    if (!di_kv_table_match_window(e->pool, wt[k], s->tokens, nb, di_kv_window_first(wt[k]->window, bs, nb * bs))) {
      while (k > 0) di_kv_table_release(e->pool, wt[--k]);
      return false;
    }
  return true;
}

/* Leading blocks of s's tokens up to the last block the cache knows (in any
 * table of the main chain), leaving one token to compute. */
static int known_blocks(di_engine *e, di_seq *s) {
  const int bs = e->pool->block_size, max_blocks = (s->len - 1) / bs;
  uint64_t parent = s->table.root;
  int known = 0;
  for (int i = 0; i < max_blocks; i++) {
    const int32_t *tok = s->tokens + (size_t)i * bs;
    uint64_t h = di_kv_prefix_hash(parent, tok, bs);
    if (di_kv_prefix_contains(e->pool, h, parent, tok)) known = i + 1;
    parent = h;
  }
  return known;
}

int di_replay_match(di_engine *e, di_seq *s, int *replayed) {
  const int bs = e->pool->block_size, cb = e->swa_ckpt / bs;
  di_kv_table *wt[DI_KV_MAX_SWA_TABLES + 1];
  const int n_wt = window_tables(e, s, wt);
  const bool full = e->be.policy != DI_KV_POLICY_WINDOW;
  *replayed = 0;
  s->replay_end = 0;
  int n = full ? di_kv_table_match_prefix(e->pool, &s->table, s->tokens, s->len) / bs : known_blocks(e, s);
  if (n == 0 || n_wt == 0 || windows_at(e, s, wt, n_wt, n)) {
    s->replay_end = n * bs;
    return n * bs;
  }
  if (cb <= 0) { /* no checkpoints: the longest hit whose windows all survive */
    while (--n > 0) {
      if (full) di_kv_table_truncate(e->pool, &s->table, n);
      if (windows_at(e, s, wt, n_wt, n)) break;
    }
    if (full && n == 0) di_kv_table_release(e->pool, &s->table);
    s->replay_end = n * bs;
    return n * bs;
  }
  int sb = n / cb * cb;
  if (sb == n) sb -= cb;
  while (sb > 0 && !windows_at(e, s, wt, n_wt, sb)) sb -= cb;
  *replayed = (n - sb) * bs;
  /* Without a full-attention group nothing of [S, P) is kept: the tables
   * simply start at S. */
  s->replay_end = full ? n * bs : sb * bs;
  return sb * bs;
}

void di_replay_hold(di_engine *e, di_seq *s) {
  di_kv_table *wt[DI_KV_MAX_SWA_TABLES + 1];
  const int n_wt = window_tables(e, s, wt), per = e->be.window / e->pool->block_size + 2;
  di_replay_drop(e, s);
  if (n_wt == 0 || e->swa_ckpt <= 0) return;
  if (!s->pins && !(s->pins = malloc((size_t)n_wt * per * sizeof *s->pins)))
    return; /* without the hold the resume replays from an earlier checkpoint: longer, still exact */
  for (int k = 0; k < n_wt; k++) {
    int n = di_kv_table_hold_ckpt(e->pool, wt[k], s->n_computed, s->pins + s->n_pins);
    s->n_pins += n;
    if (n == 0) { /* a window table without that checkpoint: nothing to replay from */
      di_replay_drop(e, s);
      return;
    }
  }
}

int di_replay_drop(di_engine *e, di_seq *s) {
  int n = s->n_pins;
  while (s->n_pins > 0) di_kv_unref(e->pool, s->pins[--s->n_pins]);
  return n;
}
