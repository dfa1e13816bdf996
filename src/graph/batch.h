/* One forward step's input: tokens of several sequences, each with its
 * absolute position and the block table through which its KV is addressed.
 * The engine builds it; graph/ runs it. A token attends to positions
 * [0, pos] of its own sequence (or the sliding window of them); its own K/V is
 * written to block table[pos / block_size], slot pos % block_size, before
 * attention, so tokens of one sequence in one batch see each other causally. */
#ifndef DI_GRAPH_BATCH_H
#define DI_GRAPH_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "util/topk.h"

/* Most sliding-window tables one sequence may have (see kv/table.h;
 * DeepSeek-V4's window rows are wide, split over up to this many). */
#define DI_KV_MAX_SWA_TABLES 32

typedef struct di_batch_seq {
  const int32_t *blocks; /* block table: blocks[i] holds positions [i*bs, (i+1)*bs) */
  int n_blocks;
  /* Per-layer-group KV (di_batch.n_swa_tables > 0): `blocks` holds only the
   * full-attention layers, and the sliding-window layers live in swa[k]: the
   * i-th sliding-window layer in table i / L, layer i % L of each block
   * (L = the pool's layers per block). Entries before the window are -1. */
  const int32_t *swa[DI_KV_MAX_SWA_TABLES];
  int n_swa_blocks;
  /* Bounded replay (engine/replay.c): `blocks` already holds positions
   * [0, full_cached) (shared prefix-cache blocks); tokens there write only the
   * sliding-window layers' K/V and read the rest. */
  int full_cached;
} di_batch_seq;

/* Block table `table` of s: -1 for blocks, else swa[table]. */
static inline const int32_t *di_batch_seq_table(const di_batch_seq *s, int table) {
  return table < 0 ? s->blocks : s->swa[table];
}

/* Sampling on split logits (tensor parallel; graph/forward_tp.c): the
 * classifier's columns (the vocabulary) stay split across the ranks, each
 * reduces its slice of every logits row and rank 0 merges, instead of
 * gathering whole rows on rank 0. The logits rows are then not written. */
#define DI_SPLIT_TOPK_MAX 256
typedef struct di_logits_split {
  const int32_t *k;          /* [rows] 1: the argmax; 2..DI_SPLIT_TOPK_MAX: the k best pairs by ... */
  const float *temperature;  /* [rows] ... {logit * (1 / temperature), id} (di_topk_before) */
  di_topk_pair *out;         /* [rows][DI_SPLIT_TOPK_MAX] rank 0: the row's pairs, best first (k = 1: {logit, id}) */
} di_logits_split;

typedef struct di_batch {
  int n_tokens;
  const int32_t *tokens;      /* [n_tokens] token ids */
  const int32_t *pos;         /* [n_tokens] absolute positions */
  const int32_t *seq;         /* [n_tokens] index into seqs */
  const bool *want_logits;    /* [n_tokens]; NULL = only the last token */
  int n_seqs;
  const di_batch_seq *seqs;   /* [n_seqs] */
  int n_swa_tables;           /* 0: every layer's K/V through seqs[].blocks */
  const di_logits_split *split; /* NULL: whole logits rows */
  /* di_forward_mtp only: the rows need only their K/V written (no logits, no
   * output states); a module that cannot cut there runs whole */
  bool kv_only;
} di_batch;

#endif
