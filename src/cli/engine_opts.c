#include "cli/engine_opts.h"

#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "engine/spec/drafter.h"

int di_cli_spec_opt(const char *cmd, int argc, char **argv, int *i, di_engine_opts *o) {
  const char *a = argv[*i];
  const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  long long n = 0;
  if (strcmp(a, "--spec") && strcmp(a, "--spec-k-max") && strcmp(a, "--spec-mode") && strcmp(a, "--draft-model"))
    return 0;
  if (!v) return di_cli_fail(cmd, "option %s needs a value", a);
  (*i)++;
  if (!strcmp(a, "--spec")) {
    if (!strcmp(v, "off")) o->spec = DI_SPEC_OFF;
    else if (!strcmp(v, "ngram")) o->spec = DI_SPEC_NGRAM;
    else if (!strcmp(v, "draft")) o->spec = DI_SPEC_DRAFT;
    else if (!strcmp(v, "mtp")) o->spec = DI_SPEC_MTP;
    else return di_cli_fail(cmd, "--spec: '%s' must be off, ngram, draft or mtp", v);
  } else if (!strcmp(a, "--spec-k-max")) {
    if (!di_arg_int(v, 1, DI_SPEC_K_LIMIT, &n))
      return di_cli_fail(cmd, "--spec-k-max: '%s' must be an integer in 1..%d", v, DI_SPEC_K_LIMIT);
    o->spec_k_max = (int)n;
  } else if (!strcmp(a, "--spec-mode")) {
    if (!strcmp(v, "auto")) o->spec_mode = DI_SPEC_AUTO;
    else if (!strcmp(v, "always")) o->spec_mode = DI_SPEC_ALWAYS;
    else return di_cli_fail(cmd, "--spec-mode: '%s' must be auto or always", v);
  } else {
    o->draft_model_path = v; /* checked against --spec at engine start-up (both orders allowed) */
  }
  return 1;
}

int di_cli_swa_opt(const char *cmd, int argc, char **argv, int *i, di_engine_opts *o) {
  const char *a = argv[*i];
  if (!strcmp(a, "--swa-full") || !strcmp(a, "--no-replay")) {
    *(!strcmp(a, "--swa-full") ? &o->swa_full : &o->no_replay) = 1;
    return 1;
  }
  if (strcmp(a, "--swa-checkpoint") && strcmp(a, "--swa-window")) return 0;
  const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  long long n = 0;
  if (!v) return di_cli_fail(cmd, "option %s needs a value", a);
  (*i)++;
  if (!di_arg_int(v, 1, 1 << 24, &n)) return di_cli_fail(cmd, "%s: '%s' must be a positive number of tokens", a, v);
  *(!strcmp(a, "--swa-window") ? &o->swa_window : &o->swa_checkpoint) = (int)n;
  return 1;
}

int di_cli_engine_opt(const char *cmd, int argc, char **argv, int *i, di_engine_opts *o) {
  int sp = di_cli_spec_opt(cmd, argc, argv, i, o);
  if (!sp) sp = di_cli_swa_opt(cmd, argc, argv, i, o);
  if (sp) return sp;
  const char *a = argv[*i];
  const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  long long n = 0;
  if (!strcmp(a, "--no-prefix-cache")) {
    o->prefix_cache = 0;
    return 1;
  }
  static const char *const with_value[] = {"-m", "--model", "-t", "--threads", "--ctx", "--kv-type", "--kv-mem",
                                           "--max-seqs", "--max-batch-tokens", "--block-size"};
  bool known = false;
  for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++) known |= !strcmp(a, with_value[k]);
  if (!known) return 0;
  if (!v) return di_cli_fail(cmd, "option %s needs a value", a);
  (*i)++;
  if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
    o->model_path = v;
  } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
    if (!di_arg_int(v, 1, 1024, &n)) return di_cli_fail(cmd, "--threads: '%s' must be 1..1024", v);
    o->threads = (int)n;
  } else if (!strcmp(a, "--ctx")) {
    if (!di_arg_int(v, 1, 1 << 24, &n)) return di_cli_fail(cmd, "--ctx: '%s' must be positive", v);
    o->ctx = (int)n;
  } else if (!strcmp(a, "--kv-type")) {
    if (!strcmp(v, "f16")) o->kv_type = DI_KV_DTYPE_F16;
    else if (!strcmp(v, "f32")) o->kv_type = DI_KV_DTYPE_F32;
    else if (!strcmp(v, "bf16")) o->kv_type = DI_KV_DTYPE_BF16;
    else return di_cli_fail(cmd, "--kv-type: '%s' must be f16, bf16 or f32", v);
  } else if (!strcmp(a, "--kv-mem")) {
    uint64_t b = 0;
    if (!di_arg_bytes(v, &b) || b == 0) return di_cli_fail(cmd, "--kv-mem: '%s' is not a size in bytes", v);
    o->kv_mem = (size_t)b;
  } else if (!strcmp(a, "--max-seqs")) {
    if (!di_arg_int(v, 1, 4096, &n)) return di_cli_fail(cmd, "--max-seqs: '%s' must be 1..4096", v);
    o->max_seqs = (int)n;
  } else if (!strcmp(a, "--max-batch-tokens")) {
    if (!di_arg_int(v, 1, 1 << 20, &n)) return di_cli_fail(cmd, "--max-batch-tokens: '%s' must be positive", v);
    o->max_batch_tokens = (int)n;
  } else if (!strcmp(a, "--block-size")) {
    if (!di_arg_int(v, 1, 4096, &n)) return di_cli_fail(cmd, "--block-size: '%s' must be 1..4096", v);
    o->block_size = (int)n;
  }
  return 1;
}
