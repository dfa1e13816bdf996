/* What DeepSeek-V4's three graph files share: scratch, the per-position pool
 * row layout, and the stage functions each file provides. */
#ifndef DI_GRAPH_DSV4_H
#define DI_GRAPH_DSV4_H

#include "graph/forward.h"
#include "graph/forward_internal.h"

/* One pool row per position holding every layer's values side by side (in the pool's element type,
 * no V: K = V); a layer's part is laid out per its kind. Every value in it is a function of that position's own inputs
 * (and, for the compressed rows, of the positions of its window), so rows are
 * the same whatever the chunking or batch, and prefix-cache hits reuse them:
 *   kv        [hd]    the latent KV row (kv_norm, roped), the window's keys and values
 *   ckv, cg   [c*hd]  the compressor's projections of this position (c = 2 CSA, 1 HCA),
 *                     the gate with the position bias of its slot already added
 *   cmp       [hd]    at the last position of a window: the window's compressed row
 *   ikv, ig   [2*id]  CSA: the indexer compressor's projections (gate + bias)
 *   icmp      [id]    CSA, at a window's last position: the indexer's compressed key */
typedef struct v4_layout {
  int kv, ckv, cg, cmp, ikv, ig, icmp, width, c;
} v4_layout;

v4_layout di_v4_layout(const di_hparams *hp, di_v4_attn kind);

/* The same values split by lifetime (the grouped cache, di_batch.n_swa_tables
 * > 0; forward.h di_v4_geometry). Window rows: what is read only within
 * `window` positions of where it was written (the latent row; the compressor's
 * and indexer's projections, one part per series, which a window's row reads
 * at most 2 * rate back), per position laid end to end and cut into n_tables
 * chunks of `unit` values (window table k holds chunk k; a part may span two);
 * the CSA series (read 2 * the CSA rate back) come last, from a table
 * boundary, in the n_short tables that keep only that many positions.
 * Compressed rows: in the main table's block holding the position that closes
 * the window, at slot (entry - first entry closing in that block), each the
 * row [hd] and for CSA the indexer key [id] after it: a block holds only the
 * rows of the windows that close in it, so the group grows by 1/rate. An HCA
 * rate a multiple of the block size (128 on 16) would leave most blocks' slot
 * empty: its row is cut into `slices` = rate / bs slices instead, slice j in
 * the window's block j, so such a block's values depend on positions after it
 * (prefix hits and commits stop at multiples of the rate: g.align). */
enum { V4P_KV = 0, V4P_CKV = 1, V4P_CG = 3, V4P_IKV = 5, V4P_IG = 7, V4P_N = 9 };

typedef struct v4_map {
  int part[V4P_N]; /* float offset of each part: in a window row (grouped), or in the pool row */
  int main_off;    /* grouped: offset of the layer's compressed rows in a main block */
  int entry;       /* grouped: floats per compressed row (hd, + id for CSA) */
  int icmp;        /* the indexer key's offset from its compressed row */
  int slices;      /* grouped HCA: its row cut over this many blocks (0: whole rows in slots) */
  int scr[V4P_N];  /* offset of each part in a token's slot of the window scratch (di_v4_scratch.win) */
} v4_map;

typedef struct v4_groups {
  int block_size;
  di_v4_geometry g;
  v4_map layer[DI_V4_MAX_LAYERS];
} v4_groups;

void di_v4_groups_plan(const di_hparams *hp, int block_size, v4_groups *out);

typedef struct di_v4_scratch {
  float *X;     /* [T][N*D] the hyper-connection streams (the residual) */
  float *hcn;   /* [T][N*D] streams, normalized, flattened */
  float *mix;   /* [T][(2+N)*N] */
  float *post;  /* [T][N] */
  float *comb;  /* [T][N*N] */
  float *qa, *kvp, *ckv, *cg, *ikv, *ig, *iw, *iq, *og, *oa, *ot;
  float *rope_m, *rope_c; /* [T][rd] main and compress (cos, sin) */
  v4_map cur;             /* the current layer's value locations (ungrouped: offsets in the pool row) */
  v4_groups *groups;      /* the grouped cache's plan for groups->block_size (NULL until needed) */
  int failed;             /* a per-token stage found no memory (attn_dsv4.c) */
  /* The batch's own positions' window parts of the current layer ([T][win_w]
   * in the pool's element type: the values a window row would hold, rounded
   * as stored). Readers take a position of the batch from here and any other
   * from the cache, so the grouped cache's window tables need not hold the
   * positions of a step that no later step reads (forward_dsv4.c, kv/table.h
   * di_kv_table.sparse): the same bits either way. */
  uint8_t *win;
  int win_w;
  /* which token of the batch is at (sequence, position): at[base[s] + pos -
   * lo[s]] for pos in [lo[s], lo[s] + n[s]), a sequence whose positions in the
   * batch are one run without repeats; n[s] = 0 otherwise (read from the cache) */
  int *seq_lo, *seq_n, *seq_base, *at;
  int idx_cap;
  int missing;            /* a position outside the batch whose window row the cache does not map */
} di_v4_scratch;

/* The batch's token at position pos of token t's sequence, or -1. */
static inline int di_v4_batch_token(const di_v4_scratch *v, const int32_t *seq, int t, int pos) {
  const int s = seq[t];
  return pos >= v->seq_lo[s] && pos < v->seq_lo[s] + v->seq_n[s] ? v->at[v->seq_base[s] + pos - v->seq_lo[s]] : -1;
}

/* attn_dsv4.c: the attention block of layer sc->L on f->xn: f->tmp ([T][D]). */
di_code di_fwd_v4_attn(stage_ctx *sc, int il, di_status *st);
/* attn_dsv4.c: only the K/V rows a sliding layer sc->L writes for f->xn
 * (the MTP module's catch-up, di_batch.kv_only). */
void di_fwd_v4_attn_kv(stage_ctx *sc);
/* ffn_dsv4.c: the MoE block of layer sc->L on f->xn: f->tmp ([T][D]). */
void di_fwd_v4_ffn(stage_ctx *sc);

#endif
