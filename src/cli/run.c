/* deepinfer run: one prompt, one completion, streamed to stdout, through the
 * engine (the same scheduler, sampler, KV pool and speculation as serve). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/engine_opts.h"
#include "dist/comm.h"
#include "engine/engine_internal.h"
#include "engine/engine_model.h"
#include "graph/forward_tp.h"
#include "grammar/grammar.h"
#include "server/engine_backend.h"
#include "util/progress.h"

static const char *usage =
    "usage: deepinfer run -m MODEL [-p PROMPT | --ids 1,2,3] [options]\n"
    "\n"
    "Generates a completion of PROMPT and streams it to stdout.\n"
    "\n"
    "  -p, --prompt TEXT     prompt text (tokenized with the model's tokenizer, BOS as the model wants)\n"
    "      --ids LIST        prompt as token ids, e.g. 1,2,3 (no BOS added); @FILE reads the list from FILE\n"
    "  -n, --n-predict N     tokens to generate (default 128; stops early at EOS)\n"
    "      --temp T          temperature (default 0.8; 0 = greedy)\n"
    "      --top-k K         top-k (default 40; 0 = off)\n"
    "      --top-p P         top-p in (0, 1] (default 0.95)\n"
    "      --min-p P         min-p in [0, 1] (default 0 = off)\n"
    "      --repeat-penalty R repetition penalty (default 1 = off)\n"
    "      --seed S          RNG seed (default 1)\n"
    "  -c, --ctx N           context length (default: the model's, at most 4096)\n"
    "      --mmap            memory-map the weights instead of reading them\n"
    "      --ignore-eos      keep generating past EOS\n"
    "      --json-schema FILE  constrain the output to JSON valid under the JSON Schema in FILE\n"
    "      --grammar FILE    constrain the output to the GBNF grammar in FILE (root rule \"root\")\n"
    "      --regex RE        constrain the output to match RE (ECMAScript syntax) as a whole\n"
    "      --json-ws MODE    whitespace in constrained JSON: free (default), compact, python\n"
    "      --print-ids       print the generated ids as a JSON array on the last line instead of text\n"
    "      --dump-logits F   write logits of every prompt position and generated token to F\n"
    "                        (little-endian float32 rows [positions, vocab])\n"
    "      --stats           timing summary on stderr; its last line is one JSON object\n"
    "                        {\"prompt_tokens\",\"gen_tokens\",\"prefill_s\",\"decode_s\",\"decode_tok_s\",\"spec\",\"tp\"}\n"
    "                        (tp: ranks, exchanges, each rank's weights_bytes held, rss_bytes once\n"
    "                        loaded and kv_bytes of its KV pool, weights_total, weights_replicated)\n"
    "  -h, --help            this help\n"
    "Engine options:\n" DI_CLI_ENGINE_OPTS_HELP;

typedef struct run_out {
  long long n_predict; /* tokens shown; the engine may compute one more for --dump-logits */
  bool print_ids;
  FILE *df;
  bool write_failed;
  int32_t *ids;
  int n_ids;
  double t_submit, t_first, t_end;
  int prompt_tokens;
  int drafted, accepted, verify_steps;
  di_finish finish;
  char error[512];
} run_out;

static void on_logits(const float *row, int n_vocab, int pos, void *user) {
  run_out *o = user;
  (void)pos;
  if (o->df && !o->write_failed && fwrite(row, sizeof *row, (size_t)n_vocab, o->df) != (size_t)n_vocab)
    o->write_failed = true;
}

static void on_event(const di_event *ev, void *user) {
  run_out *o = user;
  if (ev->token >= 0 && o->n_ids < o->n_predict) {
    if (o->n_ids == 0) o->t_first = di_engine_now();
    o->ids[o->n_ids++] = ev->token;
    if (!o->print_ids && ev->text_len) {
      fwrite(ev->text, 1, ev->text_len, stdout);
      fflush(stdout);
    }
  }
  if (ev->finish == DI_FINISH_NONE) return;
  o->t_end = di_engine_now();
  if (o->n_ids == 0) o->t_first = o->t_end;
  if (!o->print_ids && ev->text_len && o->n_ids <= o->n_predict) fwrite(ev->text, 1, ev->text_len, stdout);
  o->finish = ev->finish;
  o->prompt_tokens = ev->prompt_tokens;
  o->drafted = ev->spec_drafted;
  o->accepted = ev->spec_accepted;
  o->verify_steps = ev->spec_verify_steps;
  if (ev->error) snprintf(o->error, sizeof o->error, "%s", ev->error);
}

int di_cli_load_grammar(const char *cmd, di_engine *e, const char *schema_path, const char *gbnf_path,
                        const char *regex, const di_grammar_opts *gopts, di_grammar **grammar, di_gmatcher **gm) {
  char *src = NULL;
  size_t len = 0;
  const char *path = schema_path ? schema_path : gbnf_path;
  const char *flag = schema_path ? "--json-schema" : gbnf_path ? "--grammar" : "--regex";
  if (!di_engine_tokenizer(e)) return di_cli_fail(cmd, "%s needs a tokenizer, and this model has none", flag);
  if (path) {
    FILE *f = fopen(path, "rb");
    long end = -1;
    if (!f || fseek(f, 0, SEEK_END) || (end = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) ||
        !(src = malloc((size_t)end + 1)) || fread(src, 1, (size_t)end, f) != (size_t)end) {
      if (f) fclose(f);
      free(src);
      return di_cli_fail(cmd, "cannot read %s", path);
    }
    len = (size_t)end;
    fclose(f);
  }
  di_grammar_kind kind = schema_path ? DI_GRAMMAR_JSON_SCHEMA : gbnf_path ? DI_GRAMMAR_GBNF : DI_GRAMMAR_REGEX;
  di_status st = {0};
  di_code rc = di_grammar_compile(di_engine_tokenizer(e), kind, path ? src : regex, path ? len : strlen(regex), gopts,
                                  grammar, &st);
  free(src);
  if (rc == DI_OK && di_grammar_n_vocab(*grammar) > di_engine_n_vocab(e))
    return di_cli_fail(cmd, "the tokenizer has %d tokens, the model %d", di_grammar_n_vocab(*grammar),
                       di_engine_n_vocab(e));
  if (rc == DI_OK && gm) rc = di_gmatcher_new(*grammar, gm, &st);
  if (rc) return di_cli_fail(cmd, "%s: %s", flag, st.msg);
  return 0;
}

static const char *spec_name(int kind) {
  static const char *const names[] = {"off", "ngram", "draft", "mtp"};
  return kind >= 0 && kind <= 3 ? names[kind] : "?";
}

static void print_stats(const run_out *o, int spec, const di_model *m, uint64_t pool_bytes, const di_engine_stats *es) {
  double prefill = o->t_first - o->t_submit, decode = o->t_end - o->t_first;
  int after_first = o->n_ids > 1 ? o->n_ids - 1 : 0; /* tokens decoded after the one prefill yields */
  double tok_s = decode > 0 ? after_first / decode : 0;
  fprintf(stderr, "prompt %d tokens in %.3f s (%.1f tok/s); generated %d tokens, decode %.3f s (%.1f tok/s)",
          o->prompt_tokens, prefill, prefill > 0 ? o->prompt_tokens / prefill : 0, o->n_ids, decode, tok_s);
  if (spec) fprintf(stderr, "; spec %s: %d drafted, %d accepted in %d verify steps", spec_name(spec), o->drafted,
                    o->accepted, o->verify_steps);
  if (spec == DI_SPEC_MTP) /* the module runs only before a draft: none while backed off */
    fprintf(stderr, ", %llu fallbacks, %llu shadow probes; MTP module: %llu forwards, %llu rows",
            (unsigned long long)es->spec_fallbacks, (unsigned long long)es->spec_shadow_probes,
            (unsigned long long)es->spec_mtp_forwards, (unsigned long long)es->spec_mtp_rows);
  di_dist_stats ds = di_dist_get_stats();
  const di_dist_layout lay = di_dist_get_layout();
  if (di_dist_active())
    fprintf(stderr, "\ntensor parallel: %d ranks; %llu exchanges of %.1f KB on average took %.3f s (%.1f%% of prefill + decode)",
            di_dist_size(), (unsigned long long)ds.ops, ds.ops ? ds.bytes / 1e3 / ds.ops : 0.0, ds.seconds,
            prefill + decode > 0 ? 100 * ds.seconds / (prefill + decode) : 0.0);
  fprintf(stderr, "\n{\"prompt_tokens\":%d,\"gen_tokens\":%d,\"prefill_s\":%.6f,\"decode_s\":%.6f,\"decode_tok_s\":%.3f,"
                  "\"spec\":{\"kind\":\"%s\",\"drafted\":%d,\"accepted\":%d,\"verify_steps\":%d},"
                  "\"tp\":{\"ranks\":%d,\"hosts\":%d,\"layout\":\"%s\",\"exchanges\":%llu,\"exchange_bytes\":%llu,"
                  "\"exchange_s\":%.6f",
          o->prompt_tokens, o->n_ids, prefill, decode, tok_s, spec_name(spec), o->drafted, o->accepted,
          o->verify_steps, di_dist_size(), lay.hosts, lay.two_level ? "two-level" : "flat", (unsigned long long)ds.ops,
          (unsigned long long)ds.bytes, ds.seconds);
  /* each rank's weights and resident set once loaded (one rank: this one's now) */
  const di_tp_mem *mem = NULL;
  int n = di_tp_memory(&mem);
  di_tp_mem one = {.weights = m ? m->held_bytes : 0, .rss = di_tp_rss_bytes(), .kv = pool_bytes};
  if (!n) mem = &one, n = 1;
  static const char *const keys[] = {"weights_bytes", "rss_bytes", "kv_bytes"};
  for (int k = 0; k < 3; k++) {
    fprintf(stderr, ",\"%s\":[", keys[k]);
    for (int r = 0; r < n; r++)
      fprintf(stderr, "%s%llu", r ? "," : "", (unsigned long long)(k == 0 ? mem[r].weights : k == 1 ? mem[r].rss : mem[r].kv));
    fprintf(stderr, "]");
  }
  fprintf(stderr, ",\"weights_total\":%llu,\"weights_replicated\":%llu}}\n",
          (unsigned long long)(m ? m->weight_bytes : 0), (unsigned long long)(m ? m->replicated_bytes : 0));
}

int di_cmd_run(int argc, char **argv) {
  const char *prompt = NULL, *ids_arg = NULL, *dump = NULL;
  const char *schema_path = NULL, *gbnf_path = NULL, *regex = NULL;
  di_grammar_opts gopts = {.ws = DI_JSON_WS_FREE};
  long long n_predict = 128, top_k = 40, seed = 1;
  double temp = 0.8, top_p = 0.95, min_p = 0, rep = 1;
  bool print_ids = false, ignore_eos = false, stats = false, ctx_given = false;
  di_engine_opts eo;
  di_engine_opts_default(&eo);
  eo.max_seqs = 1;
  eo.tokenizer_optional = 1; /* --ids with a model that has no tokenizer prints ids */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-c")) argv[i] = (char *)(a = "--ctx");
    if (!strcmp(a, "--ctx")) ctx_given = true;
    int eng = di_cli_engine_opt("run", argc, argv, &i, &eo);
    if (eng == 2) return 2;
    if (eng == 1) continue;
#define NEED() \
  if (!v) return di_cli_fail("run", "option %s needs a value", a); \
  i++
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
      NEED();
      prompt = v;
    } else if (!strcmp(a, "--ids")) {
      NEED();
      ids_arg = v;
    } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
      NEED();
      if (!di_arg_int(v, 0, 1 << 24, &n_predict)) return di_cli_fail("run", "-n: '%s' is not a count", v);
    } else if (!strcmp(a, "--temp")) {
      NEED();
      if (!di_arg_float(v, 0, 100, &temp)) return di_cli_fail("run", "--temp: '%s' must be in [0, 100]", v);
    } else if (!strcmp(a, "--top-k")) {
      NEED();
      if (!di_arg_int(v, 0, 1 << 30, &top_k)) return di_cli_fail("run", "--top-k: '%s' must be >= 0", v);
    } else if (!strcmp(a, "--top-p")) {
      NEED();
      if (!di_arg_float(v, 1e-9, 1, &top_p)) return di_cli_fail("run", "--top-p: '%s' must be in (0, 1]", v);
    } else if (!strcmp(a, "--min-p")) {
      NEED();
      if (!di_arg_float(v, 0, 1, &min_p)) return di_cli_fail("run", "--min-p: '%s' must be in [0, 1]", v);
    } else if (!strcmp(a, "--repeat-penalty")) {
      NEED();
      if (!di_arg_float(v, 1e-6, 100, &rep)) return di_cli_fail("run", "--repeat-penalty: '%s' must be in (0, 100]", v);
    } else if (!strcmp(a, "--seed")) {
      NEED();
      if (!di_arg_int(v, 0, INT64_MAX, &seed)) return di_cli_fail("run", "--seed: '%s' is not a seed", v);
    } else if (!strcmp(a, "--dump-logits")) {
      NEED();
      dump = v;
    } else if (!strcmp(a, "--json-schema")) {
      NEED();
      schema_path = v;
    } else if (!strcmp(a, "--grammar")) {
      NEED();
      gbnf_path = v;
    } else if (!strcmp(a, "--regex")) {
      NEED();
      regex = v;
    } else if (!strcmp(a, "--json-ws")) {
      NEED();
      if (!strcmp(v, "free")) gopts.ws = DI_JSON_WS_FREE;
      else if (!strcmp(v, "compact")) gopts.ws = DI_JSON_WS_COMPACT;
      else if (!strcmp(v, "python")) gopts.ws = DI_JSON_WS_PYTHON;
      else return di_cli_fail("run", "--json-ws: '%s' must be free, compact or python", v);
    } else if (!strcmp(a, "--print-ids")) {
      print_ids = true;
    } else if (!strcmp(a, "--mmap")) {
      eo.use_mmap = 1;
    } else if (!strcmp(a, "--ignore-eos")) {
      ignore_eos = true;
    } else if (!strcmp(a, "--stats")) {
      stats = true;
    } else {
      return di_cli_fail("run", "unknown option '%s' (see --help)", a);
    }
#undef NEED
  }
  if (!eo.model_path) return di_cli_fail("run", "missing -m MODEL (see --help)");
  if (prompt && ids_arg) return di_cli_fail("run", "give either -p or --ids, not both");
  if (!prompt && !ids_arg) return di_cli_fail("run", "empty prompt: give -p TEXT or --ids LIST");
  if (!!schema_path + !!gbnf_path + !!regex > 1)
    return di_cli_fail("run", "give at most one of --json-schema, --grammar, --regex");
  if (!ctx_given) eo.ctx = 4096; /* the engine takes the model's context when it is smaller */

  di_request_params rp;
  di_request_params_default(&rp);
  int32_t *ids = NULL;
  int n_ids = 0;
  char *ids_text = NULL; /* --ids @FILE: a list longer than one argument may be */
  if (ids_arg && ids_arg[0] == '@') {
    FILE *f = fopen(ids_arg + 1, "rb");
    long len = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (ids_text = malloc((size_t)len + 1)) && fread(ids_text, 1, (size_t)len, f) == (size_t)len) {
      ids_text[len] = 0;
      for (long i = 0; i < len; i++)
        if (ids_text[i] == '\n' || ids_text[i] == '\r') ids_text[i] = ' ';
    } else {
      free(ids_text);
      ids_text = NULL;
    }
    if (f) fclose(f);
    if (!ids_text) return di_cli_fail("run", "--ids: cannot read '%s'", ids_arg + 1);
    ids_arg = ids_text;
  }
  if (ids_arg) {
    bool ok = di_arg_ids(ids_arg, &ids, &n_ids);
    if (!ok) {
      int rc = di_cli_fail("run", "--ids: '%.60s' is not a list of ids", ids_arg);
      free(ids_text);
      return rc;
    }
    free(ids_text);
    if (n_ids == 0) {
      free(ids);
      return di_cli_fail("run", "empty prompt: give -p TEXT or --ids LIST");
    }
    rp.prompt_ids = ids;
    rp.n_prompt = (size_t)n_ids;
  } else {
    rp.prompt_text = prompt;
    rp.prompt_text_len = strlen(prompt);
  }
  run_out o = {.n_predict = n_predict, .print_ids = print_ids};
  o.ids = malloc(((size_t)n_predict + 1) * sizeof *o.ids);
  if (!o.ids) {
    free(ids);
    return di_cli_fail("run", "out of memory");
  }
  int ret = 0;
  di_engine *e = NULL;
  di_grammar *grammar = NULL;
  di_gmatcher *gm = NULL;
  char err[512] = "";
  di_progress_set(di_progress_stderr, NULL);
  if (di_engine_create(&eo, &e, err, sizeof err) != DI_OK) {
    ret = di_cli_fail("run", "%s", err);
    goto done;
  }
  if (!di_engine_tokenizer(e) && !print_ids) {
    fprintf(stderr, "deepinfer run: no tokenizer in %s; printing ids\n", eo.model_path);
    o.print_ids = print_ids = true;
  }
  if ((schema_path || gbnf_path || regex) &&
      (ret = di_cli_load_grammar("run", e, schema_path, gbnf_path, regex, &gopts, &grammar, &gm)))
    goto done;
  if (dump && !(o.df = fopen(dump, "wb"))) {
    ret = di_cli_fail("run", "cannot open %s for writing", dump);
    goto done;
  }
  rp.sampling.temperature = (float)temp;
  rp.sampling.top_k = (int)top_k;
  rp.sampling.top_p = (float)top_p;
  rp.sampling.min_p = (float)min_p;
  rp.sampling.repetition_penalty = (float)rep;
  rp.sampling.seed = (uint64_t)seed;
  rp.ignore_eos = ignore_eos;
  /* -n 0 still runs the prompt (for --dump-logits); with a dump, one more
   * token is computed so the last shown token's logits are in the file. */
  rp.max_tokens = (int)n_predict + (dump || n_predict == 0 ? 1 : 0);
  rp.cb = on_event;
  rp.user = &o;
  if (dump) rp.logits_cb = on_logits;
  o.t_submit = di_engine_now();
  if (di_srv_submit_matcher(e, &rp, gm, NULL, err, sizeof err) != DI_OK) {
    ret = di_cli_fail("run", "%s", err);
    goto done;
  }
  while (di_engine_step(e) > 0) {
  }
  if (o.finish == DI_FINISH_ERROR) {
    ret = di_cli_fail("run", "%s", o.error);
    goto done;
  }
  if (o.write_failed) {
    ret = di_cli_fail("run", "write to %s failed", dump);
    goto done;
  }
  if (!print_ids) {
    fputc('\n', stdout);
  } else {
    fputc('[', stdout);
    for (int i = 0; i < o.n_ids; i++) printf(i ? ", %d" : "%d", o.ids[i]);
    fputs("]\n", stdout);
  }
  fflush(stdout);
  if (stats) {
    const di_kv_pool *kv = e->pool;
    di_kv_spec ks = {.n_layers = kv->n_layers, .kv_dim = kv->kv_dim, .v_in_k = kv->v_in_k, .type = kv->type};
    di_engine_stats es;
    di_engine_stats_get(e, &es);
    print_stats(&o, eo.spec, di_engine_model(e), (uint64_t)kv->n_blocks * di_kv_spec_block_bytes(&ks, kv->block_size),
                &es);
  }
done:
  if (o.df && fclose(o.df) != 0 && !ret) ret = di_cli_fail("run", "write to %s failed", dump);
  di_engine_destroy(e);
  di_gmatcher_free(gm);
  di_grammar_release(grammar);
  free(o.ids);
  free(ids);
  return ret;
}
