/* deepinfer bench: single-sequence prompt processing and generation speed
 * through the engine (one sequence, prefix cache off), plus the share of the machine's measured read bandwidth that generation
 * reaches (decode streams every weight once per token), and the share of the
 * int8 / f32 compute peak that prefill's matmuls reach. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/isa.h"
#include "backend/cpu/membw.h"
#include "backend/cpu/peak.h"
#include "cli/args.h"
#include "cli/bench_serve.h"
#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "dist/comm.h"
#include "engine/engine_internal.h"
#include "engine/engine_model.h"
#include "model/model.h"
#include "util/threadpool.h"

static const char *usage =
    "usage: deepinfer bench -m MODEL [-p 512] [-n 128] [--threads N] [--json] [options]\n"
    "\n"
    "Measures prompt processing (pp, tokens/s over a P-token prompt) and generation\n"
    "(tg, tokens/s over N tokens), median of --reps runs, and the fraction of the\n"
    "machine's read bandwidth that generation reaches and of its compute peak that\n"
    "prefill's matmuls reach (both limits measured here, before each repetition;\n"
    "the highest of them is the limit).\n"
    "\n"
    "  -m, --model PATH     GGUF file or Hugging Face directory (required)\n"
    "  -p, --n-prompt P     prompt tokens (default 512; 0 skips pp)\n"
    "  -n, --n-gen N        generated tokens (default 128; 0 skips tg)\n"
    "  -d, --depth D        tokens already in the KV cache before tg (default 0)\n"
    "      --reps R         repetitions (default 3)\n"
    "      --threads N      threads (default: all cores)\n"
    "      --kv-type T      f16 (default), bf16, f32\n"
    "      --mmap           memory-map the weights instead of reading them\n"
    "      --no-bw          skip the bandwidth and compute-peak measurements\n"
    "      --json           one JSON object on stdout\n"
    "  -h, --help           this help\n"
    "\n"
    "Serving mode: deepinfer bench -m MODEL --concurrency N --requests R --prompt-len P\n"
    "--gen-len G [--json] runs R requests N at a time through the engine (see\n"
    "deepinfer bench --concurrency 1 --help).\n";

/* A token in decode reads only the n_expert_used routed experts it is sent to
 * in each MoE layer: the bytes and parameters of the others are not part of the
 * per-token work the bandwidth and compute shares are measured against. */
static void moe_idle(const di_model *m, double *bytes, double *params) {
  *bytes = *params = 0;
  const di_hparams *hp = &m->hp;
  if (hp->n_expert <= 0 || hp->n_expert_used >= hp->n_expert) return;
  const double idle = (double)(hp->n_expert - hp->n_expert_used);
  for (int il = 0; il < hp->n_layer; il++) {
    const di_layer_weights *L = &m->layers[il];
    if (!L->exp_gate) continue;
    const di_tensor *t[3] = {&L->exp_gate[0], &L->exp_up[0], &L->exp_down[0]};
    for (int k = 0; k < 3; k++) {
      *bytes += idle * (double)t[k]->row_bytes * (double)t[k]->ne[1];
      *params += idle * (double)t[k]->ne[0] * (double)t[k]->ne[1];
    }
  }
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n ? v[n / 2] : 0;
}

/* One request through the engine, timed: t_first at its first token (the
 * prompt's forward), t_end at its final event. */
typedef struct bench_run {
  double t_first, t_end;
  int n_tokens, drafted, accepted;
  char error[256];
} bench_run;

static void on_event(const di_event *ev, void *user) {
  bench_run *r = user;
  if (ev->token >= 0 && r->n_tokens++ == 0) r->t_first = now();
  if (ev->finish == DI_FINISH_NONE) return;
  r->t_end = now();
  r->drafted = ev->spec_drafted;
  r->accepted = ev->spec_accepted;
  if (ev->error) snprintf(r->error, sizeof r->error, "%s", ev->error);
}

static di_code bench_one(di_engine *e, const int32_t *ids, int n_prompt, int max_tokens, bool spec_off, bench_run *r,
                         double *t_submit) {
  di_request_params p;
  di_request_params_default(&p);
  p.prompt_ids = ids;
  p.n_prompt = (size_t)n_prompt;
  p.max_tokens = max_tokens;
  p.ignore_eos = 1;
  p.spec_off = spec_off;
  p.cb = on_event;
  p.user = r;
  memset(r, 0, sizeof *r);
  char err[256];
  *t_submit = now();
  if (di_engine_submit(e, &p, NULL, err, sizeof err) != DI_OK) {
    snprintf(r->error, sizeof r->error, "%s", err);
    return DI_ERR_INVALID;
  }
  while (di_engine_step(e) > 0) {
  }
  return r->error[0] ? DI_ERR_INTERNAL : DI_OK;
}

int di_cmd_bench(int argc, char **argv) {
  /* Serving mode (many concurrent requests through the engine) has its own runner. */
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--concurrency") || !strcmp(argv[i], "--requests")) return di_cmd_bench_serve(argc, argv);
  long long np = 512, ng = 128, depth = 0, reps = 3;
  bool json = false, no_bw = false;
  di_engine_opts eo;
  di_engine_opts_default(&eo);
  eo.max_seqs = 1;
  eo.prefix_cache = 0; /* every repetition computes its prompt */
  eo.tokenizer_optional = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    bool ok = true;
    int eng = di_cli_engine_opt("bench", argc, argv, &i, &eo);
    if (eng == 2) return 2;
    if (eng == 1) continue;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strcmp(a, "--json")) {
      json = true;
    } else if (!strcmp(a, "--mmap")) {
      eo.use_mmap = 1;
    } else if (!strcmp(a, "--no-bw")) {
      no_bw = true;
    } else if (!v) {
      return di_cli_fail("bench", "unknown option or missing value: '%s' (see --help)", a);
    } else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
      ok = di_arg_int(argv[++i], 0, 1 << 20, &np);
    } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
      ok = di_arg_int(argv[++i], 0, 1 << 20, &ng);
    } else if (!strcmp(a, "-d") || !strcmp(a, "--depth")) {
      ok = di_arg_int(argv[++i], 0, 1 << 20, &depth);
    } else if (!strcmp(a, "--reps")) {
      ok = di_arg_int(argv[++i], 1, 100, &reps);
    } else {
      return di_cli_fail("bench", "unknown option '%s' (see --help)", a);
    }
    if (!ok) return di_cli_fail("bench", "invalid value '%s' for %s", argv[i], a);
  }
  if (!eo.model_path) return di_cli_fail("bench", "missing -m MODEL (see --help)");
  const char *model = eo.model_path;
  int nthreads = eo.threads > 0 ? eo.threads : di_cpu_count();
  eo.threads = nthreads;
  /* tg needs a prompt of at least one token: depth tokens, or one */
  long long tg_prompt = depth > 0 ? depth : 1;
  long long ctx = (np > tg_prompt + ng + 1 ? np : tg_prompt + ng + 1) + 16;
  eo.ctx = (int)ctx;
  eo.max_batch_tokens = np > 0 ? (int)np : 512; /* the whole prompt in one forward */
  const bool spec = eo.spec != DI_SPEC_OFF;
  if (!json) fprintf(stderr, "loading %s ...\n", model);
  di_engine *e = NULL;
  char err[512];
  if (di_engine_create(&eo, &e, err, sizeof err) != DI_OK) return di_cli_fail("bench", "%s", err);
  const di_model *mdl = di_engine_model(e);
  const di_hparams *hp = &mdl->hp;
  int V = hp->n_vocab;
  int32_t *ids = malloc((size_t)(ctx + 1) * sizeof *ids);
  uint32_t x = 42;
  for (long long i = 0; i <= ctx; i++) {
    x = x * 1664525u + 1013904223u;
    ids[i] = (int32_t)((x >> 8) % (uint32_t)V);
  }
  double *pp = calloc((size_t)reps, sizeof(double)), *tg = calloc((size_t)reps, sizeof(double));
  double *tgs = calloc((size_t)reps, sizeof(double));
  long long drafted = 0, accepted = 0;
  /* The machine's limits are measured before each repetition's run and the
   * shares set against the highest: on a shared host a core's speed drifts
   * within seconds, and one measurement after the runs, in a slower moment
   * than the runs themselves, had overstated a share by up to 1.5x. The
   * highest limit can only understate it. */
  di_cpu_peak *pks = calloc((size_t)reps, sizeof *pks);
  double *bws = calloc((size_t)reps, sizeof(double));
  int ret = 0;
  bench_run br;
  double ts;
  /* --tp: time inside exchanges during the generation runs (from rank 0: it
   * includes waiting for a slower rank), against those runs' time */
  di_dist_stats tp_sum = {0};
  double tp_time = 0;
  for (long long r = 0; r < reps && !ret; r++) {
    if (np > 0) {
      if (!no_bw) pks[r] = di_cpu_peak_measure(nthreads);
      if (bench_one(e, ids, (int)np, 1, true, &br, &ts)) ret = di_cli_fail("bench", "%s", br.error);
      pp[r] = (double)np / (br.t_first - ts);
    }
    if (ng > 0 && !ret) {
      if (!no_bw) bws[r] = di_cpu_read_bandwidth((size_t)1 << 30, nthreads, 3);
      /* ng + 1 tokens: the first comes from the prompt's forward, then ng decode steps */
      di_dist_stats d0 = di_dist_get_stats();
      if (bench_one(e, ids, (int)tg_prompt, (int)ng + 1, true, &br, &ts)) ret = di_cli_fail("bench", "%s", br.error);
      tg[r] = (double)ng / (br.t_end - br.t_first);
      di_dist_stats d1 = di_dist_get_stats();
      tp_sum.ops += d1.ops - d0.ops, tp_sum.bytes += d1.bytes - d0.bytes, tp_sum.seconds += d1.seconds - d0.seconds;
      tp_time += br.t_end - ts;
      if (spec && !ret) { /* alternating with the run above, so drift hits both alike */
        if (bench_one(e, ids, (int)tg_prompt, (int)ng + 1, false, &br, &ts)) ret = di_cli_fail("bench", "%s", br.error);
        tgs[r] = (double)ng / (br.t_end - br.t_first);
        drafted += br.drafted;
        accepted += br.accepted;
      }
    }
    if (!json && !ret)
      fprintf(stderr, "rep %lld/%lld: pp %.1f tok/s, tg %.1f tok/s%s", r + 1, reps, pp[r], tg[r], spec ? "" : "\n");
    if (!json && !ret && spec) fprintf(stderr, ", tg with spec %.1f tok/s\n", tgs[r]);
  }
  if (!ret) {
    double pp_med = median(pp, (int)reps), tg_med = median(tg, (int)reps), tgs_med = spec ? median(tgs, (int)reps) : 0;
    di_engine_stats es;
    di_engine_stats_get(e, &es);
    /* Bytes decode must read per token: every matrix once (the embedding table
     * only one row, unless it doubles as the classifier; of MoE layers only the
     * active experts) plus the KV so far. */
    double idle_bytes, idle_params;
    moe_idle(mdl, &idle_bytes, &idle_params);
    double wbytes = (double)mdl->weight_bytes - idle_bytes;
    if (mdl->output.data != mdl->tok_embd.data)
      wbytes -= (double)mdl->tok_embd.row_bytes * (double)(mdl->tok_embd.ne[1] - 1);
    double kv_tok = (double)es.kv_block_bytes / es.kv_block_size;
    double bytes_tok = wbytes + kv_tok * ((double)depth + (double)ng / 2);
    double bw = 0;
    for (long long r = 0; r < reps && ng; r++) bw = bws[r] > bw ? bws[r] : bw;
    double share = bw > 0 ? tg_med * bytes_tok / (bw * 1e9) : 0;
    /* Prefill's matmul work: 2 ops per layer weight per token, plus the
     * classifier once (a prompt needs the logits of its last token only; the
     * embedding table is a lookup); attention is left out. Its limit is the
     * int8 peak for quantized weights (int8 activations), f32 otherwise. */
    const bool tied = mdl->output.data == mdl->tok_embd.data;
    const double emb = (double)mdl->tok_embd.ne[0] * (double)mdl->tok_embd.ne[1];
    const double cls = tied ? emb : (double)mdl->output.ne[0] * (double)mdl->output.ne[1];
    const double per_tok = (double)mdl->n_params - idle_params - emb - (tied ? 0 : cls);
    double mm_params = np > 0 ? per_tok + cls / (double)np : 0;
    di_dtype wt = mdl->layers[0].w_up.type;
    bool float_w = wt == DI_F32 || wt == DI_F16 || wt == DI_BF16;
    di_cpu_peak pk = pks[0];
    double peak = 0;
    for (long long r = 0; r < reps && np; r++) {
      double p = float_w ? pks[r].f32_gflops : pks[r].int8_gops;
      peak = p > peak ? p : peak;
    }
    double pp_share = peak > 0 ? pp_med * 2 * mm_params / (peak * 1e9) : 0;
    double speedup = spec && tg_med > 0 ? tgs_med / tg_med : 0, acc = drafted ? (double)accepted / drafted : 0;
    if (json) {
      /* without a probe (--no-bw, or no prompt) there is no peak: null, not a NULL through %s */
      const char *how = float_w ? pk.f32_how : pk.int8_how;
      char kind[96] = "null";
      if (how && peak > 0) snprintf(kind, sizeof kind, "\"%s\"", how);
      printf("{\"model\": \"%s\", \"arch\": \"%s\", \"threads\": %d, \"isa\": \"%s\", \"n_prompt\": %lld, "
             "\"n_gen\": %lld, \"depth\": %lld, \"reps\": %lld, \"pp_tok_s\": %.3f, \"tg_tok_s\": %.3f, "
             "\"tg_bytes_per_token\": %.0f, \"bw_gb_s\": %.3f, \"bw_share\": %.4f, \"peak_gops\": %.1f, "
             "\"peak_kind\": %s, \"pp_peak_share\": %.4f, \"kv_bytes_per_token\": %.0f, \"active_weight_bytes\": %.0f",
             model, hp->arch, nthreads, di_cpu_isa_name(di_cpu_isa()), np, ng, depth, reps, pp_med, tg_med, bytes_tok,
             bw, share, peak, kind, pp_share, kv_tok, wbytes);
      if (di_dist_active())
        printf(", \"tp_ranks\": %d, \"tp_exchange_share\": %.4f, \"tp_exchanges\": %llu, \"tp_exchange_us\": %.2f, "
               "\"tp_exchange_bytes\": %.0f",
               di_dist_size(), tp_time > 0 ? tp_sum.seconds / tp_time : 0, (unsigned long long)tp_sum.ops,
               tp_sum.ops ? tp_sum.seconds / tp_sum.ops * 1e6 : 0, tp_sum.ops ? (double)tp_sum.bytes / tp_sum.ops : 0);
      if (spec)
        printf(", \"spec\": \"%s\", \"tg_spec_tok_s\": %.3f, \"spec_speedup\": %.4f, \"spec_drafted\": %lld, "
               "\"spec_accepted\": %lld",
               e->spec.drafter.name, tgs_med, speedup, drafted, accepted);
      printf("}\n");
    } else {
      printf("model       %s (%s, %.1f M params, %.1f MiB weights)\n", model, hp->arch, (double)mdl->n_params / 1e6,
             (double)mdl->weight_bytes / 1048576.0);
      printf("threads     %d (%s)\n", nthreads, di_cpu_isa_name(di_cpu_isa()));
      if (idle_bytes > 0)
        printf("active      %.1f MiB of weights per token (%d of %d routed experts)\n", wbytes / 1048576.0,
               hp->n_expert_used, hp->n_expert);
      printf("kv cache    %.0f bytes per token\n", kv_tok);
      if (np) printf("pp%-8lld %.1f tok/s\n", np, pp_med);
      if (pp_share > 0)
        printf("compute     %.0f G%s/s peak (%s); prefill matmuls reach %.0f%% of it\n", peak, float_w ? "FLOP" : "OP",
               float_w ? pk.f32_how : pk.int8_how, pp_share * 100);
      if (ng) printf("tg%-8lld %.1f tok/s%s\n", ng, tg_med, depth ? " (after depth)" : "");
      if (spec && ng)
        printf("tg spec     %.1f tok/s with --spec %s: %.2fx the run with it off (%lld drafted, %.0f%% accepted)\n",
               tgs_med, e->spec.drafter.name, speedup, drafted, acc * 100);
      if (di_dist_active() && ng)
        printf("tp          %d ranks: exchanges take %.1f%% of generation (%llu of %.0f B on average, %.1f us each, "
               "waits for the slowest rank included)\n",
               di_dist_size(), tp_time > 0 ? 100 * tp_sum.seconds / tp_time : 0, (unsigned long long)tp_sum.ops,
               tp_sum.ops ? (double)tp_sum.bytes / tp_sum.ops : 0, tp_sum.ops ? tp_sum.seconds / tp_sum.ops * 1e6 : 0);
      if (bw > 0)
        printf("bandwidth   %.1f GB/s measured; generation reads %.1f MB/token = %.0f%% of it\n", bw, bytes_tok / 1e6,
               share * 100);
    }
  }
  free(pp);
  free(tg);
  free(tgs);
  free(pks);
  free(bws);
  free(ids);
  di_engine_destroy(e);
  return ret;
}
