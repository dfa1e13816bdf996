/* A sequence's block table and the cache policies that manage it.
 *
 * Policies:
 *  - FULL:   append-only; block i holds positions [i*bs, (i+1)*bs).
 *  - WINDOW: blocks that lie wholly before pos - W + 1 of the next token to
 *            compute are returned to the pool and their table entries become
 *            -1, so the table holds O(W) memory. The forward pass never reads them.
 *  - LATENT: reserved for MLA (one compressed vector + rope key per token):
 *            same table mechanics, a different per-token payload in the pool.
 * Layer groups: a pool block holds L layers for block_size positions. Models
 * with one kind of layer have L = all layers and one table per sequence (FULL,
 * or WINDOW when every layer slides). Mixed models (gemma3: 5 sliding-window
 * layers per full-attention one) have L = the full-attention layers, in the
 * sequence's main FULL table, and ceil(n_sliding / L) more tables under WINDOW
 * for the sliding-window layers (layer i of them in table i / L, slot i % L),
 * so those layers hold O(W) memory while the global ones grow; all tables take
 * blocks from the one pool, so --kv-mem is shared by need. Prefix caching
 * covers every table: a window table names its blocks with its own salted
 * hash chain (`root`), and a hit of n blocks needs the window tables' blocks
 * of the window before position n*bs too; blocks a sequence gave back stay
 * cached (parked) until evicted, so the hit is shortened only when they are
 * gone (rebuilding them instead is SWA bounded replay's job).
 *
 * Checkpoints (`ckpt` = C positions, a multiple of the block size, >= the
 * window): the blocks of a window table that hold the window ending at a
 * multiple of C are cached as DI_KV_CACHE_CKPT, the others as
 * DI_KV_CACHE_WINDOW, which the prefix cache evicts first (kv/prefix.h); the
 * window policy does not give back checkpoint blocks, so a running sequence
 * holds its window plus about W/C of its positions per window table (pool
 * accounting: group WINDOW), and these survive it in the cache like its
 * full-attention prefix. Under memory pressure the windows between go, and
 * a hit whose window is gone replays from the last checkpoint before it
 * (engine/replay.c): at most C positions of recomputation.
 * When a table completes the checkpoint at kC within its prompt, the one at
 * (k-1)C on its chain is demoted to DI_KV_CACHE_CKPT_SHADOWED (a hit at or
 * past kC replays from kC), which the cache evicts before full-attention
 * blocks and deepest checkpoints: a pool that holds a few documents'
 * full-attention KV keeps each one's deepest checkpoint rather than the LRU
 * document's tail. Checkpoints in the generated part demote none: other
 * requests branch inside or at the end of a shared prompt.
 *
 * The prompt's end (`tip`): requests that share a prefix branch at its end
 * (a document and its questions: the question is the prompt's last few
 * tokens), rarely at a multiple of C, so the window blocks of every position
 * in [tip - M, tip], M = max(W/4, a block), are cached as DI_KV_CACHE_TIP
 * (those no checkpoint needs: evicted after superseded checkpoints, before
 * full-attention blocks): a branch within M positions before the end of an
 * earlier prompt replays nothing. Memory stays bounded: the running sequence does not pin
 * them (they leave its window and park as usual), so they cost only cache,
 * at most W + M + a block of positions per cached prompt per window table
 * (5W/4: 9.4 MiB for Gemma 3 270M at f16, 2.6x the full-attention KV of
 * 1K positions, hence M is small), and the LRU takes them with their
 * prompt's full-attention blocks (di_kv_tables_release orders them so).
 *
 * Every table also keeps the chain hash of each full block it computed, so
 * prefix-cache registration does not depend on which block ended up cached. */
#ifndef DI_KV_TABLE_H
#define DI_KV_TABLE_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/pool.h"

typedef enum di_kv_policy { DI_KV_POLICY_FULL = 0, DI_KV_POLICY_WINDOW = 1, DI_KV_POLICY_LATENT = 2 } di_kv_policy;

typedef struct di_kv_table {
  int32_t *blocks;   /* [cap]; -1 = released (outside the window) */
  uint64_t *hashes;  /* [cap] chain hash of full block i (valid for i < n_hashed) */
  int n_blocks, cap;
  int n_hashed;      /* leading full blocks whose hash is known */
  int n_released;    /* leading blocks released by the window policy */
  uint64_t root;     /* parent hash of block 0: DI_KV_PREFIX_ROOT, salted per sliding-window table */
  int group;         /* DI_KV_GROUP_* of the blocks it allocates (pool accounting) */
  int window;        /* > 0: a window table (its cached blocks get a window class) */
  int ckpt;          /* checkpoint interval in positions; 0: every cached block KEEP */
  /* > 0: a block's values may depend on the positions up to the next
   * multiple of `align` (DeepSeek-V4's sliced HCA rows, graph/dsv4.h): prefix
   * hits and registrations stop at such multiples, and a write of positions
   * [start, end) that passes one may also write the blocks back to the
   * previous one (copied first where shared). A multiple of the block size. */
  int align;
  int tip;           /* the prompt's length (0: none); with ckpt, see above */
  /* A window table whose forward reads a step's own positions from its
   * scratch (DeepSeek-V4, graph/dsv4.h) and writes to the table only those it
   * maps: a step's prepare maps just the blocks a later step reads
   * (di_kv_table_keeps), so the table holds about two windows while a long
   * prefill chunk runs (the window it reads and the one it leaves), not the
   * window plus the chunk. */
  bool sparse;
  /* with tip: the windows of positions [tip - tip_margin, tip] are cached
   * (0: di_kv_tip_margin of this table's window; tables of one sequence
   * with different windows share their longest window's margin) */
  int tip_margin;
} di_kv_table;

/* max_positions: the most positions the sequence can ever hold. */
di_code di_kv_table_init(di_kv_table *t, int block_size, int max_positions, di_status *st);
void di_kv_table_free(di_kv_table *t);

/* M above: max(W / 4, a block). */
static inline int di_kv_tip_margin(int window, int block_size) {
  return window / 4 > block_size ? window / 4 : block_size;
}
/* Whether a sparse window table maps block i once positions [0, end) are
 * computed: the window of the next position, checkpoint windows and the
 * prompt's end (all cached for prefix hits and replay). */
bool di_kv_table_keeps(const di_kv_table *t, int block_size, int i, int end);
/* Positions a window table of window W holds at most while a step of up to
 * `chunk` positions runs: the window and the chunk, or (sparse) the window
 * the step reads and at most one more it leaves for the next (checkpoint and
 * prompt-end windows inside a chunk come on top: a step that cannot get them
 * is shortened). */
int di_kv_window_span(int window, int chunk, bool sparse);

/* Blocks needed (new blocks + a copy for a shared partial block) so that
 * positions [start, end) can be written. */
int di_kv_table_blocks_needed(const di_kv_pool *p, const di_kv_table *t, int start, int end);
/* Makes positions [start, end) writable: allocates missing blocks and copies a
 * shared block that will be written (copy-on-write). Call only after
 * di_kv_table_blocks_needed <= di_kv_n_available. */
void di_kv_table_prepare(di_kv_pool *p, di_kv_table *t, int start, int end);
/* Drops every reference (last block first, so the LRU evicts tails before the
 * prefixes other requests are likely to share) and empties the table. */
void di_kv_table_release(di_kv_pool *p, di_kv_table *t);
/* Releases a sequence's tables (tokens: its ids) position by position, last
 * block first across all of them, so the LRU evicts a prefix from its tail
 * whatever group a block belongs to; checkpoint blocks the window tables gave
 * back earlier (still parked) take their place in that order too, else they
 * would be older than the prefix they belong to and evicted before it. */
void di_kv_tables_release(di_kv_pool *p, di_kv_table *const *t, int n, const int32_t *tokens);
/* Shares all blocks of src (refcount +1 each); dst must be empty. */
void di_kv_table_fork(di_kv_pool *p, di_kv_table *dst, const di_kv_table *src);

/* Prefix cache: maps the longest cached run of full blocks of tokens[0..n)
 * (leaving at least one token to compute) into the empty table and returns
 * the number of positions it covers. */
int di_kv_table_match_prefix(di_kv_pool *p, di_kv_table *t, const int32_t *tokens, int n);
/* A WINDOW table's part of a prefix hit of n_blocks blocks: maps cached blocks
 * [first, n_blocks) into the empty table (entries before first: -1, released,
 * except checkpoint blocks still cached, which the sequence holds again).
 * All or nothing: false (table left empty) if one of [first, n_blocks) is not cached. */
bool di_kv_table_match_window(di_kv_pool *p, di_kv_table *t, const int32_t *tokens, int n_blocks, int first);
/* Drops the last blocks of a table so that it holds n_blocks. */
void di_kv_table_truncate(di_kv_pool *p, di_kv_table *t, int n_blocks);
/* Registers full blocks among positions [0, n_computed) not yet hashed. */
void di_kv_table_commit(di_kv_pool *p, di_kv_table *t, const int32_t *tokens, int n_computed);

/* First block of the window of the token at position pos (window W). */
static inline int di_kv_window_first(int window, int block_size, int pos) {
  int lo = pos - window + 1;
  return lo > 0 ? lo / block_size : 0;
}
/* Whether block i of a window table holds part of the window ending at a
 * checkpoint (the positions before k*ckpt that the token at k*ckpt sees). */
bool di_kv_table_ckpt_block(const di_kv_table *t, int block_size, int i);
/* Whether block i of a window table with checkpoints holds part of the window
 * of a position in [tip - M, tip] (cached as TIP unless a checkpoint's; the
 * table does not pin it). */
bool di_kv_table_tip_block(const di_kv_table *t, int block_size, int i);

/* Gives back the checkpoint blocks a window table still maps before its
 * window (they stay cached, evictable); returns how many. keep_last keeps the
 * latest checkpoint's blocks: the one a resume after preemption replays from
 * (the earlier ones only serve prefix hits of other requests). */
int di_kv_table_unpin_ckpts(di_kv_pool *p, di_kv_table *t, bool keep_last);
/* Takes a reference on every block of the window that ends at the latest
 * checkpoint <= n_computed (positions [S - W + 1, S), S a multiple of
 * t->ckpt) and writes the blocks to out (room for window / block size + 2);
 * returns how many. 0, holding nothing, when there is no such checkpoint or
 * the table no longer maps all of its blocks (a partial window is useless to
 * replay from). A preempted sequence holds them while it waits (engine/replay.c). */
int di_kv_table_hold_ckpt(di_kv_pool *p, const di_kv_table *t, int n_computed, int32_t *out);
/* WINDOW policy: releases blocks wholly before position lo, except those of
 * checkpoints (t->ckpt > 0), which stay mapped. */
void di_kv_table_release_before(di_kv_pool *p, di_kv_table *t, int lo);

#endif
