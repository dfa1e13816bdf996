/* Self-tuning speculation: how many draft tokens each sequence gets this step.
 *
 * Cost: a step's measured time is fitted online as c0 + c1 * tokens over
 * decode/verify steps (exponentially forgotten least squares), so the price of
 * verifying k more tokens is measured on this machine, model and load.
 * Benefit: per sequence, an estimate p[j] that draft position j is accepted
 * given that all before it were (an exponential moving average over its own
 * verifications; positions past the last one verified drift towards its
 * estimate, so a drafter that keeps being right is tried deeper instead of
 * being held by an old rejection there); k draft tokens are then expected to add
 * E(k) = p0 + p0 p1 + ... accepted tokens (the first few outcomes at a
 * position count as a running mean with the prior, so a request's first
 * verifications are learned at once rather than a quarter at a time). The planner picks the k that
 * maximizes the batch's expected emitted tokens per predicted second,
 * (emitted + E(k)) / T(tokens + k), given what is already in the step: alone
 * and memory-bound (c0 >> c1) a few likely tokens pay; in a large batch the
 * step's own throughput is already ~1/c1 tokens per second and drafts must be
 * near-certain to beat it, so speculation turns down as the batch grows.
 * Noise: on a shared host a load that swings step times can tilt the fitted
 * slope either way: towards nothing (a draft with almost no hope looks free)
 * or towards all of the step (no draft ever pays). The fit clips a step
 * slower than 1.5x its prediction (interference only adds time), waits for
 * 8 steps before it trusts a slope, and keeps a token's cost between 1/1000
 * of a step and the step's fixed part; and besides paying by the fit, a
 * draft row must yield a token at least one time in ten (its position's
 * probability of being reached and accepted): a bound on the rows a
 * collapsed drafter costs that no timing can lift.
 * Consecutive verifications whose first draft is rejected lower p[0] ever
 * faster (from the third on, each halves it again: one or two are what a copy
 * with a changed word costs), so a drafter that stops
 * matching is dropped within a few steps whatever the timing says.
 * Back-off: a sequence whose best k is 0 while the drafter had a proposal
 * stops drafting (a fallback) and probes again after 8, 16, 32, ... steps; a
 * probe whose verification lifts the estimate turns it back on. The spacing
 * doubles with every fallback and failed probe and halves with every
 * verification accepted while on, so a lucky probe in text the drafter cannot
 * guess does not restart the probing from its shortest spacing.
 * Unverified probes (di_spec_plan_in.unverified, the MTP drafter: a probe's
 * module forward costs what a target row would, so the row is saved): the
 * sequence starts backed off with a probe due, a probe verifies no row but
 * keeps the drafter's first token (shadow), which the step's own sampled token
 * then accepts or rejects (di_spec_shadow_seen), the information one verified
 * draft row would have given: a match turns speculation on as a verified probe
 * would, a miss backs off at once (no drafter run for a plan that would drop
 * it). While such a sequence has never seen a draft accepted, each back-off
 * quadruples the spacing instead of doubling it. */
#ifndef DI_ENGINE_SPEC_TUNE_H
#define DI_ENGINE_SPEC_TUNE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/spec/drafter.h"

typedef struct di_spec_cost {
  double w, x, y, xx, xy; /* decayed sums of 1, tokens, seconds, tokens^2, tokens*seconds */
  double c0, c1;          /* current fit */
  bool fitted;
} di_spec_cost;

void di_spec_cost_add(di_spec_cost *c, int tokens, double seconds);
/* Predicted seconds of a step of this many tokens. */
double di_spec_cost_time(const di_spec_cost *c, int tokens);

typedef struct di_spec_seq {
  float p[DI_SPEC_K_LIMIT]; /* acceptance of draft position j given 0..j-1 accepted */
  uint8_t seen[DI_SPEC_K_LIMIT]; /* verified outcomes at position j (up to 1 / P_RATE: the rate's floor) */
  bool init, off, probing;
  bool unverified;          /* its probes are shadows (di_spec_plan_in.unverified) */
  bool hit;                 /* some draft (or shadow) of this sequence was accepted */
  bool shadow;              /* a probe's first token waits for the step's sampled token */
  int32_t shadow_tok;
  int shadow_at;            /* its position */
  int backoff;              /* next probe spacing: 2^backoff steps */
  int misses;               /* consecutive verifications whose first draft was rejected */
  uint64_t probe_at;        /* step of the next probe while off */
  int drafted, accepted, verify_steps; /* kept by the engine (spec.c) */
} di_spec_seq;

typedef struct di_spec_plan_in {
  int k_avail;       /* tokens proposed (already capped by budget, max_tokens, context) */
  bool always;       /* --spec-mode always: take every proposed token */
  double emit;       /* expected tokens the step emits so far, this sequence's one included */
  int tokens;        /* tokens in the step so far, this sequence's one included */
  uint64_t step;     /* engine step counter */
  double k_cost;     /* measured seconds the drafter spends per draft token (0: free, as n-gram) */
  bool unverified;   /* probes are shadows, not verified rows (see above) */
} di_spec_plan_in;

/* Draft tokens to verify (0..k_avail); *fallback is set when the sequence
 * turns speculation off in this call. An unverified probe returns 0 with
 * s->shadow set: the caller records the token and position. */
int di_spec_plan(di_spec_seq *s, const di_spec_cost *c, const di_spec_plan_in *in, bool *fallback);
/* False while the sequence is backed off and no probe is due: the engine
 * then does not even ask the drafter. */
bool di_spec_active(const di_spec_seq *s, uint64_t step);
/* The step sampled the token a shadow probe proposed (match) or another. */
void di_spec_shadow_seen(di_spec_seq *s, bool match, uint64_t step);
/* Expected accepted tokens of the first k drafts. */
double di_spec_expected(const di_spec_seq *s, int k);
/* Updates the estimates after a verification of k drafts of which the first a were accepted. */
void di_spec_observe(di_spec_seq *s, int k, int a);

#endif
