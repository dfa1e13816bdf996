/* What DeepSeek-V4's three graph files share: scratch, the per-position pool
 * row layout, and the stage functions each file provides. */
#ifndef DI_GRAPH_DSV4_H
#define DI_GRAPH_DSV4_H

#include "graph/forward_internal.h"

/* One pool row per position holding every layer's values side by side (f32,
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

typedef struct di_v4_scratch {
  float *X;     /* [T][N*D] the hyper-connection streams (the residual) */
  float *hcn;   /* [T][N*D] streams, normalized, flattened */
  float *mix;   /* [T][(2+N)*N] */
  float *post;  /* [T][N] */
  float *comb;  /* [T][N*N] */
  float *qa, *kvp, *ckv, *cg, *ikv, *ig, *iw, *iq, *og, *oa, *ot;
  float *rope_m, *rope_c; /* [T][rd] main and compress (cos, sin) */
  int row_off;            /* the current layer's offset in a position's pool row */
} di_v4_scratch;

/* attn_dsv4.c: the attention block of layer sc->L on f->xn: f->tmp ([T][D]). */
di_code di_fwd_v4_attn(stage_ctx *sc, int il, di_status *st);
/* ffn_dsv4.c: the MoE block of layer sc->L on f->xn: f->tmp ([T][D]). */
void di_fwd_v4_ffn(stage_ctx *sc);

#endif
