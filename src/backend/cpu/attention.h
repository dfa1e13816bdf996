/* The CPU backend's attention op (di_backend.attn): one layer over the paged
 * KV cache for a whole batch, the scheduling side of backend/cpu/attn.h. Each
 * (token, head, tile) yields a partial softmax state, merged per (token, head)
 * in tile order, so a token's result does not depend on the batch around it (row invariance). Work is
 * handed out in units of one tile and one KV head for a run of tokens of one
 * sequence that all see that whole tile: their query heads read its K/V once. */
#ifndef DI_BACKEND_CPU_ATTENTION_H
#define DI_BACKEND_CPU_ATTENTION_H

#include <stdbool.h>

#include "backend/backend.h"
#include "graph/batch.h"
#include "kv/pool.h"
#include "model/model.h"
#include "util/status.h"
#include "util/threadpool.h"

di_attn_sched *di_attn_sched_create(int max_tokens);
void di_attn_sched_free(di_attn_sched *s);

/* att[t][head][head_dim] for every token t of b, from q[t][head][head_dim] and
 * the K/V of pool layer slot kv_layer in table kv_table of each sequence (-1:
 * seqs[].blocks, else seqs[].swa[kv_table]); swa: the layer's sliding window. */
di_code di_attn_run(di_attn_sched *s, di_threadpool *tp, const di_hparams *hp, const di_kv_pool *kv,
                    const di_batch *b, int kv_table, int kv_layer, bool swa, const float *q, float *att,
                    di_status *st);

#endif
