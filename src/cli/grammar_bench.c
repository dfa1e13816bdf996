/* deepinfer grammar-bench: MaskBench's method on our matcher. Each schema is
 * compiled, each test instance serialised as Python's json.dumps does,
 * tokenised without special tokens and walked token by token: a valid
 * instance must have every token in the mask and end accepting; an invalid
 * one must be refused somewhere or end not accepting. Single thread. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/cli.h"
#include "grammar/grammar.h"
#include "grammar/json.h"
#include "tokenizer/tokenizer.h"

/* Wall time by default; --clock cpu counts this process's CPU time, which a
 * host shared with other work inflates far less. */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(bench_clock, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

typedef struct dvec {
  double *v;
  size_t n, cap;
} dvec;

static void dpush(dvec *d, double x) {
  if (d->n == d->cap) {
    d->cap = d->cap ? d->cap * 2 : 1024;
    d->v = realloc(d->v, d->cap * sizeof *d->v);
    if (!d->v) abort();
  }
  d->v[d->n++] = x;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(dvec *d, double p) {
  if (!d->n) return 0;
  size_t i = (size_t)(p * (double)(d->n - 1) + 0.5);
  return d->v[i];
}

typedef struct paths {
  char **v;
  size_t n, cap;
} paths;

static void add_path(paths *p, const char *s) {
  if (p->n == p->cap) {
    p->cap = p->cap ? p->cap * 2 : 256;
    p->v = realloc(p->v, p->cap * sizeof *p->v);
    if (!p->v) abort();
  }
  p->v[p->n++] = strdup(s);
}

static int cmps(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void usage(FILE *f) {
  fprintf(f, "usage: deepinfer grammar-bench --tokenizer PATH DIR_OR_FILES... [--json] [--verbose]\n"
             "       [--ws python|compact|free] [--timeout-s S] [--list FILE] [--clock wall|cpu] [--slow-us US]\n"
             "MaskBench files ({\"schema\":..., \"tests\":[{\"valid\":bool,\"data\":...}]}); a directory\n"
             "means its *.json files; --list FILE reads names (one a line) relative to the\n"
             "directory given. With --json the last line is the summary object. Times are\n"
             "wall-clock unless --clock cpu (this process's CPU time). --slow-us US prints each\n"
             "mask+commit slower than US to stderr (file, test, token index, time), to find\n"
             "what makes the tail.\n");
}

enum { R_PASS, R_COMPILE, R_VALIDATION, R_INVALIDATION, R_TIMEOUT };

int di_cmd_grammar_bench(int argc, char **argv) {
  const char *tokp = NULL, *list = NULL;
  bool json = false, verbose = false;
  double timeout_s = 60, slow_us = 0;
  di_grammar_opts opts = {.ws = DI_JSON_WS_PYTHON};
  paths in = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--tokenizer") && i + 1 < argc) tokp = argv[++i];
    else if (!strcmp(a, "--list") && i + 1 < argc) list = argv[++i];
    else if (!strcmp(a, "--json")) json = true;
    else if (!strcmp(a, "--verbose")) verbose = true;
    else if (!strcmp(a, "--timeout-s") && i + 1 < argc) timeout_s = atof(argv[++i]);
    else if (!strcmp(a, "--slow-us") && i + 1 < argc) slow_us = atof(argv[++i]);
    else if (!strcmp(a, "--clock") && i + 1 < argc) {
      const char *c = argv[++i];
      if (!strcmp(c, "wall")) bench_clock = CLOCK_MONOTONIC;
      else if (!strcmp(c, "cpu")) bench_clock = CLOCK_PROCESS_CPUTIME_ID;
      else return di_cli_fail("grammar-bench", "--clock: expected wall or cpu, got '%s'", c);
    } else if (!strcmp(a, "--ws") && i + 1 < argc) {
      const char *w = argv[++i];
      if (!strcmp(w, "python")) opts.ws = DI_JSON_WS_PYTHON;
      else if (!strcmp(w, "compact")) opts.ws = DI_JSON_WS_COMPACT;
      else if (!strcmp(w, "free")) opts.ws = DI_JSON_WS_FREE;
      else return di_cli_fail("grammar-bench", "--ws: expected python, compact or free, got '%s'", w);
    } else if (a[0] == '-') return di_cli_fail("grammar-bench", "unknown option '%s' (see --help)", a);
    else add_path(&in, a);
  }
  if (!tokp) return di_cli_fail("grammar-bench", "--tokenizer PATH is required");
  if (!in.n) return di_cli_fail("grammar-bench", "no MaskBench files or directories given");
  /* expand directories (and --list names inside the first directory) */
  paths files = {0};
  for (size_t i = 0; i < in.n; i++) {
    struct stat sb;
    if (stat(in.v[i], &sb)) return di_cli_fail("grammar-bench", "%s: %s", in.v[i], strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
      add_path(&files, in.v[i]);
      continue;
    }
    if (list) {
      FILE *lf = fopen(list, "r");
      if (!lf) return di_cli_fail("grammar-bench", "--list %s: %s", list, strerror(errno));
      char line[4096];
      while (fgets(line, sizeof line, lf)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0]) continue;
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", in.v[i], line);
        add_path(&files, p);
      }
      fclose(lf);
      continue;
    }
    DIR *d = opendir(in.v[i]);
    if (!d) return di_cli_fail("grammar-bench", "%s: %s", in.v[i], strerror(errno));
    struct dirent *e;
    size_t first = files.n;
    while ((e = readdir(d))) {
      size_t l = strlen(e->d_name);
      if (l < 5 || strcmp(e->d_name + l - 5, ".json")) continue;
      char p[8192];
      snprintf(p, sizeof p, "%s/%s", in.v[i], e->d_name);
      add_path(&files, p);
    }
    closedir(d);
    qsort(files.v + first, files.n - first, sizeof *files.v, cmps);
  }
  di_status st = {0};
  di_tokenizer *tok = NULL;
  if (di_tokenizer_load(tokp, &tok, &st)) return di_cli_fail("grammar-bench", "%s", st.msg);
  /* the vocabulary trie is built once per tokenizer: not a compile cost */
  di_grammar *warm = NULL;
  if (di_grammar_compile(tok, DI_GRAMMAR_JSON_ANY, NULL, 0, &opts, &warm, &st) == DI_OK) di_grammar_release(warm);
  size_t count[5] = {0}, n_tokens = 0;
  dvec tbm = {0}, ttfm = {0};
  uint32_t *mask = NULL;
  for (size_t fi = 0; fi < files.n; fi++) {
    const char *path = files.v[fi];
    json_error_t je;
    json_t *doc = json_load_file(path, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!doc || !json_object_get(doc, "schema")) {
      /* A file jansson cannot load (e.g. an object key holding a NUL byte) is a schema this
       * engine cannot compile: count it and go on, so one file does not end a benchmark run. */
      count[R_COMPILE]++;
      if (verbose) fprintf(stderr, "%s: compile_error: not loadable (%s)\n", path, doc ? "no \"schema\"" : je.text);
      json_decref(doc);
      continue;
    }
    char *src = json_dumps(json_object_get(doc, "schema"), JSON_COMPACT | JSON_ENCODE_ANY);
    di_grammar *g = NULL;
    di_status cst = {0};
    double t0 = now_us();
    di_code rc = di_grammar_compile(tok, DI_GRAMMAR_JSON_SCHEMA, src, strlen(src), &opts, &g, &cst);
    double t1 = now_us();
    free(src);
    int result = R_PASS;
    const char *why = "";
    char whybuf[700];
    if (rc) {
      result = R_COMPILE;
      snprintf(whybuf, sizeof whybuf, "%s", cst.msg);
      why = whybuf;
    } else {
      dpush(&ttfm, t1 - t0);
      if (!mask) mask = malloc(di_grammar_mask_words(g) * sizeof *mask);
      json_t *tests = json_object_get(doc, "tests");
      double start = now_us();
      for (size_t ti = 0; ti < json_array_size(tests) && result == R_PASS; ti++) {
        json_t *t = json_array_get(tests, ti);
        bool valid = json_is_true(json_object_get(t, "valid"));
        char *text = gj_py_dumps(json_object_get(t, "data"));
        int32_t *ids = NULL;
        size_t n = 0;
        di_status tst = {0};
        if (di_tokenizer_encode(tok, text, strlen(text), false, true, &ids, &n, &tst)) {
          free(text);
          result = R_VALIDATION;
          snprintf(whybuf, sizeof whybuf, "test %zu: tokenizer: %s", ti, tst.msg);
          why = whybuf;
          break;
        }
        di_gmatcher *m = NULL;
        di_gmatcher_new(g, &m, &tst);
        bool refused = false;
        size_t at = 0;
        for (size_t k = 0; k < n; k++) {
          double a = now_us();
          di_gmatcher_fill_mask(m, mask);
          bool allowed = mask[ids[k] >> 5] >> (ids[k] & 31) & 1;
          bool acc = allowed && di_gmatcher_accept_token(m, ids[k]);
          double b = now_us();
          dpush(&tbm, b - a);
          if (slow_us > 0 && b - a > slow_us) fprintf(stderr, "slow %s %zu %zu %.1f\n", path, ti, k, b - a);
          n_tokens++;
          if (allowed && !acc) {
            result = R_VALIDATION;
            snprintf(whybuf, sizeof whybuf, "test %zu: token %zu (id %d) in the mask but refused by the matcher", ti, k, ids[k]);
            why = whybuf;
            refused = true;
            break;
          }
          if (!allowed) {
            refused = true;
            at = k;
            break;
          }
          if (b - start > timeout_s * 1e6) break;
        }
        bool accepting = !refused && di_gmatcher_is_accepting(m);
        if (result == R_PASS) {
          if (now_us() - start > timeout_s * 1e6) result = R_TIMEOUT;
          else if (valid && (refused || !accepting)) {
            result = R_VALIDATION;
            size_t off = 0;
            for (size_t k = 0; k < at; k++) {
              size_t l;
              di_tokenizer_token_bytes(tok, ids[k], &l);
              off += l;
            }
            snprintf(whybuf, sizeof whybuf, "test %zu (valid) %s at byte %zu: ...%.60s", ti,
                     refused ? "refused" : "not accepting at the end", refused ? off : strlen(text),
                     text + (off > 30 && refused ? off - 30 : 0));
            why = whybuf;
          } else if (!valid && !refused && accepting) {
            result = R_INVALIDATION;
            snprintf(whybuf, sizeof whybuf, "test %zu (invalid) accepted: %.200s", ti, text);
            why = whybuf;
          }
        }
        di_gmatcher_free(m);
        free(ids);
        free(text);
      }
      di_grammar_release(g);
    }
    count[result]++;
    static const char *names[] = {"pass", "compile_error", "validation_error", "invalidation_error", "timeout"};
    if (verbose && result != R_PASS) fprintf(stderr, "%s: %s: %s\n", path, names[result], why);
    json_decref(doc);
  }
  qsort(tbm.v, tbm.n, sizeof *tbm.v, cmpd);
  qsort(ttfm.v, ttfm.n, sizeof *ttfm.v, cmpd);
  if (!json) {
    printf("schemas %zu  passing %zu  compile errors %zu  validation errors %zu  invalidation errors %zu  timeouts %zu\n",
           files.n, count[R_PASS], count[R_COMPILE], count[R_VALIDATION], count[R_INVALIDATION], count[R_TIMEOUT]);
    printf("mask+commit (us): p50 %.1f p90 %.1f p99 %.1f max %.1f over %zu tokens; compile (us): p50 %.1f p90 %.1f p99 %.1f max %.1f\n",
           pct(&tbm, .5), pct(&tbm, .9), pct(&tbm, .99), tbm.n ? tbm.v[tbm.n - 1] : 0, n_tokens, pct(&ttfm, .5),
           pct(&ttfm, .9), pct(&ttfm, .99), ttfm.n ? ttfm.v[ttfm.n - 1] : 0);
  } else {
    printf("{\"schemas\":%zu,\"passing\":%zu,\"compile_error\":%zu,\"validation_error\":%zu,\"invalidation_error\":%zu,"
           "\"timeout\":%zu,\"tbm_us\":{\"p50\":%.2f,\"p90\":%.2f,\"p99\":%.2f,\"max\":%.2f},"
           "\"ttfm_us\":{\"p50\":%.2f,\"p90\":%.2f,\"p99\":%.2f,\"max\":%.2f},\"tokens\":%zu}\n",
           files.n, count[R_PASS], count[R_COMPILE], count[R_VALIDATION], count[R_INVALIDATION], count[R_TIMEOUT],
           pct(&tbm, .5), pct(&tbm, .9), pct(&tbm, .99), tbm.n ? tbm.v[tbm.n - 1] : 0, pct(&ttfm, .5), pct(&ttfm, .9),
           pct(&ttfm, .99), ttfm.n ? ttfm.v[ttfm.n - 1] : 0, n_tokens);
  }
  free(mask);
  free(tbm.v);
  free(ttfm.v);
  for (size_t i = 0; i < files.n; i++) free(files.v[i]);
  for (size_t i = 0; i < in.n; i++) free(in.v[i]);
  free(files.v);
  free(in.v);
  di_tokenizer_free(tok);
  return 0;
}
