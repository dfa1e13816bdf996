/* Automatic prefix caching: every full block is named by a hash chain of the
 * token ids it holds (h_i = XXH64(tokens of block i, seed = h_{i-1})), so a
 * new sequence reuses the longest run of blocks whose whole history matches.
 * A cached block whose refcount drops to zero is "parked" on an LRU list
 * instead of the free list; it can be revived by a hit until an allocation
 * finds the free list empty and evicts the least recently used one.
 * Only full blocks are cached, so a shared block is never written again;
 * sequences that fork (n > 1) copy a shared partial block on first write
 * (see kv/table.h). The index lives in di_kv_pool.prefix.
 *
 * Eviction order, LRU within each tier: parked blocks of class WINDOW
 * (sliding-window blocks that no checkpoint needs) go first; then
 * CKPT_SHADOWED, the windows of checkpoints that a deeper checkpoint on the
 * same chain supersedes (a hit past the deeper one replays from it; only a
 * branch between the two needs the shallower); then TIP, the windows at a
 * prompt's end (kv/table.h: they spare a branch there up to C of replay);
 * then the rest: full-attention blocks and each chain's deepest checkpoint.
 * A window missing at a hit is rebuilt by bounded replay from a checkpoint,
 * the full-attention prefix cannot be, so under pressure the windows between
 * checkpoints go, then the superseded checkpoints, then the prompt-end
 * windows, and a cached document keeps its full-attention KV with the
 * checkpoint nearest its end (a hit replays at most C) as long as anything
 * else can go. */
#ifndef DI_KV_PREFIX_H
#define DI_KV_PREFIX_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/pool.h"

#define DI_KV_PREFIX_ROOT 0x9E3779B97F4A7C15ull /* parent hash of a sequence's first block */

typedef enum di_kv_cache_class {
  DI_KV_CACHE_KEEP = 0,   /* full-attention (and, without checkpoints, every) block */
  DI_KV_CACHE_WINDOW = 1, /* a sliding-window block between checkpoints: evicted first */
  DI_KV_CACHE_CKPT = 2,   /* a sliding-window block of a checkpoint's window */
  DI_KV_CACHE_CKPT_SHADOWED = 3, /* of a checkpoint a deeper one on its chain supersedes */
  DI_KV_CACHE_TIP = 4     /* of the windows at a prompt's end (kv/table.h), no checkpoint's */
} di_kv_cache_class;

di_code di_kv_prefix_enable(di_kv_pool *p, di_status *st);
/* Drops the index (parked blocks return to the free list). */
void di_kv_prefix_disable(di_kv_pool *p);
static inline bool di_kv_prefix_enabled(const di_kv_pool *p) { return p->prefix != 0; }

/* Chain hash of one full block given the hash of the block before it. */
uint64_t di_kv_prefix_hash(uint64_t parent, const int32_t *tokens, int block_size);

/* On a hit (hash, parent hash and tokens all equal) takes a reference and
 * returns the block; otherwise -1. */
int32_t di_kv_prefix_lookup(di_kv_pool *p, uint64_t hash, uint64_t parent, const int32_t *tokens);
/* Indexes a block whose block_size positions have just been computed. If an
 * equal block is already cached this one stays anonymous. */
void di_kv_prefix_insert(di_kv_pool *p, int32_t block, uint64_t hash, uint64_t parent, const int32_t *tokens,
                         di_kv_cache_class cls);
/* Makes a parked block with this name the most recently used of its class. */
void di_kv_prefix_touch(di_kv_pool *p, uint64_t hash, uint64_t parent, const int32_t *tokens);
/* A cached CKPT block with this name becomes CKPT_SHADOWED (evicted before
 * full-attention blocks and deepest checkpoints); other classes stay. */
void di_kv_prefix_demote(di_kv_pool *p, uint64_t hash, uint64_t parent, const int32_t *tokens);
/* The class of a cached block with this name; -1 if not cached. */
int di_kv_prefix_class(const di_kv_pool *p, uint64_t hash, uint64_t parent, const int32_t *tokens);
/* Whether a block with this name is cached (no reference taken). */
bool di_kv_prefix_contains(const di_kv_pool *p, uint64_t hash, uint64_t parent, const int32_t *tokens);

/* Pool hooks: park a block whose refcount reached zero (true if cached, so it
 * must not go to the free list); evict the LRU parked block (-1 if none). */
bool di_kv_prefix_park(di_kv_pool *p, int32_t block);
int32_t di_kv_prefix_evict(di_kv_pool *p);
int di_kv_prefix_n_parked(const di_kv_pool *p);
int di_kv_prefix_n_cached(const di_kv_pool *p);
/* Parked blocks of the first two tiers (windows between checkpoints,
 * superseded checkpoints): what an allocation takes before anything a hit
 * at the end of a cached prompt needs. */
int di_kv_prefix_n_expendable(const di_kv_pool *p);
/* Cached blocks of class CKPT, CKPT_SHADOWED or TIP (in use or parked). */
int di_kv_prefix_n_ckpt(const di_kv_pool *p);

#endif
