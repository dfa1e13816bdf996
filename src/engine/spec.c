/* Speculative decoding inside the engine's step. The scheduler's decode pass
 * asks di_spec_propose for a running sequence's draft (written after its
 * tokens, verified in the same forward as every other request's decode and
 * prefill tokens, each draft position with its own logits row); after the
 * forward di_spec_verify walks the rows in order and samples each position
 * exactly as a step without speculation would — the same sampler, logits
 * processors and per-request RNG (one draw per emitted sampled token, none
 * per rejected draft) — and accepts a draft token iff it equals that choice.
 * The output is therefore the non-speculative output whatever the drafter
 * proposed; the drafter only decides how many tokens one forward yields. KV
 * of rejected positions is rolled back (their blocks return to the pool, no
 * prefix-cache name is ever given to them). */
#include <string.h>

#include "engine/engine_internal.h"

int di_spec_k_cap(const di_engine *e, const di_seq *s, int k_cap) {
  const di_req *r = s->req;
  if (!e->spec.on || r->p.spec_off || k_cap <= 0) return 0;
  if (k_cap > e->spec.k_max) k_cap = e->spec.k_max;
  if (k_cap > s->cap - s->len) k_cap = s->cap - s->len;
  if (r->p.max_tokens > 0 && k_cap > r->p.max_tokens - s->n_gen - 1) k_cap = r->p.max_tokens - s->n_gen - 1;
  return k_cap > 0 ? k_cap : 0;
}

/* A draft is cut before the first token the request's constraint forbids
 * (the target could never choose it); the walk over it is rolled back. */
static int constraint_cut(di_engine *e, const di_constraint *c, const int32_t *draft, int n) {
  if (n <= 0 || !c->accept) return n;
  double t = di_engine_now();
  int ok = 0;
  while (ok < n && c->accept(c->self, draft[ok])) ok++;
  if (ok > 0) c->rollback(c->self, (size_t)ok);
  e->acc.constraint_seconds += di_engine_now() - t;
  return ok;
}

/* The tokens the request's constraint leaves no choice over from here (a
 * tag, a fixed stretch of a schema), drafted as they are: verification
 * samples each through the same one-token mask, so all are accepted and the
 * run costs one forward instead of one per token. The walk is rolled back. */
static int forced_run(di_engine *e, const di_constraint *c, int32_t *out, int k_cap) {
  if (!c->accept) return 0;
  double t = di_engine_now();
  int n = 0;
  while (n < k_cap) {
    c->fill_mask(c->self, e->cmask); /* the sampler's scratch, free until this step's sampling */
    int32_t t = di_sampler_forced(e->cmask, e->be.n_vocab);
    if (t < 0 || !c->accept(c->self, t)) break;
    out[n++] = t;
    if (c->finished(c->self)) break;
  }
  if (n > 0) c->rollback(c->self, (size_t)n);
  e->acc.constraint_seconds += di_engine_now() - t;
  return n;
}

int di_spec_propose(di_engine *e, di_seq *s, int k_cap, int tokens) {
  s->draft_forced = false;
  if ((k_cap = di_spec_k_cap(e, s, k_cap)) <= 0) return 0;
  const di_constraint *c = &s->req->constraint;
  int32_t *out = s->tokens + s->len;
  /* a draft model or MTP module keeps state of its own drafts: forced runs go with the n-gram drafter */
  if (!e->spec.model && !e->spec.mtp) {
    int n = forced_run(e, c, out, k_cap);
    if (n > 0) {
      s->draft_forced = true;
      return n;
    }
  }
  if (e->spec.model) /* planned and drafted before the batch was built (di_spec_model_step) */
    return constraint_cut(e, c, out, di_spec_model_take(e, s, k_cap, out));
  if (!di_spec_active(&s->spec, e->acc.steps)) return 0;
  int n = 0;
  if (e->spec.mtp) { /* the module's proposal, made after the last step (spec/mtp.c) */
    if (s->mtp_at == s->len) {
      n = s->mtp_n < k_cap ? s->mtp_n : k_cap;
      memcpy(out, s->mtp_draft, (size_t)n * sizeof *out);
    }
  } else {
    n = e->spec.drafter.propose(e->spec.drafter.self, s->tokens, s->len, k_cap, out);
  }
  n = constraint_cut(e, c, out, n);
  /* the module's probe is a shadow: its row would cost what the module's forward does */
  di_spec_plan_in in = {.k_avail = n, .always = e->spec.always, .emit = e->spec.plan_emit + 1, .tokens = tokens,
                        .step = e->acc.steps, .unverified = e->spec.mtp && !e->spec.always};
  bool fallback = false;
  int k = di_spec_plan(&s->spec, &e->spec.cost, &in, &fallback);
  if (fallback) e->acc.spec_fallbacks++;
  if (s->spec.shadow) {
    s->spec.shadow_tok = out[0];
    s->spec.shadow_at = s->len;
  }
  return k;
}

void di_spec_shadow_check(di_engine *e, di_seq *s) {
  if (!s->spec.shadow) return;
  if (s->len != s->spec.shadow_at + 1) { /* not sampled in this step (preempted): no outcome */
    s->spec.shadow = false;
    return;
  }
  di_spec_shadow_seen(&s->spec, s->tokens[s->spec.shadow_at] == s->spec.shadow_tok, e->acc.steps);
  e->acc.spec_shadow_probes++;
}

void di_spec_verify(di_engine *e, di_seq *s, const float *rows) {
  const int L = s->len, k = s->n_draft, V = e->be.n_vocab;
  int32_t draft[DI_SPEC_K_LIMIT];
  memcpy(draft, s->tokens + L, (size_t)k * sizeof *draft); /* emitting overwrites them */
  s->n_draft = 0;
  s->n_computed = L; /* the base token's position; drafts join as they are accepted */
  /* counted before the walk: an event the walk emits (the final one
   * included) reports this verification */
  s->spec.drafted += k;
  s->spec.verify_steps++;
  int a = 0;
  for (int j = 0;; j++) {
    di_engine_deliver_logits(e, s, rows + (size_t)j * V, L - 1 + j);
    di_engine_sample_emit(e, s, rows + (size_t)j * V);
    if (s->state != DI_SEQ_RUNNING || j == k || s->tokens[s->len - 1] != draft[j]) break;
    a++;
    s->spec.accepted++;
    s->n_computed++;
  }
  if (!s->draft_forced) di_spec_observe(&s->spec, k, a); /* forced runs say nothing of the drafter */
  e->acc.spec_drafted += (uint64_t)k;
  e->acc.spec_accepted += (uint64_t)a;
  e->acc.spec_verify_steps++;
  if (s->state != DI_SEQ_RUNNING) return; /* finished: its blocks are already released */
  int bs = e->pool->block_size, keep = (s->n_computed + bs - 1) / bs;
  di_kv_table_truncate(e->pool, &s->table, keep);
  for (int t = 0; t < e->be.n_swa_tables; t++) di_kv_table_truncate(e->pool, &s->swa[t], keep);
  di_kv_table_commit(e->pool, &s->table, s->tokens, s->n_computed);
  for (int t = 0; t < e->be.n_swa_tables; t++) di_kv_table_commit(e->pool, &s->swa[t], s->tokens, s->n_computed);
}
