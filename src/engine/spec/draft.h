/* The draft-model drafter (--spec draft --draft-model PATH): a second, smaller
 * (or lower-precision) model with the target's vocabulary proposes k tokens
 * greedily. Its KV lives in a second block pool cut from the same --kv-mem
 * budget (split by bytes per position, so both pools hold as many positions):
 * the pool's blocks have one geometry (layers x K/V width), and two models'
 * geometries in one pool would waste the difference in every block or need
 * per-block layouts. Draft KV is never prefix-cached (its bytes are the draft
 * model's, not the target's) and never causes a preemption: when its pool is
 * short a sequence simply gets no draft that step. */
#ifndef DI_ENGINE_SPEC_DRAFT_H
#define DI_ENGINE_SPEC_DRAFT_H

#include <stddef.h>

#include "deepinfer.h"
#include "util/status.h"

typedef struct di_engine di_engine;
typedef struct di_seq di_seq;
typedef struct di_engine_backend di_engine_backend;
typedef struct di_spec_model di_spec_model;
typedef struct di_draft_seq di_draft_seq;

/* Checks that the draft's token table equals the target's (ids -> bytes and
 * special flags, then the model's vocabulary width); the error names the
 * first differing token. */
di_code di_spec_vocab_check(const di_engine_backend *target, const di_engine_backend *draft, di_status *st);
/* Bytes one position of the draft takes in its pool (all its tables). */
size_t di_spec_model_pos_bytes(const di_engine_backend *draft, di_kv_dtype type);
/* Takes ownership of *draft (destroyed on failure too). kv_mem: the draft's
 * share of the budget; it must hold one full context (ctx positions). */
di_code di_spec_model_create(di_engine *e, const di_engine_backend *draft, size_t kv_mem, int block_size,
                             di_kv_dtype type, di_spec_model **out, di_status *st);
void di_spec_model_free(di_spec_model *d);
/* Before the step's batch is built: plans each decode-ready sequence's draft
 * length and runs the draft model over all of them at once (catching up on
 * tokens it has not seen, then k - 1 single-token rounds). */
void di_spec_model_step(di_engine *e);
/* After the step's batch is built, before its forward: the draft's forward
 * over the known tokens of each of seqs[0, n) whose prompt (or recompute after
 * a preemption) ends in this step and that will speculate, so a reply's
 * first drafting step catches up on two tokens, not the whole prompt (the
 * draft's prefill is part of the time to the first token, as the target's). */
void di_spec_model_prefill(di_engine *e, int n, di_seq *const *seqs);
/* This step's proposal for s (up to k tokens into out). */
int di_spec_model_take(di_engine *e, di_seq *s, int k, int32_t *out);
void di_spec_model_seq_free(di_engine *e, di_seq *s);
/* Blocks of the draft pool in use (tests: zero once every request finished). */
int di_spec_model_blocks_used(const di_engine *e);

#endif
