/* The MTP drafter's back-off costs no module row (spec/mtp.c), and a probe
 * finds the module's cache as if it had run every step. One greedy request
 * on the fake model and its fake MTP module (fake_mtp.h: a perfect drafter
 * whose drafts hash the module rows it attends to, failing on a stale or
 * never written one), made wrong for a stretch of the output so that
 * acceptance collapses there and speculation backs off, right again after:
 *  - the output is the one without speculation;
 *  - the module runs only in steps after which the sequence drafts (none
 *    while it is backed off), far fewer than the steps;
 *  - full attention (DeepSeek-V3): every pair up to the last draft is written
 *    exactly once (the catch-up leaves no hole and repeats nothing);
 *    windowed (DeepSeek-V4): pairs older than the window at a probe are never
 *    computed, and the window the module reads is complete;
 *  - acceptance after the stretch recovers (probes find the right drafts);
 *  - a full-attention ring smaller than a back-off is caught up before it
 *    would lose a position (module rows while backed off, still each pair once);
 *  - a module wrong from the first token costs no verified row until a probe
 *    (checked against the sampled token, spec/tune.h) finds it right again.
 * The step-time fit is pinned (a memory-bound step) so that the timing of
 * this host cannot decide the draft lengths. */
#include "check.h"
#include "fake_model.h"
#include "fake_mtp.h"

#define PROMPT 12
#define GEN 300
static int bad_lo = 40, bad_hi = 140; /* generated tokens [bad_lo, bad_hi) are drafted wrong */
#define TAIL 100  /* the last TAIL tokens: acceptance must have recovered */

static int32_t prompt[PROMPT];

/* The target's pair at p drafts the token at p + 2. */
static bool wrong_stretch(int p) {
  int g = p + 2 - PROMPT;
  return g >= bad_lo && g < bad_hi;
}

static int module_failures;
static di_code checked_mtp(void *user, di_kv_pool *kv, const di_batch *b, const float *hidden, float *logits,
                           float *hidden_out, di_status *st) {
  di_code rc = fake_mtp(user, kv, b, hidden, logits, hidden_out, st);
  if (rc != DI_OK && module_failures++ < 3) fprintf(stderr, "module: %s\n", st->msg);
  return rc;
}

typedef struct result {
  int32_t tokens[GEN];
  int n;
  int drafted, accepted;         /* the request's, from its final event */
  int tail_drafted, tail_accepted;
  int steps, module_steps, module_steps_no_draft;
  int last_draft_pos;            /* the latest pair a draft came from */
  di_engine_stats st;
} result;

static void on_event(const di_event *ev, void *user) {
  result *r = user;
  if (ev->token >= 0 && r->n < GEN) r->tokens[r->n++] = ev->token;
  if (ev->finish != DI_FINISH_NONE) r->drafted = ev->spec_drafted, r->accepted = ev->spec_accepted;
}

/* Half the weight at 1 token in 1 s, half at 5 tokens in 1.25 s (c0 = 0.9375,
 * c1 = 0.0625), a billion steps' worth: the fake's microsecond steps do not move it. */
static void pin_cost(di_spec_cost *c) {
  const double w = 1e9;
  *c = (di_spec_cost){.w = w, .x = 3 * w, .y = 1.125 * w, .xx = 13 * w, .xy = 3.625 * w, .c0 = 0.9375, .c1 = 0.0625,
                      .fitted = true};
}

static void run(di_spec_kind kind, int window, int ring, result *r) {
  memset(r, 0, sizeof *r);
  memset(fake_mtp_writes, 0, sizeof fake_mtp_writes);
  module_failures = 0;
  fake_mtp_window = window;
  fake_mtp_wrong = wrong_stretch;
  di_engine_opts o;
  di_engine_opts_default(&o);
  o.kv_type = DI_KV_DTYPE_F32;
  o.max_seqs = 1;
  o.max_batch_tokens = 128;
  o.block_size = 4;
  o.spec = kind;
  o.spec_k_max = 4;
  di_engine_backend be = fake_backend(512);
  if (kind == DI_SPEC_MTP) {
    fake_mtp_backend(&be);
    be.forward_mtp = checked_mtp;
  }
  di_engine *e = NULL;
  di_status st = {0};
  CHECKF(di_engine_create_backend(&o, &be, &e, &st) == DI_OK, "%s", st.msg);
  if (!e) return;
  if (ring) e->spec.mtp_ring = ring;
  pin_cost(&e->spec.cost);
  di_request_params p;
  di_request_params_default(&p);
  p.prompt_ids = prompt;
  p.n_prompt = PROMPT;
  p.max_tokens = GEN;
  p.ignore_eos = 1;
  p.sampling.temperature = 0;
  p.cb = on_event;
  p.user = r;
  char err[256];
  CHECKF(di_engine_submit(e, &p, NULL, err, sizeof err) == DI_OK, "%s", err);
  int tail_d0 = -1, tail_a0 = 0;
  for (int left = 1; left > 0 && r->steps < 10 * GEN; r->steps++) {
    uint64_t forwards = e->acc.spec_mtp_forwards;
    left = di_engine_step(e);
    di_seq *s = e->running.n ? e->running.v[0] : NULL;
    if (!s) continue;
    if (e->acc.spec_mtp_forwards > forwards) {
      r->module_steps++;
      r->module_steps_no_draft += s->mtp_n == 0;
    }
    if (s->mtp_n > 0) r->last_draft_pos = s->len - 2;
    if (tail_d0 < 0 && s->n_gen >= GEN - TAIL) tail_d0 = s->spec.drafted, tail_a0 = s->spec.accepted;
  }
  r->tail_drafted = r->drafted - tail_d0;
  r->tail_accepted = r->accepted - tail_a0;
  di_engine_stats_get(e, &r->st);
  CHECKF(r->st.kv_blocks_used == 0, "blocks still used: %d", r->st.kv_blocks_used);
  di_engine_destroy(e);
  fake_mtp_window = 0;
  fake_mtp_wrong = NULL;
}

/* Pairs up to the last draft's written once each (full attention), or at
 * most once (windowed: returns how many were never computed). */
static int check_writes(const char *what, const result *r, bool full) {
  int missing = 0, twice = 0;
  for (int q = 0; q <= r->last_draft_pos && q < FAKE_MTP_MAX_POS; q++) {
    missing += fake_mtp_writes[q] == 0;
    twice += fake_mtp_writes[q] > 1;
  }
  CHECKF(twice == 0 && (!full || missing == 0), "%s: %d pairs up to %d never written, %d written twice", what, missing,
         r->last_draft_pos, twice);
  return missing;
}

static void check_common(const char *what, const result *ref, const result *r) {
  CHECKF(r->n == GEN && !memcmp(r->tokens, ref->tokens, sizeof r->tokens), "%s: output differs from --spec off", what);
  CHECKF(module_failures == 0, "%s: the module read a stale row %d times", what, module_failures);
  CHECKF(r->st.spec_fallbacks >= (bad_lo > 0), "%s: never backed off", what);
  CHECKF(r->tail_drafted >= TAIL / 3 && r->tail_accepted * 10 >= r->tail_drafted * 9,
         "%s: after the stretch %d drafted, %d accepted", what, r->tail_drafted, r->tail_accepted);
  CHECKF(r->module_steps * 2 < r->steps, "%s: the module ran in %d of %d steps", what, r->module_steps, r->steps);
  printf("%s: %d steps, module in %d (%llu forwards, %llu rows), %d drafted, %d accepted (last %d tokens: %d / %d), "
         "%llu fallbacks\n",
         what, r->steps, r->module_steps, (unsigned long long)r->st.spec_mtp_forwards,
         (unsigned long long)r->st.spec_mtp_rows, r->drafted, r->accepted, TAIL, r->tail_accepted, r->tail_drafted,
         (unsigned long long)r->st.spec_fallbacks);
}

int main(void) {
  for (int i = 0; i < PROMPT; i++) prompt[i] = (int32_t)(40 + fake_mix((uint64_t)i * 31) % 250);
  static result ref, full, win, spill;
  run(DI_SPEC_OFF, 0, 0, &ref);
  CHECK(ref.n == GEN);

  run(DI_SPEC_MTP, 0, 0, &full);
  check_common("full attention", &ref, &full);
  CHECKF(full.module_steps_no_draft == 0, "full attention: the module ran in %d steps without a draft after",
         full.module_steps_no_draft);
  check_writes("full attention", &full, true);

  run(DI_SPEC_MTP, 8, 0, &win);
  check_common("window 8", &ref, &win);
  CHECKF(win.module_steps_no_draft == 0, "window 8: the module ran in %d steps without a draft after",
         win.module_steps_no_draft);
  CHECKF(check_writes("window 8", &win, false) > 0, "window 8: every pair was computed");
  CHECKF(win.st.spec_mtp_rows < full.st.spec_mtp_rows, "window 8: %llu rows, full attention %llu",
         (unsigned long long)win.st.spec_mtp_rows, (unsigned long long)full.st.spec_mtp_rows);

  run(DI_SPEC_MTP, 0, 16, &spill);
  check_common("full attention, ring of 16", &ref, &spill);
  CHECKF(spill.module_steps_no_draft > 0, "ring of 16: never caught up while backed off");
  check_writes("full attention, ring of 16", &spill, true);

  static result late;
  bad_lo = 0, bad_hi = 100;
  run(DI_SPEC_MTP, 8, 0, &late);
  check_common("window 8, wrong from the start", &ref, &late);
  CHECKF(late.module_steps_no_draft == 0, "wrong from the start: the module ran in %d steps without a draft after",
         late.module_steps_no_draft);
  /* drafts only once a probe found the module right: none of the wrong ones was verified */
  CHECKF(late.drafted > 0 && late.accepted == late.drafted,
         "wrong from the start: %d drafted, %d accepted", late.drafted, late.accepted);
  CHECKF(late.st.spec_shadow_probes >= 3 && late.st.spec_shadow_probes <= 6, "wrong from the start: %llu probes",
         (unsigned long long)late.st.spec_shadow_probes);
  return di_test_finish("test_spec_mtp");
}
