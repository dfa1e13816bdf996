/* deepinfer run: one prompt, one completion, streamed to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/gen.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

static const char *usage =
    "usage: deepinfer run -m MODEL [-p PROMPT | --ids 1,2,3] [options]\n"
    "\n"
    "Generates a completion of PROMPT and streams it to stdout.\n"
    "\n"
    "  -m, --model PATH      GGUF file or Hugging Face directory (required)\n"
    "  -p, --prompt TEXT     prompt text (tokenized with the model's tokenizer, BOS as the model wants)\n"
    "      --ids LIST        prompt as token ids, e.g. 1,2,3 (no BOS added)\n"
    "  -n, --n-predict N     tokens to generate (default 128; stops early at EOS)\n"
    "      --temp T          temperature (default 0.8; 0 = greedy)\n"
    "      --top-k K         top-k (default 40; 0 = off)\n"
    "      --top-p P         top-p in (0, 1] (default 0.95)\n"
    "      --seed S          RNG seed (default 1)\n"
    "      --threads N       threads (default: all cores)\n"
    "      --ctx N           context length (default: the model's, at most 4096)\n"
    "      --kv-type T       KV cache dtype: f16 (default), bf16, f32\n"
    "      --mmap            memory-map the weights instead of reading them\n"
    "      --ignore-eos      keep generating past EOS\n"
    "      --json-schema FILE  constrain the output to JSON valid under the JSON Schema in FILE\n"
    "      --grammar FILE    constrain the output to the GBNF grammar in FILE (root rule \"root\")\n"
    "      --regex RE        constrain the output to match RE (ECMAScript syntax) as a whole\n"
    "      --json-ws MODE    whitespace in constrained JSON: free (default), compact, python\n"
    "      --print-ids       print the generated ids as a JSON array on the last line instead of text\n"
    "      --dump-logits F   write logits of every prompt position and generated token to F\n"
    "                        (little-endian float32 rows [positions, vocab])\n"
    "  -h, --help            this help\n";

int di_cmd_run(int argc, char **argv) {
  const char *model = NULL, *prompt = NULL, *ids_arg = NULL, *dump = NULL;
  const char *schema_path = NULL, *gbnf_path = NULL, *regex = NULL;
  di_grammar_opts gopts = {.ws = DI_JSON_WS_FREE};
  long long n_predict = 128, top_k = 40, threads = 0, ctx = 0, seed = 1;
  double temp = 0.8, top_p = 0.95;
  bool print_ids = false, use_mmap = false, ignore_eos = false;
  di_kv_type kv_type = DI_KV_F16;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED() \
  if (!v) return di_cli_fail("run", "option %s needs a value", a); \
  i++
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
      NEED();
      model = v;
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
    } else if (!strcmp(a, "--seed")) {
      NEED();
      if (!di_arg_int(v, 0, INT64_MAX, &seed)) return di_cli_fail("run", "--seed: '%s' is not a seed", v);
    } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
      NEED();
      if (!di_arg_int(v, 1, 1024, &threads)) return di_cli_fail("run", "--threads: '%s' must be 1..1024", v);
    } else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) {
      NEED();
      if (!di_arg_int(v, 1, 1 << 24, &ctx)) return di_cli_fail("run", "--ctx: '%s' must be positive", v);
    } else if (!strcmp(a, "--kv-type")) {
      NEED();
      if (!strcmp(v, "f16")) kv_type = DI_KV_F16;
      else if (!strcmp(v, "f32")) kv_type = DI_KV_F32;
      else if (!strcmp(v, "bf16")) kv_type = DI_KV_BF16;
      else return di_cli_fail("run", "--kv-type: '%s' must be f16, bf16 or f32", v);
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
      use_mmap = true;
    } else if (!strcmp(a, "--ignore-eos")) {
      ignore_eos = true;
    } else {
      return di_cli_fail("run", "unknown option '%s' (see --help)", a);
    }
#undef NEED
  }
  if (!model) return di_cli_fail("run", "missing -m MODEL (see --help)");
  if (prompt && ids_arg) return di_cli_fail("run", "give either -p or --ids, not both");
  if (!!schema_path + !!gbnf_path + !!regex > 1)
    return di_cli_fail("run", "give at most one of --json-schema, --grammar, --regex");
  bool constrained = schema_path || gbnf_path || regex;

  di_status st = {0};
  di_tokenizer *tok = NULL;
  int32_t *ids = NULL;
  int n_ids = 0;
  if (ids_arg) {
    if (!di_arg_ids(ids_arg, &ids, &n_ids)) return di_cli_fail("run", "--ids: '%s' is not a list of ids", ids_arg);
  }
  /* The tokenizer is needed for -p and to print text. */
  if (prompt || !print_ids || constrained) {
    if (di_tokenizer_load(model, &tok, &st)) {
      if (prompt || constrained) {
        free(ids);
        return di_cli_fail("run", "%s", st.msg);
      }
      di_status_clear(&st);
      tok = NULL;
    }
  }
  if (prompt) {
    size_t n = 0;
    if (di_tokenizer_encode(tok, prompt, strlen(prompt), true, DI_TOK_PARSE_NONE, &ids, &n, &st)) {
      di_tokenizer_free(tok);
      return di_cli_fail("run", "%s", st.msg);
    }
    n_ids = (int)n;
  }
  if (!ids || n_ids == 0) {
    free(ids);
    di_tokenizer_free(tok);
    return di_cli_fail("run", "empty prompt: give -p TEXT or --ids LIST");
  }

  di_grammar *grammar = NULL;
  di_gmatcher *gm = NULL;
  uint32_t *gmask = NULL;
  if (constrained) {
    char *src = NULL;
    size_t len = 0;
    const char *path = schema_path ? schema_path : gbnf_path;
    if (path) {
      FILE *f = fopen(path, "rb");
      if (!f || fseek(f, 0, SEEK_END) || (long)(len = (size_t)ftell(f)) < 0 || fseek(f, 0, SEEK_SET) ||
          !(src = malloc(len + 1)) || fread(src, 1, len, f) != len) {
        if (f) fclose(f);
        free(src);
        free(ids);
        di_tokenizer_free(tok);
        return di_cli_fail("run", "cannot read %s", path);
      }
      fclose(f);
    }
    di_grammar_kind kind = schema_path ? DI_GRAMMAR_JSON_SCHEMA : gbnf_path ? DI_GRAMMAR_GBNF : DI_GRAMMAR_REGEX;
    di_code rc = di_grammar_compile(tok, kind, path ? src : regex, path ? len : strlen(regex), &gopts, &grammar, &st);
    free(src);
    if (rc == DI_OK) rc = di_gmatcher_new(grammar, &gm, &st);
    if (rc) {
      free(ids);
      di_grammar_release(grammar);
      di_tokenizer_free(tok);
      return di_cli_fail("run", "%s: %s", schema_path ? "--json-schema" : gbnf_path ? "--grammar" : "--regex", st.msg);
    }
  }

  di_gen g;
  di_gen_opts go = {.model_path = model, .threads = (int)threads, .ctx = (int)ctx, .kv_type = kv_type,
                    .use_mmap = use_mmap};
  int ret = 0;
  FILE *df = NULL;
  float *logits = NULL;
  int32_t *out_ids = NULL;
  di_sampler sampler = {0};
  di_detok_stream *ds = NULL;
  if (di_gen_open(&g, &go, &st)) {
    ret = di_cli_fail("run", "%s", st.msg);
    goto done;
  }
  const int V = g.model->hp.n_vocab;
  for (int i = 0; i < n_ids; i++)
    if (ids[i] >= V) {
      ret = di_cli_fail("run", "token id %d out of range (vocabulary of %d)", ids[i], V);
      goto done;
    }
  if (n_ids + (n_predict > 0 ? 1 : 0) > g.ctx) {
    ret = di_cli_fail("run", "prompt of %d tokens does not fit the context of %d tokens", n_ids, g.ctx);
    goto done;
  }
  if (dump && !(df = fopen(dump, "wb"))) {
    ret = di_cli_fail("run", "cannot open %s for writing", dump);
    goto done;
  }
  logits = malloc((size_t)(dump ? n_ids : 1) * V * sizeof(float));
  out_ids = malloc(((size_t)n_ids + (size_t)n_predict + 1) * sizeof *out_ids);
  if (grammar && di_grammar_n_vocab(grammar) > V) {
    ret = di_cli_fail("run", "the tokenizer has %d tokens, the model %d", di_grammar_n_vocab(grammar), V);
    goto done;
  }
  if (grammar) gmask = calloc(((size_t)V + 31) / 32, sizeof *gmask);
  if (!logits || !out_ids || (grammar && !gmask) || di_sampler_init(&sampler, V, &st)) {
    ret = di_cli_fail("run", "out of memory");
    goto done;
  }
  memcpy(out_ids, ids, (size_t)n_ids * sizeof *ids);
  if (di_gen_feed(&g, ids, n_ids, dump != NULL, logits, &st)) {
    ret = di_cli_fail("run", "%s", st.msg);
    goto done;
  }
  float *last = logits + (size_t)(dump ? n_ids - 1 : 0) * V;
  if (df && fwrite(logits, sizeof(float) * V, (size_t)n_ids, df) != (size_t)n_ids) {
    ret = di_cli_fail("run", "write to %s failed", dump);
    goto done;
  }
  if (tok && !print_ids) di_detok_stream_new(tok, true, &ds, &st);
  di_sampling sp = {.temperature = (float)temp, .top_k = (int)top_k, .top_p = (float)top_p,
                    .repetition_penalty = 1.0f, .seed = (uint64_t)seed};
  uint64_t rng = di_sampler_seed(sp.seed, 0);
  const int32_t *eos_ids = NULL;
  size_t n_eos = tok ? di_tokenizer_eos(tok, &eos_ids) : 0;
  int n_out = n_ids;
  for (long long k = 0; k < n_predict; k++) {
    di_sample_in in = {.p = &sp, .history = out_ids, .n_history = n_out, .n_prompt = n_ids, .rng = &rng};
    di_sample_out so;
    if (gm) {
      di_gmatcher_fill_mask(gm, gmask);
      in.mask = gmask;
    }
    di_sampler_sample(&sampler, last, &in, &so);
    /* the mask allows EOS only where the grammar accepts; stop once no byte can follow */
    bool grammar_done = gm && (!di_gmatcher_accept_token(gm, so.token) || di_gmatcher_is_finished(gm));
    bool is_eos = so.token == g.model->hp.eos_id;
    for (size_t e = 0; e < n_eos; e++) is_eos |= so.token == eos_ids[e];
    if (is_eos && !ignore_eos) break;
    out_ids[n_out++] = so.token;
    if (ds) {
      const char *txt;
      size_t len;
      if (!di_detok_stream_push(ds, so.token, &txt, &len, &st) && len) {
        fwrite(txt, 1, len, stdout);
        fflush(stdout);
      }
    }
    if (grammar_done) break;
    if (k + 1 == n_predict && !df) break; /* the last token's logits are not needed */
    if (n_out >= g.ctx) break;
    if (di_gen_feed(&g, &so.token, 1, false, logits, &st)) {
      ret = di_cli_fail("run", "%s", st.msg);
      goto done;
    }
    last = logits;
    if (df && fwrite(logits, sizeof(float), (size_t)V, df) != (size_t)V) {
      ret = di_cli_fail("run", "write to %s failed", dump);
      goto done;
    }
  }
  if (ds) {
    const char *txt;
    size_t len;
    if (!di_detok_stream_flush(ds, &txt, &len, &st) && len) fwrite(txt, 1, len, stdout);
    fputc('\n', stdout);
  } else if (!print_ids && !tok) {
    fprintf(stderr, "deepinfer run: no tokenizer in %s; printing ids\n", model);
    print_ids = true;
  }
  if (print_ids) {
    fputc('[', stdout);
    for (int i = n_ids; i < n_out; i++) printf(i > n_ids ? ", %d" : "%d", out_ids[i]);
    fputs("]\n", stdout);
  }
done:
  if (df && fclose(df) != 0 && !ret) ret = di_cli_fail("run", "write to %s failed", dump);
  di_detok_stream_free(ds);
  di_sampler_free(&sampler);
  di_gmatcher_free(gm);
  di_grammar_release(grammar);
  free(gmask);
  free(logits);
  free(out_ids);
  free(ids);
  if (g.model) di_gen_close(&g);
  di_tokenizer_free(tok);
  return ret;
}
