/* Speculative decoding against the fake model (tests/unit/fake_model.h, whose
 * logits hash the token history read back from the KV pool, so a KV rollback
 * bug changes the output): with speculation on, every request's tokens,
 * logprobs, finish reasons, text and logits are those of speculation off —
 * greedy and seeded sampling with penalties, alone, in batches mixed with
 * non-speculative requests, under KV pressure that preempts, with stop
 * strings, and for sliding-window (mixed) KV layouts; pool accounting stays
 * exact after rejections and a later prefix-cache hit over verified blocks
 * gives the same logits. The n-gram drafter rarely guesses the fake model's
 * tokens, so an oracle drafter (the reference output, corrupted at known
 * places) exercises long accepted runs and rejections at every position. */
#include "check.h"
#include "engine/spec/drafter.h"
#include "fake_model.h"
#include "fake_mtp.h"

#define NP 32
#define GEN 24
#define MAXT 64

static int32_t prompts[NP][96];
static int prompt_len[NP];

/* Prompt i: a marker (3 + i), then a random segment written twice, so the
 * n-gram drafter finds matches. */
static void make_prompts(void) {
  for (int i = 0; i < NP; i++) {
    int seg = 4 + i % 9;
    prompt_len[i] = 1 + 2 * seg + i % 3;
    prompts[i][0] = 3 + i;
    for (int k = 0; k < seg; k++) prompts[i][1 + k] = prompts[i][1 + seg + k] = (int32_t)(40 + fake_mix((uint64_t)(i * 977 + k)) % 250);
    for (int k = 1 + 2 * seg; k < prompt_len[i]; k++) prompts[i][k] = (int32_t)(40 + k);
  }
}

typedef struct out {
  int32_t tokens[MAXT];
  float logprobs[MAXT];
  int n;
  char text[512];
  size_t text_len;
  di_finish finish;
  int drafted, accepted;
  int n_rows;
  uint64_t rows_hash;
} out;

static void on_event(const di_event *ev, void *user) {
  out *o = user;
  if (ev->text_len && o->text_len + ev->text_len < sizeof o->text) {
    memcpy(o->text + o->text_len, ev->text, ev->text_len);
    o->text_len += ev->text_len;
  }
  if (ev->token >= 0 && o->n < MAXT) {
    o->logprobs[o->n] = ev->logprob;
    o->tokens[o->n++] = ev->token;
  }
  if (ev->finish != DI_FINISH_NONE) {
    o->finish = ev->finish;
    o->drafted = ev->spec_drafted;
    o->accepted = ev->spec_accepted;
  }
}

static void on_logits(const float *row, int n_vocab, int pos, void *user) {
  out *o = user;
  CHECK(pos == o->n_rows);
  o->n_rows++;
  uint64_t h = o->rows_hash;
  for (int v = 0; v < n_vocab; v++) {
    uint32_t b;
    memcpy(&b, &row[v], 4);
    h = fake_mix(h ^ b);
  }
  o->rows_hash = h;
}

/* The oracle drafter proposes the reference continuation of the prompt it
 * recognizes by its marker, with every token at an index = 3 (mod 5) wrong. */
static out oracle_ref[NP];
static int oracle_propose(void *self, const int32_t *tokens, int n, int k, int32_t *outp) {
  (void)self;
  int i = tokens[0] - 3;
  if (i < 0 || i >= NP) return 0;
  int g = n - prompt_len[i], m = 0;
  for (; m < k && g + m < oracle_ref[i].n; m++) {
    int32_t t = oracle_ref[i].tokens[g + m];
    outp[m] = (g + m) % 5 == 3 ? (t + 1) % FAKE_VOCAB : t;
  }
  return m;
}

/* A draft model that disagrees with the target now and then: the fake
 * model's logits with the runner-up lifted to the top in about a third of
 * the rows (decided by a hash of the row, so deterministic). */
static di_code noisy_forward(void *user, di_kv_pool *kv, const di_batch *b, float *logits, di_status *st) {
  di_code rc = fake_forward(user, kv, b, logits, st);
  int rows = 0;
  for (int i = 0; i < b->n_tokens; i++) rows += b->want_logits ? b->want_logits[i] : i == b->n_tokens - 1;
  for (int r = 0; rc == DI_OK && r < rows; r++) {
    float *l = logits + (size_t)r * FAKE_VOCAB;
    uint32_t bits;
    memcpy(&bits, &l[7], 4);
    if (fake_mix(bits) % 3) continue;
    int best = 0;
    for (int v = 1; v < FAKE_VOCAB; v++)
      if (l[v] > l[best]) best = v;
    l[(best + 1) % FAKE_VOCAB] = l[best] + 1;
  }
  return rc;
}

typedef struct cfg {
  int spec;        /* DI_SPEC_* */
  int draft;       /* DI_SPEC_DRAFT: 1 = the target itself as draft, 2 = a noisy copy */
  bool oracle, always;
  int k_max, max_seqs, at_once;
  size_t kv_mem;
  bool mix_off;    /* odd requests opt out of speculation */
  float temp, rep;
  bool stops, logits, ignore_eos;
  int window, mixed;
} cfg;

static di_engine_stats last_stats;

/* Checks after every step that each running sequence's tables hold exactly
 * the blocks of its computed positions (nothing left from rejected drafts). */
static void check_accounting(di_engine *e) {
  int bs = e->pool->block_size;
  for (int i = 0; i < e->running.n; i++) {
    di_seq *s = e->running.v[i];
    int want = (s->n_computed + bs - 1) / bs;
    CHECKF(s->table.n_blocks == want, "seq table %d blocks for %d positions", s->table.n_blocks, s->n_computed);
    for (int k = 0; k < e->be.n_swa_tables; k++) CHECK(s->swa[k].n_blocks == want);
  }
}

static void run(const cfg *c, out *outs) {
  di_engine_opts o;
  di_engine_opts_default(&o);
  o.kv_type = DI_KV_DTYPE_F32;
  o.max_seqs = c->max_seqs;
  o.max_batch_tokens = 128;
  o.block_size = 4;
  o.kv_mem = c->kv_mem;
  /* the draft's KV takes its share of --kv-mem (the same bytes per position
   * here), MTP's a second layer: double it so the target's pool, and hence
   * preemption, is the reference's */
  if (c->spec == DI_SPEC_DRAFT || c->spec == DI_SPEC_MTP) o.kv_mem *= 2;
  o.spec = c->spec;
  o.spec_k_max = c->k_max;
  o.spec_mode = c->always ? DI_SPEC_ALWAYS : DI_SPEC_AUTO;
  fake_window = c->window;
  fake_mixed = c->mixed;
  di_engine_backend be = fake_backend(512);
  be.window = c->window;
  be.n_swa_tables = c->mixed ? 2 : 0;
  di_engine *e = NULL;
  di_status st = {0};
  if (c->spec == DI_SPEC_MTP) {
    fake_mtp_backend(&be);
  }
  di_engine_backend draft = be;
  if (c->draft == 2) draft.forward = noisy_forward;
  CHECKF(di_engine_create_spec(&o, &be, c->spec == DI_SPEC_DRAFT ? &draft : NULL, &e, &st) == DI_OK, "%s", st.msg);
  if (!e) return;
  if (c->oracle) e->spec.drafter = (di_drafter){.name = "oracle", .propose = oracle_propose};
  memset(outs, 0, sizeof(out) * NP);
  static const char *const stop[] = {"q", "zz"};
  for (int i = 0; i < NP; i += c->at_once) {
    for (int j = i; j < i + c->at_once && j < NP; j++) {
      di_request_params p;
      di_request_params_default(&p);
      p.prompt_ids = prompts[j];
      p.n_prompt = (size_t)prompt_len[j];
      p.max_tokens = GEN - j % 4;
      p.ignore_eos = c->ignore_eos;
      p.sampling.temperature = c->temp;
      p.sampling.top_p = c->temp > 0 ? 0.95f : 1.0f;
      p.sampling.repetition_penalty = c->rep > 0 ? c->rep : 1.0f;
      p.sampling.seed = 77 + (uint64_t)j;
      p.logprobs = 1;
      p.spec_off = c->mix_off && j % 2;
      if (c->stops) p.stop = stop, p.n_stop = 2;
      if (c->logits) p.logits_cb = on_logits;
      p.cb = on_event;
      p.user = &outs[j];
      char err[256];
      CHECKF(di_engine_submit(e, &p, NULL, err, sizeof err) == DI_OK, "%s", err);
    }
    int guard = 0;
    while (di_engine_step(e) > 0 && guard++ < 100000) check_accounting(e);
  }
  di_engine_stats_get(e, &last_stats);
  CHECKF(last_stats.kv_blocks_used == 0, "blocks still used: %d", last_stats.kv_blocks_used);
  CHECKF(di_spec_model_blocks_used(e) == 0, "draft blocks still used: %d", di_spec_model_blocks_used(e));
  di_engine_destroy(e);
  fake_window = fake_mixed = 0;
}

static int compare(const out *a, const out *b, const char *what) {
  int bad = 0;
  for (int i = 0; i < NP; i++) {
    bool same = a[i].n == b[i].n && !memcmp(a[i].tokens, b[i].tokens, sizeof(int32_t) * (size_t)a[i].n) &&
                !memcmp(a[i].logprobs, b[i].logprobs, sizeof(float) * (size_t)a[i].n) && a[i].finish == b[i].finish &&
                a[i].text_len == b[i].text_len && !memcmp(a[i].text, b[i].text, a[i].text_len) &&
                a[i].n_rows == b[i].n_rows && a[i].rows_hash == b[i].rows_hash;
    if (!same && bad++ < 3) fprintf(stderr, "%s: request %d differs (%d vs %d tokens)\n", what, i, a[i].n, b[i].n);
  }
  CHECKF(bad == 0, "%s: %d of %d requests differ", what, bad, NP);
  return bad;
}

static out ref[NP], got[NP];
static void check_counts(const char *what, bool rejections);
static void equivalence_mtp(cfg base, const char *name);

static void equivalence(cfg base, const char *name) {
  char what[160];
  cfg off = base;
  off.spec = DI_SPEC_OFF;
  off.oracle = false;
  run(&off, ref);
  memcpy(oracle_ref, ref, sizeof ref);
  int total = 0;
  for (int i = 0; i < NP; i++) total += ref[i].n;
  CHECK(total > NP * 2); /* the fake model generated something */
  struct {
    bool oracle, always;
    int k;
  } v[] = {{true, true, 4}, {true, false, 8}, {false, true, 8}, {false, false, 3}};
  for (size_t t = 0; t < sizeof v / sizeof *v; t++) {
    cfg on = base;
    on.spec = DI_SPEC_NGRAM;
    on.oracle = v[t].oracle;
    on.always = v[t].always;
    on.k_max = v[t].k;
    run(&on, got);
    snprintf(what, sizeof what, "%s [%s, %s, k=%d]", name, v[t].oracle ? "oracle" : "ngram",
             v[t].always ? "always" : "auto", v[t].k);
    compare(ref, got, what);
    if (v[t].oracle && v[t].always) check_counts(what, true); /* drafts verified, both accepted and rejected */
  }
  /* The draft-model drafter: the target itself as draft (greedy requests
   * accept nearly every draft) and a noisy copy (rejections everywhere). */
  for (int dm = 1; dm <= 2; dm++)
    for (int always = 0; always < 2; always++) {
      cfg on = base;
      on.spec = DI_SPEC_DRAFT;
      on.draft = dm;
      on.always = always;
      on.k_max = always ? 5 : 8;
      run(&on, got);
      snprintf(what, sizeof what, "%s [draft model %s, %s]", name, dm == 1 ? "= target" : "noisy",
               always ? "always" : "auto");
      compare(ref, got, what);
      if (always && !base.kv_mem) check_counts(what, dm == 2); /* under pressure drafts rarely fit */
      if (always && dm == 1 && base.temp == 0)
        CHECKF(last_stats.spec_accepted * 10 >= last_stats.spec_drafted * 8, "%s: drafted %llu accepted %llu", what,
               (unsigned long long)last_stats.spec_drafted, (unsigned long long)last_stats.spec_accepted);
      if (always && dm == 2 && base.temp == 0)
        CHECKF(last_stats.spec_accepted * 10 < last_stats.spec_drafted * 9, "%s: drafted %llu accepted %llu", what,
               (unsigned long long)last_stats.spec_drafted, (unsigned long long)last_stats.spec_accepted);
    }
  if (!base.mixed) equivalence_mtp(base, name); /* the module's K/V is a pool layer: no layer groups */
}

/* The MTP drafter over the fake module: one draft token per step. */
static void equivalence_mtp(cfg base, const char *name) {
  char what[160];
  for (int always = 0; always < 2; always++) {
    cfg on = base;
    on.spec = DI_SPEC_MTP;
    on.always = always;
    run(&on, got);
    snprintf(what, sizeof what, "%s [mtp, %s]", name, always ? "always" : "auto");
    compare(ref, got, what);
    if (always && !base.kv_mem) check_counts(what, base.temp > 0);
    if (always && !base.kv_mem) /* chained: more than one draft token per verification */
      CHECKF(last_stats.spec_drafted > last_stats.spec_verify_steps * 3 / 2, "%s: %llu drafted in %llu verifications",
             what, (unsigned long long)last_stats.spec_drafted, (unsigned long long)last_stats.spec_verify_steps);
    if (always && base.temp == 0)
      CHECKF(last_stats.spec_accepted * 10 >= last_stats.spec_drafted * 8, "%s: drafted %llu accepted %llu", what,
             (unsigned long long)last_stats.spec_drafted, (unsigned long long)last_stats.spec_accepted);
  }
}

/* Drafts were verified, some accepted, and the per-request counts add up to the engine's. */
static void check_counts(const char *what, bool rejections) {
  CHECKF(last_stats.spec_drafted > 0 && last_stats.spec_accepted > 0 &&
             (!rejections || last_stats.spec_accepted < last_stats.spec_drafted),
         "%s: drafted %llu accepted %llu", what, (unsigned long long)last_stats.spec_drafted,
         (unsigned long long)last_stats.spec_accepted);
  int d = 0, a = 0;
  for (int i = 0; i < NP; i++) d += got[i].drafted, a += got[i].accepted;
  CHECK((uint64_t)d == last_stats.spec_drafted && (uint64_t)a == last_stats.spec_accepted);
}

static void test_ngram(void) {
  int32_t o[8];
  const int32_t a[] = {1, 2, 3, 4, 1, 2};
  CHECK(di_ngram_propose(a, 6, 3, o) == 3 && o[0] == 3 && o[1] == 4 && o[2] == 1);
  const int32_t b[] = {5, 6, 7, 5, 6, 9, 5, 6}; /* the most recent match wins */
  CHECK(di_ngram_propose(b, 8, 8, o) == 3 && o[0] == 9 && o[1] == 5 && o[2] == 6);
  const int32_t c[] = {1, 2, 3, 4};
  CHECK(di_ngram_propose(c, 4, 4, o) == 0);
  const int32_t d[] = {7, 7, 7};
  CHECK(di_ngram_propose(d, 3, 4, o) == 1 && o[0] == 7);
  const int32_t f[] = {1, 2, 3, 9, 2, 3, 8, 1, 2, 3}; /* longest suffix first: [1 2 3] -> 9 */
  CHECK(di_ngram_propose(f, 10, 1, o) == 1 && o[0] == 9);
}

static void test_tuner(void) {
  di_spec_cost c = {0};
  for (int i = 0; i < 40; i++) di_spec_cost_add(&c, 1 + i % 5, 0.010 + 0.001 * (1 + i % 5));
  CHECKF(c.c1 > 0.0009 && c.c1 < 0.0011 && c.c0 > 0.0095 && c.c0 < 0.0105, "fit c0 %g c1 %g", c.c0, c.c1);
  di_spec_seq s = {0};
  bool fb = false;
  di_spec_plan_in in = {.k_avail = 8, .emit = 1, .tokens = 1, .step = 0};
  int k = di_spec_plan(&s, &c, &in, &fb);
  CHECK(k > 0 && !fb); /* prior 0.5 per position, cheap tokens: worth drafting */
  for (int i = 0; i < 20; i++) di_spec_observe(&s, k, 0);
  CHECK(di_spec_expected(&s, 8) < 0.01);
  in.step = 20;
  CHECK(di_spec_plan(&s, &c, &in, &fb) == 0 && fb && s.off); /* never accepted: off */
  in.step = 21;
  CHECK(!di_spec_active(&s, 21) && di_spec_plan(&s, &c, &in, &fb) == 0 && !fb);
  CHECK(di_spec_active(&s, 20 + 8)); /* the first probe 8 steps later */
  in.step = 28;
  int probe = di_spec_plan(&s, &c, &in, &fb);
  CHECK(probe > 0 && s.probing);
  di_spec_observe(&s, probe, probe); /* the probe was all accepted ... */
  for (int i = 0; i < 10; i++) di_spec_observe(&s, 4, 4);
  in.step = 29;
  CHECK(di_spec_plan(&s, &c, &in, &fb) > 0 && !s.off); /* ... so it turns back on */
  /* A few slow steps under load can make time look proportional to tokens
   * (no fixed part, so that a draft could never pay): the fit keeps a token's
   * cost at most the step's fixed part, and a likely draft still pays. One
   * descheduled step (ten times its time) does not move the fit much. */
  di_spec_cost lean = {0};
  for (int i = 0; i < 10; i++) di_spec_cost_add(&lean, 4 + i % 5, 0.020 * (4 + i % 5));
  CHECKF(lean.c0 > 0 && lean.c1 <= lean.c0, "fit c0 %g c1 %g", lean.c0, lean.c1);
  di_spec_seq sure = {0};
  for (int i = 0; i < 10; i++) di_spec_observe(&sure, 4, 4);
  di_spec_plan_in one = {.k_avail = 4, .emit = 1, .tokens = 1};
  CHECK(di_spec_plan(&sure, &lean, &one, &fb) > 0 && !fb);
  di_spec_cost spiked = c;
  di_spec_cost_add(&spiked, 1, 0.110);
  CHECKF(spiked.c0 < 0.0115 && spiked.c1 > c.c1 * 0.8, "fit after a spike: c0 %g c1 %g", spiked.c0, spiked.c1);
  /* Load that swings step times can tilt the fit until one more token looks
   * free (the slope at its floor): a drafter that stops matching after a long
   * copy still turns off within a few verifications, and every row it drafts
   * meanwhile had at least a 10% chance of a token. */
  di_spec_cost flat = {0};
  for (int i = 0; i < 40; i++) di_spec_cost_add(&flat, 1 + i % 5, 0.010);
  di_spec_seq q = {0};
  for (int i = 0; i < 30; i++) di_spec_observe(&q, 8, 8);
  di_spec_plan_in cp = {.k_avail = 8, .emit = 1, .tokens = 1, .step = 100};
  CHECK(di_spec_plan(&q, &flat, &cp, &fb) == 8);
  int verifies = 0, rows = 0;
  for (int kq; verifies < 20 && (kq = di_spec_plan(&q, &flat, &cp, &fb)) > 0; verifies++, rows += kq) {
    CHECK(di_spec_expected(&q, kq) - di_spec_expected(&q, kq - 1) >= 0.1);
    di_spec_observe(&q, kq, 0);
  }
  CHECKF(q.off && fb && verifies <= 4 && rows <= 32, "off %d after %d verifications of %d rows", q.off, verifies, rows);
  /* its probes are spaced 8, 16, 32 steps; a lucky one turns it back on, and
   * the next fallback waits longer still */
  uint64_t off_at = cp.step;
  cp.step = off_at + 8;
  CHECK(di_spec_plan(&q, &flat, &cp, &fb) > 0 && q.probing);
  di_spec_observe(&q, 2, 0);
  cp.step++;
  CHECK(di_spec_plan(&q, &flat, &cp, &fb) == 0 && q.off && q.probe_at == cp.step + 16);
  cp.step += 16;
  int probe2 = di_spec_plan(&q, &flat, &cp, &fb);
  CHECK(probe2 > 0 && q.probing);
  di_spec_observe(&q, probe2, 1);
  cp.step++;
  int kq2 = di_spec_plan(&q, &flat, &cp, &fb);
  CHECK(kq2 > 0 && !q.off);
  for (int i = 0; i < 5 && kq2 > 0; i++, cp.step++) {
    di_spec_observe(&q, kq2, 0);
    kq2 = di_spec_plan(&q, &flat, &cp, &fb);
  }
  CHECKF(q.off && q.probe_at == cp.step - 1 + 32, "off %d, probe at %llu (step %llu)", q.off,
         (unsigned long long)q.probe_at, (unsigned long long)cp.step);
  /* A large batch: the step is compute-bound (64 tokens cost 3x the fixed
   * part) and a 50% draft does not pay where it paid alone. */
  di_spec_cost big = {0};
  for (int i = 0; i < 40; i++) di_spec_cost_add(&big, 60 + i % 8, 0.010 + 0.0005 * (60 + i % 8));
  di_spec_seq h = {0};
  di_spec_plan_in alone = {.k_avail = 4, .emit = 1, .tokens = 1}, crowd = {.k_avail = 4, .emit = 64, .tokens = 64};
  CHECK(di_spec_plan(&h, &big, &alone, &fb) > 0);
  di_spec_seq h2 = {0};
  CHECK(di_spec_plan(&h2, &big, &crowd, &fb) == 0);
  /* Positions past the verified ones follow them: one early rejection at
   * position 2 does not cap k at 2 once positions 0 and 1 keep being accepted
   * (a draft model costing a third of a step per token, c0-bound verification). */
  di_spec_seq d = {0};
  di_spec_observe(&d, 3, 2);
  di_spec_plan_in dm = {.k_avail = 8, .emit = 1, .tokens = 1, .k_cost = 0.0035};
  for (int i = 0; i < 30; i++) di_spec_observe(&d, 2, 2);
  CHECKF(di_spec_plan(&d, &c, &dm, &fb) >= 3, "k %d after steady acceptance (p2 %.2f)", di_spec_plan(&d, &c, &dm, &fb),
         d.p[2]);
  /* A request's first verifications count as a running mean with the prior
   * (0.5 -> 0.75 -> 0.83 -> 0.88 for three full acceptances; the rate then
   * stays at its floor), and positions past an all-accepted draft follow at
   * the same rate (0.69 at position 3, where P_DRIFT would have left 0.59). */
  di_spec_seq f = {0};
  for (int i = 0; i < 3; i++) di_spec_observe(&f, 3, 3);
  CHECKF(f.p[0] > 0.87f && f.p[0] < 0.88f && f.p[3] > 0.65f, "p0 %.3f p3 %.3f after 3 full acceptances", f.p[0], f.p[3]);
  CHECKF(di_spec_plan(&f, &c, &dm, &fb) >= 3, "k %d after 3 full acceptances", di_spec_plan(&f, &c, &dm, &fb));
  for (int i = 0; i < 10; i++) di_spec_observe(&f, 3, 0);
  CHECK(di_spec_expected(&f, 1) < 0.05); /* ... and a collapse still shows at once */
  /* A lone request's steps differ by a draft token or two: a load that grows
   * 2% per step meanwhile is no slope to fit alone; the ridge towards the
   * prior keeps the fixed part (10 ms, 1 ms per token, times the load) from
   * being extrapolated to nothing (without it: c0 = c1 = 2.7 ms, where no draft
   * costing more than the fixed part could ever pay; with it 8.3 / 1.8 ms). */
  di_spec_cost drift = {0};
  double load = 1;
  for (int i = 0; i < 16; i++, load *= 1.02) {
    int n = i < 10 ? 5 + i % 2 : 6 + i % 2;
    di_spec_cost_add(&drift, n, load * (0.010 + 0.001 * n));
  }
  CHECKF(drift.c0 > 3 * drift.c1 && drift.c0 > 0.006, "fit under a growing load: c0 %g c1 %g", drift.c0, drift.c1);
}

/* Unverified probes (the MTP drafter): a sequence starts backed off with a
 * probe due; a probe drafts no row but keeps its token (a shadow) for the
 * step's sampled token to judge; a miss backs off at once, the spacing
 * growing 4x while nothing was ever accepted (8, 32, 128 steps) and 2x after;
 * a match turns speculation on at the next plan, as a verified probe does. */
static void test_tuner_shadow(void) {
  di_spec_cost c = {0};
  for (int i = 0; i < 40; i++) di_spec_cost_add(&c, 1 + i % 5, 0.010 + 0.001 * (1 + i % 5));
  di_spec_seq s = {0};
  bool fb = false;
  di_spec_plan_in in = {.k_avail = 1, .emit = 1, .tokens = 1, .step = 5, .unverified = true};
  CHECK(di_spec_active(&s, 5));
  CHECK(di_spec_plan(&s, &c, &in, &fb) == 0 && !fb && s.off && s.probing && s.shadow);
  uint64_t step = 6, gaps[3];
  for (int i = 0; i < 3; i++) { /* never right */
    di_spec_shadow_seen(&s, false, step);
    CHECK(!s.shadow && !s.probing && s.off);
    gaps[i] = s.probe_at - step;
    step = s.probe_at;
    CHECK(!di_spec_active(&s, step - 1) && di_spec_active(&s, step));
    in.step = step++;
    CHECK(di_spec_plan(&s, &c, &in, &fb) == 0 && s.shadow && !fb);
  }
  CHECKF(gaps[0] == 8 && gaps[1] == 32 && gaps[2] == 128, "probe spacing %llu %llu %llu",
         (unsigned long long)gaps[0], (unsigned long long)gaps[1], (unsigned long long)gaps[2]);
  di_spec_shadow_seen(&s, true, step); /* right at last: on from the next plan */
  CHECK(!s.shadow && s.probing && s.hit && di_spec_active(&s, step));
  in.step = step++;
  CHECK(di_spec_plan(&s, &c, &in, &fb) == 1 && !s.off && !s.shadow);
  for (int i = 0; i < 8 && !s.off; i++, step++) { /* wrong again: a fallback, then spacing doubling */
    di_spec_observe(&s, 1, 0);
    in.step = step;
    di_spec_plan(&s, &c, &in, &fb);
  }
  CHECK(s.off && fb);
  uint64_t gap = s.probe_at - (step - 1);
  step = s.probe_at;
  in.step = step++;
  CHECK(di_spec_plan(&s, &c, &in, &fb) == 0 && s.shadow);
  di_spec_shadow_seen(&s, false, step);
  CHECKF(s.probe_at - step == 2 * gap, "spacing %llu after %llu", (unsigned long long)(s.probe_at - step),
         (unsigned long long)gap);
  /* --spec-mode always is never a shadow */
  di_spec_seq a = {0};
  di_spec_plan_in al = {.k_avail = 2, .always = true, .emit = 1, .tokens = 1, .unverified = true};
  CHECK(di_spec_plan(&a, &c, &al, &fb) == 2 && !a.shadow);
}

/* Prefix-cache hit over blocks written by verified (and rolled back) steps:
 * a second request whose prompt is the first one's prompt + output hits the
 * cache and must continue exactly as on an engine that never speculated. */
static void test_prefix_after_rollback(void) {
  cfg c = {.spec = DI_SPEC_NGRAM, .oracle = true, .always = true, .k_max = 6, .max_seqs = 4, .at_once = 1,
           .ignore_eos = true};
  cfg off = c;
  off.spec = DI_SPEC_OFF;
  off.oracle = false;
  run(&off, ref);
  memcpy(oracle_ref, ref, sizeof ref);
  for (int pass = 0; pass < 2; pass++) {
    di_engine_opts o;
    di_engine_opts_default(&o);
    o.kv_type = DI_KV_DTYPE_F32;
    o.max_seqs = 4;
    o.block_size = 4;
    o.spec = pass ? DI_SPEC_NGRAM : DI_SPEC_OFF;
    o.spec_mode = DI_SPEC_ALWAYS;
    o.prefix_cache = pass; /* the reference computes everything */
    di_engine_backend be = fake_backend(512);
    di_engine *e = NULL;
    di_status st = {0};
    CHECKF(di_engine_create_backend(&o, &be, &e, &st) == DI_OK, "%s", st.msg);
    if (!e) return;
    e->spec.drafter = (di_drafter){.name = "oracle", .propose = oracle_propose};
    static out first[NP], second[NP];
    out *res = pass ? second : first;
    memset(res, 0, sizeof first);
    for (int i = 0; i < 8; i++) {
      int32_t p2[160];
      int n = prompt_len[i];
      memcpy(p2, prompts[i], sizeof(int32_t) * (size_t)n);
      memcpy(p2 + n, ref[i].tokens, sizeof(int32_t) * (size_t)ref[i].n);
      for (int step = 0; step < 2; step++) { /* run the original, then the longer prompt */
        di_request_params p;
        di_request_params_default(&p);
        p.prompt_ids = p2;
        p.n_prompt = (size_t)(step ? n + ref[i].n : n);
        p.max_tokens = 10;
        p.ignore_eos = 1;
        p.logprobs = 1;
        out tmp = {0};
        p.cb = on_event;
        p.user = step ? &res[i] : &tmp;
        char err[256];
        CHECKF(di_engine_submit(e, &p, NULL, err, sizeof err) == DI_OK, "%s", err);
        while (di_engine_step(e) > 0) check_accounting(e);
      }
    }
    di_engine_stats s;
    di_engine_stats_get(e, &s);
    if (pass) CHECKF(s.prefix_hit_tokens > 0, "no prefix hits (%llu)", (unsigned long long)s.prefix_hit_tokens);
    di_engine_destroy(e);
    if (pass)
      for (int i = 0; i < 8; i++)
        CHECKF(first[i].n == second[i].n && !memcmp(first[i].tokens, second[i].tokens, sizeof(int32_t) * (size_t)first[i].n) &&
                   !memcmp(first[i].logprobs, second[i].logprobs, sizeof(float) * (size_t)first[i].n),
               "prefix hit after rollback: request %d differs", i);
  }
}

/* The constraint hook: tokens = 0 (mod 7) are forbidden. Sampling masks
 * them and advances the constraint on every emitted token; a draft is cut
 * before the first forbidden token and the walk over it is rolled back. */
typedef struct fake_constraint {
  int depth, rollbacks, forbidden_seen;
} fake_constraint;
static void fc_mask(void *self, uint32_t *mask) {
  (void)self;
  for (int i = 0; i < FAKE_VOCAB; i++)
    if (i % 7) mask[i / 32] |= 1u << (i % 32);
    else mask[i / 32] &= ~(1u << (i % 32));
}
static bool fc_accept(void *self, int32_t t) {
  fake_constraint *c = self;
  if (t % 7 == 0) {
    c->forbidden_seen++;
    return false;
  }
  c->depth++;
  return true;
}
static bool fc_finished(void *self) {
  (void)self;
  return false;
}
static void fc_rollback(void *self, size_t n) {
  fake_constraint *c = self;
  c->depth -= (int)n;
  c->rollbacks++;
}

/* Requests 0..3 under the constraint, with or without speculation (oracle
 * drafts, which do propose forbidden tokens); returns the drafts verified. */
static uint64_t constrained_run(bool spec, out *res, fake_constraint *fc) {
  di_engine_opts o;
  di_engine_opts_default(&o);
  o.kv_type = DI_KV_DTYPE_F32;
  o.max_seqs = 4;
  o.block_size = 4;
  o.spec = spec ? DI_SPEC_NGRAM : DI_SPEC_OFF;
  o.spec_mode = DI_SPEC_ALWAYS;
  di_engine_backend be = fake_backend(512);
  di_engine *e = NULL;
  di_status st = {0};
  CHECKF(di_engine_create_backend(&o, &be, &e, &st) == DI_OK, "%s", st.msg);
  if (!e) return 0;
  e->spec.drafter = (di_drafter){.name = "oracle", .propose = oracle_propose};
  memset(res, 0, sizeof(out) * 4);
  memset(fc, 0, sizeof(fake_constraint) * 4);
  for (int i = 0; i < 4; i++) {
    di_request_params p;
    di_request_params_default(&p);
    p.prompt_ids = prompts[i];
    p.n_prompt = (size_t)prompt_len[i];
    p.max_tokens = GEN - i % 4;
    p.ignore_eos = 1;
    p.logprobs = 1;
    p.cb = on_event;
    p.user = &res[i];
    di_constraint c = {&fc[i], fc_mask, fc_accept, fc_finished, fc_rollback};
    char err[256];
    CHECKF(di_engine_submit_constrained(e, &p, &c, NULL, err, sizeof err) == DI_OK, "%s", err);
  }
  while (di_engine_step(e) > 0) {
  }
  di_engine_stats s;
  di_engine_stats_get(e, &s);
  di_engine_destroy(e);
  /* the time in the constraint's calls is counted, and is part of the engine's */
  CHECKF(s.constraint_seconds > 0 && s.constraint_seconds <= s.step_seconds + s.sched_seconds,
         "constraint %.6f s of step %.6f + scheduling %.6f s", s.constraint_seconds, s.step_seconds, s.sched_seconds);
  for (int i = 0; i < 4; i++) {
    CHECKF(fc[i].depth == res[i].n, "constraint state %d after %d emitted tokens", fc[i].depth, res[i].n);
    for (int t = 0; t < res[i].n; t++) CHECK(res[i].tokens[t] % 7 != 0);
  }
  return s.spec_drafted;
}

static void test_constraint_hook(void) {
  cfg off = {.max_seqs = 4, .at_once = 4, .temp = 0, .rep = 1, .ignore_eos = true};
  run(&off, ref); /* unconstrained: the oracle proposes these, forbidden tokens included */
  CHECK(last_stats.constraint_seconds == 0);
  memcpy(oracle_ref, ref, sizeof ref);
  static out plain[4], spec[4];
  fake_constraint fa[4], fb[4];
  constrained_run(false, plain, fa);
  uint64_t drafts = constrained_run(true, spec, fb);
  int rollbacks = 0, forbidden = 0;
  for (int i = 0; i < 4; i++) {
    rollbacks += fb[i].rollbacks, forbidden += fb[i].forbidden_seen;
    CHECKF(plain[i].n == spec[i].n && !memcmp(plain[i].tokens, spec[i].tokens, sizeof(int32_t) * (size_t)plain[i].n) &&
               !memcmp(plain[i].logprobs, spec[i].logprobs, sizeof(float) * (size_t)plain[i].n),
           "constrained request %d differs with speculation", i);
  }
  CHECKF(drafts > 0 && rollbacks > 0 && forbidden > 0, "drafts %llu rollbacks %d forbidden %d",
         (unsigned long long)drafts, rollbacks, forbidden);
}

static void test_bad_opts(void) {
  di_engine_opts o;
  di_engine_opts_default(&o);
  di_engine_backend be = fake_backend(64);
  di_engine *e = NULL;
  di_status st = {0};
  o.spec = DI_SPEC_NGRAM;
  o.spec_k_max = DI_SPEC_K_LIMIT + 1;
  CHECK(di_engine_create_backend(&o, &be, &e, &st) == DI_ERR_INVALID && !e && strstr(st.msg, "spec_k_max"));
  di_status_clear(&st);
  o.spec_k_max = 0;
  o.spec = DI_SPEC_MTP;
  CHECK(di_engine_create_backend(&o, &be, &e, &st) == DI_ERR_UNSUPPORTED && !e && strstr(st.msg, "MTP"));
  di_status_clear(&st);
  o.spec = DI_SPEC_DRAFT; /* without a draft model */
  CHECK(di_engine_create_backend(&o, &be, &e, &st) == DI_ERR_INVALID && !e && strstr(st.msg, "--draft-model"));
  di_status_clear(&st);
  di_engine_backend draft = fake_backend(64);
  o.spec = DI_SPEC_NGRAM; /* a draft model without --spec draft */
  CHECK(di_engine_create_spec(&o, &be, &draft, &e, &st) == DI_ERR_INVALID && !e && strstr(st.msg, "--spec draft"));
  di_status_clear(&st);
  o.spec = DI_SPEC_DRAFT;
  draft.n_vocab = FAKE_VOCAB + 1; /* no tokenizers: the vocabulary widths must agree */
  CHECK(di_engine_create_spec(&o, &be, &draft, &e, &st) == DI_ERR_INVALID && !e && strstr(st.msg, "vocabulary"));
  di_status_clear(&st);
  draft.n_vocab = FAKE_VOCAB;
  o.kv_mem = 3 * di_kv_block_bytes(16, 1, 2, DI_KV_DTYPE_F16); /* the draft's half is under two blocks */
  CHECK(di_engine_create_spec(&o, &be, &draft, &e, &st) == DI_ERR_RANGE && !e && strstr(st.msg, "--kv-mem"));
}

int main(void) {
  test_ngram();
  test_tuner();
  test_tuner_shadow();
  test_bad_opts();
  make_prompts();
  cfg greedy = {.max_seqs = 1, .at_once = 1, .temp = 0, .rep = 1, .k_max = 4};
  equivalence(greedy, "greedy alone");
  cfg sampled = {.max_seqs = 1, .at_once = 1, .temp = 0.8f, .rep = 1.3f, .k_max = 4};
  equivalence(sampled, "sampled alone");
  cfg batch = {.max_seqs = 16, .at_once = 16, .temp = 0.8f, .rep = 1.3f, .mix_off = true, .stops = true};
  equivalence(batch, "batch of 16, mixed, stop strings");
  cfg greedy_batch = {.max_seqs = 16, .at_once = 16, .temp = 0, .rep = 1, .mix_off = true, .logits = false};
  equivalence(greedy_batch, "greedy batch of 16, mixed");
  /* 24 blocks of 4 positions for 16 sequences of up to ~50: preemption */
  cfg pressure = {.max_seqs = 16, .at_once = 16, .temp = 0.8f, .rep = 1.3f, .kv_mem = 24 * di_kv_block_bytes(4, 1, 2, DI_KV_DTYPE_F32),
                  .ignore_eos = true};
  equivalence(pressure, "KV pressure");
  CHECKF(last_stats.preemptions > 0, "no preemption under pressure (%llu)", (unsigned long long)last_stats.preemptions);
  cfg logits = {.max_seqs = 4, .at_once = 4, .temp = 0.8f, .rep = 1.1f, .logits = true, .ignore_eos = true};
  equivalence(logits, "logits callback");
  cfg mixed = {.max_seqs = 8, .at_once = 8, .temp = 0, .rep = 1, .window = 6, .mixed = 2, .ignore_eos = true};
  equivalence(mixed, "sliding-window tables");
  test_prefix_after_rollback();
  test_constraint_hook();
  return di_test_finish("test_spec");
}
