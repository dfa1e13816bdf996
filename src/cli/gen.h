/* Single-sequence generation for `run` and `bench`: one model, one KV pool
 * sized for the context, chunked prefill, then token-by-token decode. */
#ifndef DI_CLI_GEN_H
#define DI_CLI_GEN_H

#include "graph/forward.h"

typedef struct di_gen {
  di_model *model;
  di_forward_ctx *fwd;
  di_kv_pool *kv;
  int32_t *blocks;
  int n_blocks;
  int ctx;
  int chunk;      /* prefill tokens per forward */
  int n_past;     /* positions already in the KV */
  float *logits;  /* [chunk][n_vocab] */
} di_gen;

typedef struct di_gen_opts {
  const char *model_path;
  int threads;
  int ctx;        /* 0 = min(model's, 4096) */
  int chunk;      /* 0 = 512 */
  di_kv_type kv_type;
  bool use_mmap;
} di_gen_opts;

di_code di_gen_open(di_gen *g, const di_gen_opts *o, di_status *st);
void di_gen_close(di_gen *g);
/* Feeds n tokens; if all_logits, out receives [n][n_vocab] rows, else only the
 * last row [n_vocab]. */
di_code di_gen_feed(di_gen *g, const int32_t *ids, int n, bool all_logits, float *out, di_status *st);
void di_gen_reset(di_gen *g);

#endif
