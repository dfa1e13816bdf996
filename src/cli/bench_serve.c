/* deepinfer bench --concurrency N: a closed-loop serving benchmark. R random
 * prompts of P tokens (optionally sharing a prefix) each generate exactly G
 * tokens (greedy, EOS ignored) with N requests in flight. Reports aggregate
 * output tokens/s, TTFT and time-per-output-token percentiles, prefix-cache
 * hit rate, preemptions and scheduler overhead. With --json-schema / --grammar /
 * --regex every request is constrained (its own matcher of one compiled
 * grammar), so a run with and one without give the constraint's cost. */
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
    "      --json               one JSON object on stdout\n" DI_CLI_ENGINE_OPTS_HELP
    "  -h, --help               this help\n";

typedef struct bench_req {
  double t_submit, t_first, t_last;
  int n_tokens;
  int cached;
  bool done;
  int *n_done;
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

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(const double *v, int n, double p) {
  if (n == 0) return 0;
  int i = (int)ceil(p / 100.0 * n) - 1;
  return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

int di_cmd_bench_serve(int argc, char **argv) {
  di_engine_opts o;
  di_engine_opts_default(&o);
  o.max_seqs = 0; /* 0 after parsing = not given: follows --concurrency */
  long long conc = 0, n_req = 0, plen = 128, glen = 128, shared = 0, seed = 1;
  bool json = false;
  const char *schema_path = NULL, *gbnf_path = NULL, *regex = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int r = di_cli_engine_opt("bench", argc, argv, &i, &o);
    if (r == 2) return 2;
    if (r == 1) continue;
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    long long *dst = !strcmp(a, "--concurrency")    ? &conc
                     : !strcmp(a, "--requests")      ? &n_req
                     : !strcmp(a, "--prompt-len")    ? &plen
                     : !strcmp(a, "--gen-len")       ? &glen
                     : !strcmp(a, "--shared-prefix") ? &shared
                     : !strcmp(a, "--seed")          ? &seed
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
  if (n_req == 0) n_req = 4 * conc;
  if (!o.max_seqs) o.max_seqs = (int)conc;
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
  int32_t *ids = malloc((size_t)plen * sizeof *ids);
  bench_req *reqs = calloc((size_t)n_req, sizeof *reqs);
  uint64_t rng = (uint64_t)seed * 0x9E3779B97F4A7C15ull + 1;
  int n_done = 0, next = 0;
  double t0 = now_s(), c0 = cpu_s();
  while (n_done < n_req) {
    while (next < n_req && next - n_done < conc) {
      for (int k = 0; k < plen; k++) {
        uint64_t x = k < shared ? (uint64_t)k * 2654435761u + (uint64_t)seed : (rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 33;
        ids[k] = (int32_t)(V > 512 ? 256 + x % (uint64_t)(V - 256) : 3 + x % (uint64_t)(V - 3));
      }
      di_request_params p;
      di_request_params_default(&p);
      p.prompt_ids = ids;
      p.n_prompt = (size_t)plen;
      p.max_tokens = (int)glen;
      p.ignore_eos = 1;
      p.cb = on_event;
      p.user = &reqs[next];
      reqs[next].n_done = &n_done;
      di_status st = {0};
      if (grammar && di_gmatcher_new(grammar, &reqs[next].gm, &st) != DI_OK)
        snprintf(err, sizeof err, "%s", st.msg);
      reqs[next].t_submit = now_s();
      if ((grammar && !reqs[next].gm) || di_srv_submit_matcher(e, &p, reqs[next].gm, NULL, err, sizeof err) != DI_OK) {
        di_engine_destroy(e);
        for (int k = 0; k <= next; k++) di_gmatcher_free(reqs[k].gm);
        di_grammar_release(grammar);
        free(ids);
        free(reqs);
        return di_cli_fail("bench", "%s", err);
      }
      next++;
    }
    di_engine_step(e);
  }
  double wall = now_s() - t0, cpu = cpu_s() - c0;
  di_engine_stats s;
  di_engine_stats_get(e, &s);
  double *ttft = malloc((size_t)n_req * sizeof *ttft), *tpot = malloc((size_t)n_req * sizeof *tpot);
  long long toks = 0;
  int n_tpot = 0;
  for (int i = 0; i < n_req; i++) {
    ttft[i] = reqs[i].t_first - reqs[i].t_submit;
    toks += reqs[i].n_tokens;
    if (reqs[i].n_tokens > 1) tpot[n_tpot++] = (reqs[i].t_last - reqs[i].t_first) / (reqs[i].n_tokens - 1);
  }
  qsort(ttft, (size_t)n_req, sizeof *ttft, cmp_double);
  qsort(tpot, (size_t)n_tpot, sizeof *tpot, cmp_double);
  double hit = s.prefix_query_tokens ? (double)s.prefix_hit_tokens / (double)s.prefix_query_tokens : 0;
  double busy = s.step_seconds + s.sched_seconds;
  double sched_frac = busy > 0 ? s.sched_seconds / busy : 0;
  if (json) {
    printf("{\"model\": \"%s\", \"concurrency\": %lld, \"requests\": %lld, \"prompt_len\": %lld, \"gen_len\": %lld, "
           "\"threads\": %d, \"seconds\": %.3f, \"output_tokens\": %lld, \"output_tok_s\": %.2f, "
           "\"ttft_p50\": %.4f, \"ttft_p90\": %.4f, \"ttft_p99\": %.4f, \"tpot_p50\": %.5f, \"tpot_p90\": %.5f, "
           "\"tpot_p99\": %.5f, \"prefix_hit_rate\": %.4f, \"preemptions\": %llu, \"steps\": %llu, "
           "\"sched_fraction\": %.5f, \"kv_blocks_total\": %d, \"kv_blocks_high_water\": %d, \"cpu_seconds\": %.3f, "
           "\"output_tok_per_cpu_s\": %.3f, \"constrained\": %s, \"constraint_seconds\": %.6f, "
           "\"constraint_fraction\": %.6f}\n",
           o.model_path, conc, n_req, plen, glen, o.threads, wall, toks, toks / wall, pct(ttft, n_req, 50),
           pct(ttft, n_req, 90), pct(ttft, n_req, 99), pct(tpot, n_tpot, 50), pct(tpot, n_tpot, 90),
           pct(tpot, n_tpot, 99), hit, (unsigned long long)s.preemptions, (unsigned long long)s.steps, sched_frac,
           s.kv_blocks_total, s.kv_blocks_high_water, cpu, toks / cpu, grammar ? "true" : "false",
           s.constraint_seconds, busy > 0 ? s.constraint_seconds / busy : 0);
  } else {
    printf("model        %s\n", o.model_path);
    printf("load         %lld requests, %lld in flight, prompt %lld (shared %lld), gen %lld\n", n_req, conc, plen,
           shared, glen);
    printf("throughput   %.1f output tok/s (%lld tokens in %.2f s, %llu steps)\n", toks / wall, toks, wall,
           (unsigned long long)s.steps);
    printf("TTFT         p50 %.1f ms  p90 %.1f ms  p99 %.1f ms\n", 1e3 * pct(ttft, n_req, 50), 1e3 * pct(ttft, n_req, 90),
           1e3 * pct(ttft, n_req, 99));
    printf("TPOT         p50 %.2f ms  p90 %.2f ms  p99 %.2f ms\n", 1e3 * pct(tpot, n_tpot, 50),
           1e3 * pct(tpot, n_tpot, 90), 1e3 * pct(tpot, n_tpot, 99));
    printf("prefix cache %.1f%% of prompt tokens hit\n", 100 * hit);
    printf("CPU          %.2f s, %.2f output tokens per CPU-second\n", cpu, toks / cpu);
    printf("preemptions  %llu\n", (unsigned long long)s.preemptions);
    printf("KV blocks    %d total, %d high water (block %d)\n", s.kv_blocks_total, s.kv_blocks_high_water, s.kv_block_size);
    printf("scheduler    %.3f%% of step time\n", 100 * sched_frac);
    if (grammar) printf("constraint   %.3f%% of step time (masks, accepts)\n", busy > 0 ? 100 * s.constraint_seconds / busy : 0);
  }
  free(ttft);
  free(tpot);
  free(ids);
  di_engine_destroy(e);
  for (int i = 0; i < n_req; i++) di_gmatcher_free(reqs[i].gm);
  free(reqs);
  di_grammar_release(grammar);
  return 0;
}
