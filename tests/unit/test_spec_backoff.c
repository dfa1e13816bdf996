/* Speculation backs off on a real model when acceptance collapses mid-request.
 *
 * SmolLM2-135M (~/.cache/deepinfer/models, docs/MODELS.md; skipped when
 * absent) continues a prompt that holds a paragraph and then its opening
 * words again: greedy, the model copies the rest (the n-gram drafter's
 * proposals, found in the prompt, are accepted), then frequency and presence
 * penalties push it into text of its own that the drafter cannot guess
 * (acceptance drops to zero, so backing off is right whatever the measured
 * step costs). Through the engine's public counters (per-event
 * drafted/accepted/verify steps, engine stats) the test checks that
 * speculation paid during the copy, that it turned itself off once
 * acceptance collapsed (a fallback counted, few draft tokens in the tail:
 * only the exponentially spaced probes), that it never ran more forwards than
 * decoding without speculation, and that the tokens and logprobs equal those
 * of the same request with speculation off. Counters, not wall time: the
 * host is shared. */
#include <stdint.h>

#include "check.h"
#include "deepinfer.h"

#define GEN 140
#define COPY 60 /* the copy phase lies within the first COPY tokens */
#define TAIL 40 /* acceptance has collapsed before the last TAIL tokens */

typedef struct rec {
  int n;
  int32_t tok[GEN];
  float lp[GEN];
  int drafted[GEN], accepted[GEN], verify[GEN]; /* cumulative, as of token i */
  int done;
} rec;

static void on_event(const di_event *ev, void *user) {
  rec *r = user;
  if (ev->token >= 0 && r->n < GEN) {
    r->tok[r->n] = ev->token;
    r->lp[r->n] = ev->logprob;
    r->drafted[r->n] = ev->spec_drafted;
    r->accepted[r->n] = ev->spec_accepted;
    r->verify[r->n] = ev->spec_verify_steps;
    r->n++;
  }
  if (ev->finish != DI_FINISH_NONE) r->done = 1;
}

static const char *PROMPT =
    "The old lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a brass lantern and a "
    "thermos of black tea. He counted the steps aloud, one hundred and twelve of them, and at the top he wiped the "
    "salt from the great lens with a soft cloth. Then he wound the clockwork that turned the light, checked the "
    "level of oil in the reservoir, and wrote the date, the wind and the number of passing ships in a leather "
    "logbook that his grandfather had started sixty years before.\n\n"
    "The old lighthouse keeper climbed the spiral stairs every evening";

static int generate(const char *model, di_spec_kind spec, rec *r, di_engine_stats *st) {
  di_engine_opts o;
  di_engine_opts_default(&o);
  o.model_path = model;
  o.threads = 1;
  o.ctx = 512;
  o.spec = spec;
  o.spec_mode = DI_SPEC_AUTO;
  di_engine *e = NULL;
  char err[256];
  if (di_engine_create(&o, &e, err, sizeof err) != DI_OK) {
    fprintf(stderr, "engine: %s\n", err);
    return -1;
  }
  di_request_params p;
  di_request_params_default(&p);
  p.prompt_text = PROMPT;
  p.prompt_text_len = strlen(PROMPT);
  p.max_tokens = GEN;
  p.ignore_eos = 1;
  p.logprobs = 1;
  /* greedy after frequency and presence penalties (generated tokens only):
   * the copy holds, but a second round of the paragraph, or any phrase the
   * drafter could find in what was generated, is pushed off, into new words */
  p.sampling.temperature = 0;
  p.sampling.frequency_penalty = 1.0f;
  p.sampling.presence_penalty = 1.0f;
  p.cb = on_event;
  p.user = r;
  uint64_t id;
  if (di_engine_submit(e, &p, &id, err, sizeof err) != DI_OK) {
    fprintf(stderr, "submit: %s\n", err);
    di_engine_destroy(e);
    return -1;
  }
  while (di_engine_step(e) > 0) {}
  di_engine_stats_get(e, st);
  di_engine_destroy(e);
  return 0;
}

int main(void) {
  const char *home = getenv("HOME");
  char model[512];
  snprintf(model, sizeof model, "%s/.cache/deepinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf", home ? home : "/tmp");
  FILE *f = fopen(model, "rb");
  if (!f) {
    fprintf(stderr, "skip: %s missing (scripts/fetch-models)\n", model);
    return 77;
  }
  fclose(f);
  static rec off, on;
  di_engine_stats st_off, st_on;
  CHECK(generate(model, DI_SPEC_OFF, &off, &st_off) == 0);
  CHECK(generate(model, DI_SPEC_NGRAM, &on, &st_on) == 0);
  CHECK(off.done && on.done && off.n == GEN && on.n == GEN);
  if (on.n < GEN) return 1;
  /* the timeline per 10 tokens (drafted/accepted/verify steps), for a failure's diagnosis */
  for (int i = 9; i < on.n; i += 10)
    fprintf(stderr, "%d:%d/%d/%d ", i, on.drafted[i] - on.drafted[i - 9], on.accepted[i] - on.accepted[i - 9],
            on.verify[i] - on.verify[i - 9]);
  fprintf(stderr, "\nfallbacks %llu, steps %llu (off: %llu)\n", (unsigned long long)st_on.spec_fallbacks,
          (unsigned long long)st_on.steps, (unsigned long long)st_off.steps);

  /* the output is that without speculation, token for token, logprob for logprob */
  CHECK(memcmp(on.tok, off.tok, sizeof on.tok) == 0);
  CHECK(memcmp(on.lp, off.lp, sizeof on.lp) == 0);
  /* speculation paid while the model copied */
  CHECKF(on.accepted[COPY - 1] >= COPY / 2, "accepted %d of the first %d tokens", on.accepted[COPY - 1], COPY);
  /* then it turned itself off: a fallback counted, and in the tail only the
   * exponentially spaced probes draft (a probe verifies at most a few tokens) */
  CHECK(st_on.spec_fallbacks >= 1);
  int t0 = GEN - TAIL - 1, tail_drafted = on.drafted[GEN - 1] - on.drafted[t0];
  int tail_rejected = tail_drafted - (on.accepted[GEN - 1] - on.accepted[t0]);
  int tail_verify = on.verify[GEN - 1] - on.verify[t0];
  CHECKF(tail_drafted <= TAIL / 4 && tail_verify <= 6, "tail: %d drafted in %d verify steps", tail_drafted, tail_verify);
  /* what the back-off bounds: draft tokens rejected in the tail cost at most
   * one more row per 4 emitted tokens ... */
  CHECKF(tail_rejected * 4 <= TAIL, "tail: %d rejected", tail_rejected);
  /* ... and over the whole request speculation never took more forwards */
  CHECK(st_on.steps < st_off.steps);
  CHECK(st_on.spec_drafted == (uint64_t)on.drafted[GEN - 1] && st_on.spec_accepted == (uint64_t)on.accepted[GEN - 1]);
  return di_test_failures ? 1 : 0;
}
