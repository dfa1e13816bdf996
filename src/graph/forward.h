/* The op program: one builder turns the model's descriptor and a batch into
 * ops (matmul, rms_norm, rope, attention, glu, ...) that the CPU backend runs.
 * No architecture has its own forward function. */
#ifndef DI_GRAPH_FORWARD_H
#define DI_GRAPH_FORWARD_H

#include "graph/batch.h"
#include "kv/pool.h"
#include "model/model.h"

typedef struct di_forward_ctx di_forward_ctx;

/* Scratch for batches of up to max_tokens tokens; threads = 0 means all cores. */
di_code di_forward_ctx_create(const di_model *m, int max_tokens, int threads, di_forward_ctx **out,
                              di_status *st);
void di_forward_ctx_free(di_forward_ctx *f);

/* The KV pool geometry the model's layers need (per-head K/V, or MLA's latent row). */
void di_forward_kv_spec(const di_model *m, di_kv_spec *s);

/* Runs one batch: writes K/V of every token into kv, and the logits of the
 * tokens with want_logits (in batch order) into logits[n_out][n_vocab].
 * Row invariant: a token's logits do not depend on the rest of the batch. */
di_code di_forward(di_forward_ctx *f, di_kv_pool *kv, const di_batch *b, float *logits, di_status *st);

#endif
