#include "kv/prefix.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Intrusive structures over block ids: a chained hash map (bucket heads +
 * next[]) and a doubly linked LRU of parked blocks. Everything is sized once
 * from the pool, so lookups and evictions never allocate. */
#define N_LRU 4 /* eviction tiers */

typedef struct di_kv_prefix {
  int n_blocks, block_size;
  uint32_t mask;         /* n_buckets - 1 */
  int32_t *bucket;       /* [n_buckets] first block of the chain, -1 = empty */
  int32_t *next;         /* [n_blocks] next block in the bucket chain */
  uint64_t *hash, *parent;
  int32_t *tokens;       /* [n_blocks][block_size] ids, to verify hits exactly */
  uint8_t *cached;       /* [n_blocks] in the map */
  uint8_t *cls;          /* [n_blocks] di_kv_cache_class of a cached block */
  int32_t *lru_prev, *lru_next;
  /* One LRU per eviction tier (lru_of): WINDOW blocks go first, superseded
   * checkpoints next, then prompt-end windows, so the full-attention prefix
   * and each chain's deepest checkpoint outlive the windows that only
   * shorten a replay. */
  int32_t lru_head[N_LRU], lru_tail[N_LRU]; /* head = least recently used */
  int n_parked, n_cached, n_ckpt;
  int n_parked_tier[N_LRU];
} di_kv_prefix;

static int lru_of(const di_kv_prefix *x, int32_t b) {
  switch (x->cls[b]) {
  case DI_KV_CACHE_WINDOW: return 0;
  case DI_KV_CACHE_CKPT_SHADOWED: return 1;
  case DI_KV_CACHE_TIP: return 2;
  default: return 3;
  }
}
static bool is_ckpt(int cls) { return cls != DI_KV_CACHE_KEEP && cls != DI_KV_CACHE_WINDOW; }

di_code di_kv_prefix_enable(di_kv_pool *p, di_status *st) {
  if (p->prefix) return DI_OK;
  di_kv_prefix *x = calloc(1, sizeof *x);
  if (!x) return di_errorf(st, DI_ERR_NOMEM, "prefix cache: out of memory");
  size_t nb = 16;
  while (nb < (size_t)p->n_blocks * 2) nb <<= 1;
  size_t n = (size_t)p->n_blocks;
  x->n_blocks = p->n_blocks;
  x->block_size = p->block_size;
  x->mask = (uint32_t)(nb - 1);
  x->bucket = malloc(nb * sizeof *x->bucket);
  x->next = malloc(n * sizeof *x->next);
  x->hash = malloc(n * sizeof *x->hash);
  x->parent = malloc(n * sizeof *x->parent);
  x->tokens = malloc(n * (size_t)p->block_size * sizeof *x->tokens);
  x->cached = calloc(n, 1);
  x->cls = calloc(n, 1);
  x->lru_prev = malloc(n * sizeof *x->lru_prev);
  x->lru_next = malloc(n * sizeof *x->lru_next);
  if (!x->bucket || !x->next || !x->hash || !x->parent || !x->tokens || !x->cached || !x->cls || !x->lru_prev ||
      !x->lru_next) {
    p->prefix = x;
    di_kv_prefix_disable(p);
    return di_errorf(st, DI_ERR_NOMEM, "prefix cache: cannot index %d blocks", p->n_blocks);
  }
  memset(x->bucket, 0xff, nb * sizeof *x->bucket);
  for (int l = 0; l < N_LRU; l++) x->lru_head[l] = x->lru_tail[l] = -1;
  p->prefix = x;
  return DI_OK;
}

void di_kv_prefix_disable(di_kv_pool *p) {
  di_kv_prefix *x = p->prefix;
  if (!x) return;
  /* Parked blocks hold no references: hand them back. */
  if (x->lru_prev)
    for (int l = 0; l < N_LRU; l++)
      for (int32_t b = x->lru_head[l]; b >= 0; b = x->lru_next[b]) p->free_list[p->n_free++] = b;
  free(x->bucket);
  free(x->next);
  free(x->hash);
  free(x->parent);
  free(x->tokens);
  free(x->cached);
  free(x->cls);
  free(x->lru_prev);
  free(x->lru_next);
  free(x);
  p->prefix = NULL;
}

uint64_t di_kv_prefix_hash(uint64_t parent, const int32_t *tokens, int block_size) {
  return XXH64(tokens, (size_t)block_size * sizeof *tokens, parent);
}

static void lru_remove(di_kv_prefix *x, int32_t b) {
  int l = lru_of(x, b);
  int32_t pv = x->lru_prev[b], nx = x->lru_next[b];
  if (pv >= 0) x->lru_next[pv] = nx; else x->lru_head[l] = nx;
  if (nx >= 0) x->lru_prev[nx] = pv; else x->lru_tail[l] = pv;
  x->n_parked--;
  x->n_parked_tier[l]--;
}

static void lru_push(di_kv_prefix *x, int32_t b) {
  int l = lru_of(x, b);
  x->lru_prev[b] = x->lru_tail[l];
  x->lru_next[b] = -1;
  if (x->lru_tail[l] >= 0) x->lru_next[x->lru_tail[l]] = b; else x->lru_head[l] = b;
  x->lru_tail[l] = b;
  x->n_parked++;
  x->n_parked_tier[l]++;
}

static int32_t map_find(const di_kv_prefix *x, uint64_t hash, uint64_t parent, const int32_t *tokens) {
  for (int32_t b = x->bucket[hash & x->mask]; b >= 0; b = x->next[b])
    if (x->hash[b] == hash && x->parent[b] == parent &&
        !memcmp(x->tokens + (size_t)b * x->block_size, tokens, (size_t)x->block_size * sizeof *tokens))
      return b;
  return -1;
}

static void map_remove(di_kv_prefix *x, int32_t b) {
  int32_t *link = &x->bucket[x->hash[b] & x->mask];
  while (*link != b) link = &x->next[*link];
  *link = x->next[b];
  x->cached[b] = 0;
  x->n_cached--;
  if (is_ckpt(x->cls[b])) x->n_ckpt--;
}

int32_t di_kv_prefix_lookup(di_kv_pool *p, uint64_t hash, uint64_t parent, const int32_t *tokens) {
  di_kv_prefix *x = p->prefix;
  if (!x) return -1;
  int32_t b = map_find(x, hash, parent, tokens);
  if (b < 0) return -1;
  if (p->refcount[b] == 0) { /* revive a parked block */
    lru_remove(x, b);
    p->refcount[b] = 1;
    if (++p->used_by_group[p->group[b]] > p->high_by_group[p->group[b]])
      p->high_by_group[p->group[b]] = p->used_by_group[p->group[b]];
    int used = di_kv_n_used(p);
    if (used > p->high_water) p->high_water = used;
  } else {
    p->refcount[b]++;
  }
  return b;
}

void di_kv_prefix_touch(di_kv_pool *p, uint64_t hash, uint64_t parent, const int32_t *tokens) {
  di_kv_prefix *x = p->prefix;
  int32_t b = x ? map_find(x, hash, parent, tokens) : -1;
  if (b < 0 || p->refcount[b] != 0) return;
  lru_remove(x, b);
  lru_push(x, b);
}

void di_kv_prefix_demote(di_kv_pool *p, uint64_t hash, uint64_t parent, const int32_t *tokens) {
  di_kv_prefix *x = p->prefix;
  int32_t b = x ? map_find(x, hash, parent, tokens) : -1;
  if (b < 0 || x->cls[b] != DI_KV_CACHE_CKPT) return;
  bool parked = p->refcount[b] == 0;
  if (parked) lru_remove(x, b);
  x->cls[b] = DI_KV_CACHE_CKPT_SHADOWED;
  if (parked) lru_push(x, b);
}

int di_kv_prefix_class(const di_kv_pool *p, uint64_t hash, uint64_t parent, const int32_t *tokens) {
  const di_kv_prefix *x = p->prefix;
  int32_t b = x ? map_find(x, hash, parent, tokens) : -1;
  return b < 0 ? -1 : x->cls[b];
}

bool di_kv_prefix_contains(const di_kv_pool *p, uint64_t hash, uint64_t parent, const int32_t *tokens) {
  return p->prefix && map_find(p->prefix, hash, parent, tokens) >= 0;
}

void di_kv_prefix_insert(di_kv_pool *p, int32_t block, uint64_t hash, uint64_t parent, const int32_t *tokens,
                         di_kv_cache_class cls) {
  di_kv_prefix *x = p->prefix;
  if (!x || x->cached[block] || map_find(x, hash, parent, tokens) >= 0) return;
  x->cls[block] = (uint8_t)cls;
  if (is_ckpt(cls)) x->n_ckpt++;
  x->hash[block] = hash;
  x->parent[block] = parent;
  memcpy(x->tokens + (size_t)block * x->block_size, tokens, (size_t)x->block_size * sizeof *tokens);
  uint32_t h = (uint32_t)(hash & x->mask);
  x->next[block] = x->bucket[h];
  x->bucket[h] = block;
  x->cached[block] = 1;
  x->n_cached++;
}

bool di_kv_prefix_park(di_kv_pool *p, int32_t block) {
  di_kv_prefix *x = p->prefix;
  if (!x || !x->cached[block]) return false;
  lru_push(x, block);
  return true;
}

int32_t di_kv_prefix_evict(di_kv_pool *p) {
  di_kv_prefix *x = p->prefix;
  if (!x) return -1;
  int32_t b = -1;
  for (int l = 0; l < N_LRU && b < 0; l++) b = x->lru_head[l];
  if (b < 0) return -1;
  lru_remove(x, b);
  map_remove(x, b);
  return b;
}

int di_kv_prefix_n_parked(const di_kv_pool *p) {
  const di_kv_prefix *x = p->prefix;
  return x ? x->n_parked : 0;
}

int di_kv_prefix_n_expendable(const di_kv_pool *p) {
  const di_kv_prefix *x = p->prefix;
  return x ? x->n_parked_tier[0] + x->n_parked_tier[1] : 0;
}

int di_kv_prefix_n_cached(const di_kv_pool *p) {
  const di_kv_prefix *x = p->prefix;
  return x ? x->n_cached : 0;
}

int di_kv_prefix_n_ckpt(const di_kv_pool *p) {
  const di_kv_prefix *x = p->prefix;
  return x ? x->n_ckpt : 0;
}
