#include "kv/table.h"

#include <stdlib.h>

#include "kv/prefix.h"

di_code di_kv_table_init(di_kv_table *t, int block_size, int max_positions, di_status *st) {
  t->cap = (max_positions + block_size - 1) / block_size + 1;
  t->n_blocks = t->n_hashed = t->n_released = 0;
  t->root = DI_KV_PREFIX_ROOT;
  t->group = DI_KV_GROUP_FULL;
  t->window = t->ckpt = t->align = t->tip = 0;
  t->sparse = false;
  t->tip_margin = 0;
  t->blocks = malloc((size_t)t->cap * sizeof *t->blocks);
  t->hashes = malloc((size_t)t->cap * sizeof *t->hashes);
  if (!t->blocks || !t->hashes) {
    di_kv_table_free(t);
    return di_errorf(st, DI_ERR_NOMEM, "kv: cannot allocate a block table of %d entries", t->cap);
  }
  return DI_OK;
}

void di_kv_table_free(di_kv_table *t) {
  free(t->blocks);
  free(t->hashes);
  t->blocks = NULL;
  t->hashes = NULL;
  t->cap = t->n_blocks = 0;
}

/* The first block a write of [start, end) may change besides the blocks of
 * the positions themselves (t->align: back to the previous multiple when the
 * write reaches the next). */
static int first_written(const di_kv_pool *p, const di_kv_table *t, int start, int end) {
  if (t->align > 0 && end / t->align > start / t->align) return start / t->align * t->align / p->block_size;
  return start / p->block_size;
}

static bool shared(const di_kv_pool *p, const di_kv_table *t, int bi) {
  return bi < t->n_blocks && t->blocks[bi] >= 0 && p->refcount[t->blocks[bi]] > 1;
}

/* The blocks [*first, *last] a write of [start, end) changes that already
 * hold data: start's own when start is inside it, and those back to
 * first_written. Shared ones need a copy first. */
static void written_before(const di_kv_pool *p, const di_kv_table *t, int start, int end, int *first, int *last) {
  const int own = start / p->block_size;
  *first = end > start ? first_written(p, t, start, end) : own;
  *last = end > start && start % p->block_size ? own : own - 1;
}

bool di_kv_table_keeps(const di_kv_table *t, int block_size, int i, int end) {
  return !t->sparse || i >= di_kv_window_first(t->window, block_size, end) || di_kv_table_ckpt_block(t, block_size, i) ||
         di_kv_table_tip_block(t, block_size, i);
}

int di_kv_window_span(int window, int chunk, bool sparse) {
  return window + (sparse && chunk > window ? window : chunk);
}

int di_kv_table_blocks_needed(const di_kv_pool *p, const di_kv_table *t, int start, int end) {
  int want = (end + p->block_size - 1) / p->block_size, first, last, n = 0;
  for (int bi = t->n_blocks; bi < want; bi++) n += di_kv_table_keeps(t, p->block_size, bi, end);
  written_before(p, t, start, end, &first, &last);
  for (int bi = first; bi <= last; bi++) n += shared(p, t, bi);
  return n;
}

void di_kv_table_prepare(di_kv_pool *p, di_kv_table *t, int start, int end) {
  int first, last;
  written_before(p, t, start, end, &first, &last);
  for (int bi = first; bi <= last; bi++) {
    if (!shared(p, t, bi)) continue;
    int32_t nb = di_kv_alloc_group(p, t->group);
    di_kv_copy_block(p, nb, t->blocks[bi]);
    di_kv_unref(p, t->blocks[bi]);
    t->blocks[bi] = nb;
  }
  int want = (end + p->block_size - 1) / p->block_size;
  for (; t->n_blocks < want && t->n_blocks < t->cap; t->n_blocks++)
    t->blocks[t->n_blocks] = di_kv_table_keeps(t, p->block_size, t->n_blocks, end) ? di_kv_alloc_group(p, t->group) : -1;
}

void di_kv_table_release(di_kv_pool *p, di_kv_table *t) {
  for (int i = t->n_blocks - 1; i >= 0; i--)
    if (t->blocks[i] >= 0) di_kv_unref(p, t->blocks[i]);
  t->n_blocks = t->n_hashed = t->n_released = 0;
}

void di_kv_tables_release(di_kv_pool *p, di_kv_table *const *t, int n, const int32_t *tokens) {
  int bs = p->block_size, top = 0;
  for (int k = 0; k < n; k++) top = t[k]->n_blocks > top ? t[k]->n_blocks : top;
  for (int i = top - 1; i >= 0; i--)
    for (int k = 0; k < n; k++) {
      const di_kv_table *u = t[k];
      if (i >= u->n_blocks) continue;
      if (u->blocks[i] >= 0) di_kv_unref(p, u->blocks[i]);
      else if (i < u->n_hashed && (di_kv_table_ckpt_block(u, bs, i) || di_kv_table_tip_block(u, bs, i)))
        di_kv_prefix_touch(p, u->hashes[i], i ? u->hashes[i - 1] : u->root, tokens + (size_t)i * bs);
    }
  for (int k = 0; k < n; k++) t[k]->n_blocks = t[k]->n_hashed = t[k]->n_released = 0;
}

void di_kv_table_fork(di_kv_pool *p, di_kv_table *dst, const di_kv_table *src) {
  for (int i = 0; i < src->n_blocks; i++) {
    dst->blocks[i] = src->blocks[i];
    if (src->blocks[i] >= 0) di_kv_ref(p, src->blocks[i]);
  }
  for (int i = 0; i < src->n_hashed; i++) dst->hashes[i] = src->hashes[i];
  dst->n_blocks = src->n_blocks;
  dst->n_hashed = src->n_hashed;
  dst->n_released = src->n_released;
}

int di_kv_table_match_prefix(di_kv_pool *p, di_kv_table *t, const int32_t *tokens, int n) {
  if (!di_kv_prefix_enabled(p) || t->n_blocks != 0) return 0;
  int bs = p->block_size;
  int max_blocks = (n - 1) / bs; /* the last token must be computed to get logits */
  if (t->align > bs) max_blocks = max_blocks * bs / t->align * t->align / bs;
  uint64_t parent = t->root;
  while (t->n_blocks < max_blocks && t->n_blocks < t->cap) {
    const int32_t *tok = tokens + (size_t)t->n_blocks * bs;
    uint64_t h = di_kv_prefix_hash(parent, tok, bs);
    int32_t b = di_kv_prefix_lookup(p, h, parent, tok);
    if (b < 0) break;
    t->hashes[t->n_blocks] = h;
    t->blocks[t->n_blocks++] = b;
    parent = h;
  }
  t->n_hashed = t->n_blocks;
  return t->n_blocks * bs;
}

/* The checkpoint at c is superseded by the one after it on the same chain. */
static void demote_ckpt(di_kv_pool *p, const di_kv_table *t, const int32_t *tokens, int c) {
  int bs = p->block_size;
  for (int j = di_kv_window_first(t->window, bs, c); j < c / bs; j++)
    if (!di_kv_table_tip_block(t, bs, j)) /* also a prompt's end: still worth a checkpoint's place */
      di_kv_prefix_demote(p, t->hashes[j], j ? t->hashes[j - 1] : t->root, tokens + (size_t)j * bs);
}

void di_kv_table_commit(di_kv_pool *p, di_kv_table *t, const int32_t *tokens, int n_computed) {
  int bs = p->block_size;
  int full = (t->align > bs ? n_computed / t->align * t->align : n_computed) / bs;
  if (full > t->n_blocks) full = t->n_blocks;
  while (t->n_hashed < full) {
    int i = t->n_hashed;
    uint64_t parent = i ? t->hashes[i - 1] : t->root;
    const int32_t *tok = tokens + (size_t)i * bs;
    uint64_t h = di_kv_prefix_hash(parent, tok, bs);
    t->hashes[i] = h;
    const bool ck = t->window > 0 && t->ckpt > 0;
    di_kv_cache_class cls = !ck                               ? DI_KV_CACHE_KEEP
                            : di_kv_table_ckpt_block(t, bs, i) ? DI_KV_CACHE_CKPT
                            : di_kv_table_tip_block(t, bs, i)  ? DI_KV_CACHE_TIP
                                                               : DI_KV_CACHE_WINDOW;
    if (t->blocks[i] >= 0) di_kv_prefix_insert(p, t->blocks[i], h, parent, tok, cls);
    t->n_hashed++;
    /* Checkpoint (i+1)*bs complete: it supersedes the one before, if it lies
     * in the prompt (hits land in shared prompts; past them only a
     * continuation of this very sequence would use it). */
    const int c = (i + 1) * bs;
    if (ck && c % t->ckpt == 0 && c > t->ckpt && (t->tip <= 0 || c <= t->tip)) demote_ckpt(p, t, tokens, c - t->ckpt);
  }
}

bool di_kv_table_match_window(di_kv_pool *p, di_kv_table *t, const int32_t *tokens, int n_blocks, int first) {
  if (!di_kv_prefix_enabled(p) || t->n_blocks != 0 || n_blocks > t->cap) return false;
  int bs = p->block_size;
  uint64_t parent = t->root;
  for (int i = 0; i < n_blocks; i++) {
    const int32_t *tok = tokens + (size_t)i * bs;
    uint64_t h = di_kv_prefix_hash(parent, tok, bs);
    /* before the window: only the earlier checkpoints, pinned again where they survive */
    int32_t b = i >= first || di_kv_table_ckpt_block(t, bs, i) ? di_kv_prefix_lookup(p, h, parent, tok) : -1;
    if (i >= first && b < 0) {
      di_kv_table_release(p, t);
      return false;
    }
    t->hashes[i] = h;
    t->blocks[i] = b;
    t->n_blocks = i + 1;
    parent = h;
  }
  t->n_hashed = n_blocks;
  t->n_released = first;
  return true;
}

void di_kv_table_truncate(di_kv_pool *p, di_kv_table *t, int n_blocks) {
  while (t->n_blocks > n_blocks) {
    int32_t b = t->blocks[--t->n_blocks];
    if (b >= 0) di_kv_unref(p, b);
  }
  if (t->n_hashed > n_blocks) t->n_hashed = n_blocks;
  if (t->n_released > n_blocks) t->n_released = n_blocks;
}

int di_kv_table_unpin_ckpts(di_kv_pool *p, di_kv_table *t, bool keep_last) {
  int n = 0, end = t->n_released;
  if (keep_last && t->ckpt > 0) {
    int last = end - 1;
    while (last >= 0 && t->blocks[last] < 0) last--;
    if (last >= 0) {
      long long c = ((long long)last * p->block_size / t->ckpt + 1) * t->ckpt;
      end = di_kv_window_first(t->window, p->block_size, (int)c);
    }
  }
  for (int i = 0; i < end; i++)
    if (t->blocks[i] >= 0) {
      di_kv_unref(p, t->blocks[i]);
      t->blocks[i] = -1;
      n++;
    }
  return n;
}

int di_kv_table_hold_ckpt(di_kv_pool *p, const di_kv_table *t, int n_computed, int32_t *out) {
  if (t->window <= 0 || t->ckpt <= 0) return 0;
  int c = n_computed / t->ckpt * t->ckpt, bs = p->block_size;
  int first = di_kv_window_first(t->window, bs, c), end = c / bs;
  if (c == 0 || end > t->n_hashed) return 0;
  for (int i = first; i < end; i++)
    if (t->blocks[i] < 0) return 0;
  for (int i = first; i < end; i++) {
    di_kv_ref(p, t->blocks[i]);
    out[i - first] = t->blocks[i];
  }
  return end - first;
}

bool di_kv_table_ckpt_block(const di_kv_table *t, int block_size, int i) {
  if (t->window <= 0 || t->ckpt <= 0) return false;
  /* The first checkpoint after the block's start; later ones see later blocks
   * only (ckpt >= window), earlier ones end before the block. */
  long long c = ((long long)i * block_size / t->ckpt + 1) * t->ckpt;
  return di_kv_window_first(t->window, block_size, (int)c) <= i;
}

bool di_kv_table_tip_block(const di_kv_table *t, int block_size, int i) {
  if (t->window <= 0 || t->ckpt <= 0 || t->tip <= 0) return false;
  int margin = t->tip_margin > 0 ? t->tip_margin : di_kv_tip_margin(t->window, block_size);
  return i >= di_kv_window_first(t->window, block_size, t->tip - margin) && i < t->tip / block_size;
}

void di_kv_table_release_before(di_kv_pool *p, di_kv_table *t, int lo) {
  int first_kept = lo / p->block_size; /* block holding position lo */
  if (first_kept > t->n_blocks) first_kept = t->n_blocks;
  for (; t->n_released < first_kept; t->n_released++) {
    int i = t->n_released;
    if (di_kv_table_ckpt_block(t, p->block_size, i)) continue; /* the sequence keeps its checkpoints */
    if (t->blocks[i] >= 0) di_kv_unref(p, t->blocks[i]);
    t->blocks[i] = -1;
  }
}
