/* The KV block pool: one allocation made at start-up from --kv-mem, cut into
 * fixed-size blocks of `block_size` token positions. A block holds K and V of
 * every layer for those positions:
 *
 *   block b, layer l:  K at  base + b*block_bytes + l*layer_bytes         [n_kv_heads][block_size][head_dim]
 *                      V at  base + b*block_bytes + l*layer_bytes + half  [n_kv_heads][block_size][head_dim]
 *
 * (kv_dim = n_kv_heads * head_dim; element type = kv_type). Head-major inside
 * a block keeps one head's positions contiguous, so attention streams them
 * instead of striding across every head's slice of each row. Blocks are
 * reference-counted so prefix-cache hits and n>1 completions share them.
 * Allocation bookkeeping (free list, refcounts, prefix hashes) is owned by the
 * engine layer (the kv/ sources); the forward pass only uses the address helpers. */
#ifndef DI_KV_POOL_H
#define DI_KV_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "deepinfer.h"
#include "util/status.h"


/* What a pool block holds per layer for each position: K of kv_dim values
 * and V of as many, or (v_in_k) only the K row, from which attention also
 * reads V: MLA's latent row (kv_lora_rank normalized latent + qk_rope_head_dim
 * rope key) is both its key and, in its first kv_lora_rank values, its value. */
typedef struct di_kv_spec {
  int n_layers;
  int kv_dim;         /* K row: n_kv_heads * head_dim, or MLA's latent + rope key */
  bool v_in_k;        /* no V rows: V is read from the K row */
  di_kv_dtype type;
} di_kv_spec;

/* Layer groups a block can belong to (for accounting): the full-attention
 * layers (or every layer of a one-kind model) and the sliding-window ones. */
enum { DI_KV_GROUP_FULL = 0, DI_KV_GROUP_WINDOW = 1, DI_KV_N_GROUPS = 2 };

typedef struct di_kv_pool {
  int block_size;     /* token positions per block */
  int n_blocks;
  int n_layers;
  int kv_dim;         /* n_kv_heads * head_dim */
  bool v_in_k;        /* see di_kv_spec */
  di_kv_dtype type;
  size_t elt_bytes;   /* 2 or 4 */
  size_t layer_bytes; /* K + V of one layer in one block */
  size_t v_off;       /* V's offset inside a layer's bytes (0 when v_in_k) */
  size_t block_bytes;
  uint8_t *base;
  /* bookkeeping */
  int32_t *refcount;  /* [n_blocks] */
  int32_t *free_list; /* stack of free block ids */
  int n_free;
  int high_water;     /* most blocks ever in use */
  /* Per layer group (DI_KV_GROUP_*): which group allocated each block, and
   * the blocks each group holds referenced now and at most. */
  uint8_t *group;     /* [n_blocks] */
  int used_by_group[DI_KV_N_GROUPS], high_by_group[DI_KV_N_GROUPS];
  void *prefix;       /* prefix-cache index, owned by kv/prefix.c (NULL = disabled) */
  /* With log_copies (tensor parallel, graph/forward_tp.c), di_kv_copy_block
   * also appends (dst, src) to copy_log: the other ranks' pools repeat the
   * copies before the next step, which takes and clears the log. */
  bool log_copies, copy_log_lost; /* lost: out of memory appending */
  int32_t *copy_log;
  int n_copy_log, cap_copy_log;
} di_kv_pool;

/* Creates a pool of as many blocks as fit in mem_bytes. */
di_code di_kv_pool_create(di_kv_pool **out, size_t mem_bytes, int block_size, int n_layers, int kv_dim,
                          di_kv_dtype type, di_status *st);
void di_kv_pool_destroy(di_kv_pool *p);
size_t di_kv_block_bytes(int block_size, int n_layers, int kv_dim, di_kv_dtype type);
/* The same from a spec (di_kv_pool_create is this with v_in_k false). */
di_code di_kv_pool_create_spec(di_kv_pool **out, size_t mem_bytes, int block_size, const di_kv_spec *s,
                               di_status *st);
size_t di_kv_spec_block_bytes(const di_kv_spec *s, int block_size);

/* Takes a free block (refcount 1); returns -1 when none is free. */
int32_t di_kv_alloc(di_kv_pool *p);
/* The same for a block of layer group `group` (DI_KV_GROUP_*). */
int32_t di_kv_alloc_group(di_kv_pool *p, int group);
void di_kv_ref(di_kv_pool *p, int32_t block);
/* Drops one reference; the block returns to the free list at zero. */
void di_kv_unref(di_kv_pool *p, int32_t block);
int di_kv_n_free(const di_kv_pool *p);
/* Blocks an allocation can still obtain: free ones plus unreferenced blocks
 * kept by the prefix cache (evicted LRU-first on demand). */
int di_kv_n_available(const di_kv_pool *p);
/* Blocks referenced by at least one sequence. */
int di_kv_n_used(const di_kv_pool *p);
/* Copies the whole K/V content (every layer) of block src into dst; used for
 * copy-on-write of a shared partial block. */
void di_kv_copy_block(di_kv_pool *p, int32_t dst, int32_t src);

static inline void *di_kv_k(const di_kv_pool *p, int32_t block, int layer) {
  return p->base + (size_t)block * p->block_bytes + (size_t)layer * p->layer_bytes;
}
static inline void *di_kv_v(const di_kv_pool *p, int32_t block, int layer) {
  return p->base + (size_t)block * p->block_bytes + (size_t)layer * p->layer_bytes + p->v_off;
}

/* Byte offset of (kv head, slot) inside a block's K or V of one layer. */
static inline size_t di_kv_head_offset(const di_kv_pool *p, int kv_head, int slot, int head_dim) {
  return ((size_t)kv_head * (size_t)p->block_size + (size_t)slot) * (size_t)head_dim * p->elt_bytes;
}

#endif
