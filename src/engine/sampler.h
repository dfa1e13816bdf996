/* Per-request sampling: logits processors (logit_bias, repetition /
 * frequency / presence penalties, temperature, top-k, min-p, top-p) and a
 * seeded RNG owned by each completion, so a seeded request samples the same
 * tokens whatever else shares its batch (the logits are row invariant).
 * All scratch is allocated once per engine: sampling never mallocs. */
#ifndef DI_ENGINE_SAMPLER_H
#define DI_ENGINE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "deepinfer.h"
#include "util/status.h"
#include "util/topk.h"

#define DI_MAX_TOP_LOGPROBS 20

typedef di_topk_pair di_sampler_pair;

typedef struct di_sampler {
  int n_vocab;
  float *logits;          /* [n_vocab] working copy */
  di_sampler_pair *pairs; /* [n_vocab] candidates */
  int32_t *count;         /* [n_vocab] zero between calls */
} di_sampler;

di_code di_sampler_init(di_sampler *s, int n_vocab, di_status *st);
void di_sampler_free(di_sampler *s);

/* Checks a request's sampling parameters against the vocabulary. */
di_code di_sampling_validate(const di_sampling *p, int n_vocab, di_status *st);

/* Seeds the RNG of completion `index` of a request. */
uint64_t di_sampler_seed(uint64_t seed, int index);

typedef struct di_sample_in {
  const di_sampling *p;
  const int32_t *history; /* prompt followed by generated tokens */
  int n_history, n_prompt;
  uint64_t *rng;
  int top_logprobs;       /* 0..DI_MAX_TOP_LOGPROBS */
  bool logprob;           /* compute the sampled token's logprob */
  const uint32_t *mask;   /* allowed tokens (bit i of word i/32), applied first; NULL = all */
  /* Sampling on split logits (tensor parallel): instead of the logits row,
   * its di_sampler_split_k(...) best pairs as sampling's top-k selects them
   * ({logit / temperature, id}; greedy: {logit, id} of the argmax), best first. */
  const di_sampler_pair *cand;
} di_sample_in;

typedef struct di_sample_out {
  int32_t token;
  float logprob;          /* of the model's distribution (raw logits) */
  int n_top;
  int32_t top_ids[DI_MAX_TOP_LOGPROBS];
  float top_logprobs[DI_MAX_TOP_LOGPROBS];
} di_sample_out;

/* The one token a mask over n tokens allows, or -1 when it allows none or several. */
int32_t di_sampler_forced(const uint32_t *mask, int n);

/* What sampling with p needs of a logits row when a tensor parallel job
 * keeps the row split by vocabulary (each rank reduces its slice, rank 0
 * merges): 1: its argmax (greedy); k in [2, max_k]: its k best by (logit /
 * temperature, id), top-k's selection, after which the rest of sampling
 * reads only those; 0: the whole row (a grammar mask, logit_bias, penalties
 * and logprobs read every logit; so does sampling without a top-k or with
 * one above max_k). The sampled token is the same either way. */
int di_sampler_split_k(const di_sampling *p, bool masked, bool logprobs, int n_vocab, int max_k);

/* Samples one token from a logits row (not modified), or from in->cand. */
void di_sampler_sample(di_sampler *s, const float *logits, const di_sample_in *in, di_sample_out *out);

#endif
