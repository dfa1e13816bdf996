/* Drafters for speculative decoding: cheap, deterministic proposals of a
 * sequence's next tokens. The engine verifies every proposal against the
 * target model's own choice at each position (spec.c), so a drafter can only
 * change speed, never the output; proposals must still be deterministic (the
 * same history gives the same draft) so that runs are reproducible. */
#ifndef DI_ENGINE_SPEC_DRAFTER_H
#define DI_ENGINE_SPEC_DRAFTER_H

#include <stdint.h>

#include "deepinfer.h"

/* Most draft tokens per sequence and step (--spec-k-max is 1..this). */
#define DI_SPEC_K_LIMIT 32

typedef struct di_drafter {
  const char *name; /* metrics label: "ngram", "draft", "mtp" */
  /* Writes up to k tokens continuing tokens[0..n) into out; returns how many
   * (0: nothing worth proposing). */
  int (*propose)(void *self, const int32_t *tokens, int n, int k, int32_t *out);
  void *self;
} di_drafter;

/* Prompt lookup: the longest suffix of the history (DI_NGRAM_MAX down to
 * DI_NGRAM_MIN tokens) that occurred before, and the up-to-k tokens that
 * followed its most recent earlier occurrence. No forward pass. */
#define DI_NGRAM_MAX 4
#define DI_NGRAM_MIN 1
int di_ngram_propose(const int32_t *tokens, int n, int k, int32_t *out);
void di_drafter_ngram(di_drafter *d);

#endif
