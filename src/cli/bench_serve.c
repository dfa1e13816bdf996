/* deepinfer bench --concurrency N: a closed-loop serving benchmark. R random
 * prompts of P tokens (optionally sharing a prefix) each generate exactly G
 * tokens (greedy, EOS ignored) with N requests in flight. Reports aggregate
 * output tokens/s, TTFT and time-per-output-token percentiles, prefix-cache
 * hit rate, preemptions and scheduler overhead. With --json-schema / --grammar /
 * --regex every request is constrained (its own matcher of one compiled
 * grammar), so a run with and one without give the constraint's cost.
 * --vs-concurrency B --rounds K alternates runs at N and at B streams in one
 * process (one load, the same weights in memory), K rounds, and reports each
 * round's decode rate ratio and the medians: one pair of runs on a shared host
 * swings by more than the differences it is meant to show. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli/args.h"
#include "cli/bench_serve.h"
#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "server/engine_backend.h"

static const char *usage =
    "usage: deepinfer bench -m MODEL --concurrency N [--requests R] [--prompt-len P] [--gen-len G] [options]\n"
    "\n"
    "Serving benchmark: R requests of P random prompt tokens, each generating G\n"
    "tokens (greedy, EOS ignored), N in flight at once.\n"
    "\n"
    "      --concurrency N      requests in flight (also the engine's max-seqs)\n"
    "      --requests R         total requests (default 4 x N)\n"
    "      --prompt-len P       prompt tokens (default 128)\n"
    "      --gen-len G          generated tokens per request (default 128)\n"
    "      --shared-prefix L    the first L prompt tokens are the same for all requests\n"
    "      --seed S             prompt generator seed (default 1)\n"
    "      --json-schema FILE   constrain every request to JSON valid under this schema\n"
    "      --grammar FILE       ... to this GBNF grammar (root rule \"root\")\n"
    "      --regex RE           ... to match RE as a whole\n"
    "                           (a constrained request ends when its grammar is complete)\n"
    "      --vs-concurrency B   also run B streams, alternated with N, and report the\n"
    "                           aggregate decode rate at N over B's (TPOT p50 based)\n"
    "      --rounds K           rounds of the alternation (default 5; with --vs-concurrency)\n"
    "                           (with --vs-concurrency, --requests R means R/N per stream,\n"
    "                           default 1: each phase runs its streams' requests once)\n"
    "      --json               one JSON object on stdout\n" DI_CLI_ENGINE_OPTS_HELP
    "  -h, --help               this help\n";

typedef struct bench_req {
  double t_submit, t_first, t_last;
  int n_tokens;
  int cached;
  bool done;
  int *n_done;
  uint64_t id;
  di_gmatcher *gm;
} bench_req;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU seconds of this process: on a shared machine wall time swings with
 * other load, CPU time per token much less. */
static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static void on_event(const di_event *ev, void *user) {
  bench_req *r = user;
  double t = now_s();
  if (ev->token >= 0) {
    if (r->n_tokens == 0) r->t_first = t;
    r->t_last = t;
    r->n_tokens++;
  }
  if (ev->finish != DI_FINISH_NONE) {
    r->done = true;
    r->cached = ev->cached_tokens;
    (*r->n_done)++;
  }
}

/* One closed-loop run's figures (engine counters as deltas over the run). */
typedef struct phase_res {
  double wall, cpu, ttft[3], tpot[3]; /* percentiles 50 / 90 / 99 */
  long long toks;
  unsigned long long steps, preemptions;
  double hit, sched_frac, constraint_s, constraint_frac;
  int kv_total, kv_high, kv_block; /* the KV pool after the run */
} phase_res;

typedef struct phase_cfg {
  di_engine *e;
  di_grammar *grammar;
  const char *model;
  long long conc, n_req, plen, glen, shared, seed;
  int V;
} phase_cfg;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(const double *v, int n, double p) {
  if (n == 0) return 0;
  int i = (int)ceil(p / 100.0 * n) - 1;
  return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static void free_reqs(bench_req *reqs, int n) {
  for (int k = 0; k < n; k++) di_gmatcher_free(reqs[k].gm);
  free(reqs);
}

/* n_req requests, conc in flight, until all finish; the prompts continue the
 * generator *rng, so a later run's prompts are new ones (no prefix hits
 * beyond --shared-prefix). Returns false with err set when a submit fails,
 * after the requests already in flight were cancelled and have ended (their
 * events point into this run's buffers). */
static bool run_phase(const phase_cfg *c, uint64_t *rng, phase_res *r, char *err, size_t errn) {
  const long long n_req = c->n_req, conc = c->conc, plen = c->plen;
  int32_t *ids = malloc((size_t)plen * sizeof *ids);
  bench_req *reqs = calloc((size_t)n_req, sizeof *reqs);
  double *ttft = malloc((size_t)n_req * sizeof *ttft), *tpot = malloc((size_t)n_req * sizeof *tpot);
  bool ok = ids && reqs && ttft && tpot;
  if (!ok) snprintf(err, errn, "out of memory");
  di_engine_stats s0, s;
  di_engine_stats_get(c->e, &s0);
  int n_done = 0, next = 0;
  double t0 = now_s(), c0 = cpu_s();
  while (ok && n_done < n_req) {
    while (next < n_req && next - n_done < conc) {
      for (int k = 0; k < plen; k++) {
        uint64_t x = k < c->shared ? (uint64_t)k * 2654435761u + (uint64_t)c->seed
                                   : (*rng = *rng * 6364136223846793005ull + 1442695040888963407ull) >> 33;
        ids[k] = (int32_t)(c->V > 512 ? 256 + x % (uint64_t)(c->V - 256) : 3 + x % (uint64_t)(c->V - 3));
      }
      di_request_params p;
      di_request_params_default(&p);
      p.prompt_ids = ids;
      p.n_prompt = (size_t)plen;
      p.max_tokens = (int)c->glen;
      p.ignore_eos = 1;
      p.cb = on_event;
      p.user = &reqs[next];
      reqs[next].n_done = &n_done;
      di_status st = {0};
      if (c->grammar && di_gmatcher_new(c->grammar, &reqs[next].gm, &st) != DI_OK) snprintf(err, errn, "%s", st.msg);
      reqs[next].t_submit = now_s();
      next++;
      if ((c->grammar && !reqs[next - 1].gm) ||
          di_srv_submit_matcher(c->e, &p, reqs[next - 1].gm, &reqs[next - 1].id, err, errn) != DI_OK) {
        ok = false;
        break;
      }
    }
    if (ok) di_engine_step(c->e);
  }
  if (!ok && reqs) {
    const int live = next - 1; /* the last one was not submitted */
    for (int k = 0; k < live; k++)
      if (!reqs[k].done) di_engine_cancel(c->e, reqs[k].id);
    while (n_done < live) di_engine_step(c->e);
  }
  if (ok) {
    r->wall = now_s() - t0, r->cpu = cpu_s() - c0;
    di_engine_stats_get(c->e, &s);
    r->toks = 0;
    int n_tpot = 0;
    for (int i = 0; i < n_req; i++) {
      ttft[i] = reqs[i].t_first - reqs[i].t_submit;
      r->toks += reqs[i].n_tokens;
      if (reqs[i].n_tokens > 1) tpot[n_tpot++] = (reqs[i].t_last - reqs[i].t_first) / (reqs[i].n_tokens - 1);
    }
    qsort(ttft, (size_t)n_req, sizeof *ttft, cmp_double);
    qsort(tpot, (size_t)n_tpot, sizeof *tpot, cmp_double);
    static const double ps[3] = {50, 90, 99};
    for (int k = 0; k < 3; k++) r->ttft[k] = pct(ttft, (int)n_req, ps[k]), r->tpot[k] = pct(tpot, n_tpot, ps[k]);
    r->steps = s.steps - s0.steps;
    r->preemptions = s.preemptions - s0.preemptions;
    unsigned long long q = s.prefix_query_tokens - s0.prefix_query_tokens;
    r->hit = q ? (double)(s.prefix_hit_tokens - s0.prefix_hit_tokens) / (double)q : 0;
    double busy = s.step_seconds - s0.step_seconds + s.sched_seconds - s0.sched_seconds;
    r->sched_frac = busy > 0 ? (s.sched_seconds - s0.sched_seconds) / busy : 0;
    r->constraint_s = s.constraint_seconds - s0.constraint_seconds;
    r->constraint_frac = busy > 0 ? r->constraint_s / busy : 0;
    r->kv_total = s.kv_blocks_total, r->kv_high = s.kv_blocks_high_water, r->kv_block = s.kv_block_size;
  }
  free(ttft);
  free(tpot);
  free(ids);
  if (reqs) free_reqs(reqs, next);
  return ok;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Aggregate decode rate at a streams over b streams from their TPOTs. */
static double rate_ratio(long long a, double tpot_a, long long b, double tpot_b) {
  return tpot_a > 0 && tpot_b > 0 ? ((double)a / tpot_a) / ((double)b / tpot_b) : 0;
}

/* --vs-concurrency: a warm-up run at N, then K rounds of B and N alternated
 * (B first in odd rounds, so neither always follows the other). */
static int compare(phase_cfg *c, long long vs, long long rounds, bool json, uint64_t *rng) {
  const long long conc = c->conc, per = c->n_req / c->conc;
  double *t1 = calloc((size_t)rounds * 3, sizeof *t1), *t2 = t1 + rounds, *ratio = t1 + 2 * rounds;
  char err[512];
  if (!t1) return di_cli_fail("bench", "out of memory");
  phase_res r;
  c->n_req = per * conc; /* warm-up, not counted: first-use allocations and page faults */
  if (!run_phase(c, rng, &r, err, sizeof err)) {
    free(t1);
    return di_cli_fail("bench", "%s", err);
  }
  if (!json)
    printf("model        %s%s\nround        TPOT p50 at %lld / %lld streams, aggregate decode rate ratio\n", c->model,
           c->grammar ? " (constrained)" : "", vs, conc);
  for (long long k = 0; k < rounds; k++) {
    for (int j = 0; j < 2; j++) {
      const bool base = (j == 0) == (k % 2 == 0);
      c->conc = base ? vs : conc, c->n_req = per * c->conc;
      if (!run_phase(c, rng, &r, err, sizeof err)) {
        free(t1);
        return di_cli_fail("bench", "%s", err);
      }
      (base ? t1 : t2)[k] = r.tpot[0];
    }
    ratio[k] = rate_ratio(conc, t2[k], vs, t1[k]);
    if (!json) printf("%-12lld %.2f / %.2f ms  %.2fx\n", k + 1, 1e3 * t1[k], 1e3 * t2[k], ratio[k]);
  }
  if (json) {
    printf("{\"model\": \"%s\", \"concurrency\": %lld, \"vs_concurrency\": %lld, \"rounds\": %lld, \"tpot_p50\": [",
           c->model, conc, vs, rounds);
    for (long long k = 0; k < rounds; k++) printf("%s%.7f", k ? ", " : "", t2[k]);
    printf("], \"vs_tpot_p50\": [");
    for (long long k = 0; k < rounds; k++) printf("%s%.7f", k ? ", " : "", t1[k]);
    printf("], \"ratio\": [");
    for (long long k = 0; k < rounds; k++) printf("%s%.4f", k ? ", " : "", ratio[k]);
  }
  const double m1 = median(t1, (int)rounds), m2 = median(t2, (int)rounds), mr = median(ratio, (int)rounds);
  if (json)
    printf("], \"tpot_median\": %.7f, \"vs_tpot_median\": %.7f, \"ratio_of_medians\": %.4f, \"median_ratio\": %.4f}\n",
           m2, m1, rate_ratio(conc, m2, vs, m1), mr);
  else
    printf("median       %.2f / %.2f ms  %.2fx (median of the rounds' ratios %.2fx)\n", 1e3 * m1, 1e3 * m2,
           rate_ratio(conc, m2, vs, m1), mr);
  free(t1);
  return 0;
}

int di_cmd_bench_serve(int argc, char **argv) {
  di_engine_opts o;
  di_engine_opts_default(&o);
  o.max_seqs = 0; /* 0 after parsing = not given: follows --concurrency */
  long long conc = 0, n_req = 0, plen = 128, glen = 128, shared = 0, seed = 1, vs = 0, rounds = 5;
  bool json = false;
  const char *schema_path = NULL, *gbnf_path = NULL, *regex = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int r = di_cli_engine_opt("bench", argc, argv, &i, &o);
    if (r == 2) return 2;
    if (r == 1) continue;
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    long long *dst = !strcmp(a, "--concurrency")     ? &conc
                     : !strcmp(a, "--requests")       ? &n_req
                     : !strcmp(a, "--prompt-len")     ? &plen
                     : !strcmp(a, "--gen-len")        ? &glen
                     : !strcmp(a, "--shared-prefix")  ? &shared
                     : !strcmp(a, "--seed")           ? &seed
                     : !strcmp(a, "--vs-concurrency") ? &vs
                     : !strcmp(a, "--rounds")         ? &rounds
                                                      : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strcmp(a, "--json")) {
      json = true;
    } else if (!strcmp(a, "--json-schema") || !strcmp(a, "--grammar") || !strcmp(a, "--regex")) {
      if (!v) return di_cli_fail("bench", "%s needs a value", a);
      *(a[2] == 'j' ? &schema_path : a[2] == 'g' ? &gbnf_path : &regex) = v;
      i++;
    } else if (dst) {
      if (!v || !di_arg_int(v, 0, 1 << 24, dst)) return di_cli_fail("bench", "%s needs a count", a);
      i++;
    } else {
      return di_cli_fail("bench", "unknown option '%s' (see --help)", a);
    }
  }
  if (!o.model_path) return di_cli_fail("bench", "missing -m MODEL (see --help)");
  if (conc < 1) return di_cli_fail("bench", "--concurrency must be >= 1");
  if (plen < 1 || glen < 1) return di_cli_fail("bench", "--prompt-len and --gen-len must be >= 1");
  if (shared > plen) return di_cli_fail("bench", "--shared-prefix exceeds --prompt-len");
  if (!!schema_path + !!gbnf_path + !!regex > 1)
    return di_cli_fail("bench", "give at most one of --json-schema, --grammar, --regex");
  if (vs && rounds < 1) return di_cli_fail("bench", "--rounds must be >= 1");
  if (vs && glen < 2) return di_cli_fail("bench", "--vs-concurrency needs --gen-len >= 2 (it compares TPOT)");
  if (n_req == 0) n_req = vs ? conc : 4 * conc;
  if (vs && n_req % conc) return di_cli_fail("bench", "with --vs-concurrency, --requests must be a multiple of --concurrency");
  if (!o.max_seqs) o.max_seqs = (int)(vs > conc ? vs : conc);
  char err[512];
  di_engine *e = NULL;
  if (di_engine_create(&o, &e, err, sizeof err) != DI_OK) return di_cli_fail("bench", "%s", err);
  di_grammar *grammar = NULL;
  const di_grammar_opts gopts = {.ws = DI_JSON_WS_FREE};
  if ((schema_path || gbnf_path || regex) &&
      di_cli_load_grammar("bench", e, schema_path, gbnf_path, regex, &gopts, &grammar, NULL)) {
    di_engine_destroy(e);
    return 2;
  }
  int V = di_engine_n_vocab(e);
  if (plen + glen > di_engine_ctx(e)) {
    di_engine_destroy(e);
    di_grammar_release(grammar);
    return di_cli_fail("bench", "prompt-len + gen-len exceeds the context (%d)", di_engine_ctx(e));
  }
  /* Random ids away from the low (usually special/byte) range. */
  uint64_t rng = (uint64_t)seed * 0x9E3779B97F4A7C15ull + 1;
  phase_cfg c = {e, grammar, o.model_path, conc, n_req, plen, glen, shared, seed, V};
  int rc = 0;
  phase_res r;
  if (vs) {
    rc = compare(&c, vs, rounds, json, &rng);
  } else if (!run_phase(&c, &rng, &r, err, sizeof err)) {
    rc = di_cli_fail("bench", "%s", err);
  } else if (json) {
    printf("{\"model\": \"%s\", \"concurrency\": %lld, \"requests\": %lld, \"prompt_len\": %lld, \"gen_len\": %lld, "
           "\"threads\": %d, \"seconds\": %.3f, \"output_tokens\": %lld, \"output_tok_s\": %.2f, "
           "\"ttft_p50\": %.4f, \"ttft_p90\": %.4f, \"ttft_p99\": %.4f, \"tpot_p50\": %.5f, \"tpot_p90\": %.5f, "
           "\"tpot_p99\": %.5f, \"prefix_hit_rate\": %.4f, \"preemptions\": %llu, \"steps\": %llu, "
           "\"sched_fraction\": %.5f, \"kv_blocks_total\": %d, \"kv_blocks_high_water\": %d, \"cpu_seconds\": %.3f, "
           "\"output_tok_per_cpu_s\": %.3f, \"constrained\": %s, \"constraint_seconds\": %.6f, "
           "\"constraint_fraction\": %.6f}\n",
           o.model_path, conc, n_req, plen, glen, o.threads, r.wall, r.toks, r.toks / r.wall, r.ttft[0], r.ttft[1],
           r.ttft[2], r.tpot[0], r.tpot[1], r.tpot[2], r.hit, r.preemptions, r.steps, r.sched_frac,
           r.kv_total, r.kv_high, r.cpu, r.toks / r.cpu, grammar ? "true" : "false", r.constraint_s,
           r.constraint_frac);
  } else {
    printf("model        %s\n", o.model_path);
    printf("load         %lld requests, %lld in flight, prompt %lld (shared %lld), gen %lld\n", n_req, conc, plen,
           shared, glen);
    printf("throughput   %.1f output tok/s (%lld tokens in %.2f s, %llu steps)\n", r.toks / r.wall, r.toks, r.wall,
           r.steps);
    printf("TTFT         p50 %.1f ms  p90 %.1f ms  p99 %.1f ms\n", 1e3 * r.ttft[0], 1e3 * r.ttft[1], 1e3 * r.ttft[2]);
    printf("TPOT         p50 %.2f ms  p90 %.2f ms  p99 %.2f ms\n", 1e3 * r.tpot[0], 1e3 * r.tpot[1], 1e3 * r.tpot[2]);
    printf("prefix cache %.1f%% of prompt tokens hit\n", 100 * r.hit);
    printf("CPU          %.2f s, %.2f output tokens per CPU-second\n", r.cpu, r.toks / r.cpu);
    printf("preemptions  %llu\n", r.preemptions);
    printf("KV blocks    %d total, %d high water (block %d)\n", r.kv_total, r.kv_high, r.kv_block);
    printf("scheduler    %.3f%% of step time\n", 100 * r.sched_frac);
    if (grammar) printf("constraint   %.3f%% of step time (masks, accepts)\n", 100 * r.constraint_frac);
  }
  di_engine_destroy(e);
  di_grammar_release(grammar);
  return rc;
}
