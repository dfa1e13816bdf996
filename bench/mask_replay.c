/* The constraint's own work in decoding, without the model: for recorded
 * token sequences (what a constrained run generated), one fill_mask and one
 * accept per token, in one process with one grammar, as the engine does for
 * requests that share a compiled grammar (state caches cold at the start).
 * Meant to run under callgrind (deterministic instruction counts); prints
 * the tokens, the CPU time and an FNV hash of every mask, which must not
 * change with an optimisation of the mask code.
 *
 *   bench_mask_replay TOKENIZER SCHEMA.json IDS_FILE... [--ws free|python|compact]
 *
 * IDS_FILE: a JSON array of token ids, e.g. `deepinfer run ... --json-schema
 * SCHEMA.json --temp 0 --ignore-eos --print-ids`'s last line (text before the
 * '[' is skipped). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)sz + 1);
  *n = s ? fread(s, 1, (size_t)sz, f) : 0;
  if (s) s[*n] = 0;
  fclose(f);
  return s;
}

static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  di_grammar_opts o = {.ws = DI_JSON_WS_FREE};
  int nf = 0;
  const char *files[256];
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "--ws") && i + 1 < argc) {
      const char *w = argv[++i];
      o.ws = !strcmp(w, "python") ? DI_JSON_WS_PYTHON : !strcmp(w, "compact") ? DI_JSON_WS_COMPACT : DI_JSON_WS_FREE;
    } else if (nf < 256) {
      files[nf++] = argv[i];
    }
  }
  if (argc < 4 || !nf) {
    fprintf(stderr, "usage: bench_mask_replay TOKENIZER SCHEMA.json IDS_FILE... [--ws free|python|compact]\n");
    return 2;
  }
  di_status st = {0};
  di_tokenizer *tok = NULL;
  if (di_tokenizer_load(argv[1], &tok, &st) != DI_OK) {
    fprintf(stderr, "bench_mask_replay: %s\n", st.msg);
    return 1;
  }
  size_t n = 0;
  char *src = slurp(argv[2], &n);
  di_grammar *g = NULL;
  if (!src || di_grammar_compile(tok, DI_GRAMMAR_JSON_SCHEMA, src, n, &o, &g, &st) != DI_OK) {
    fprintf(stderr, "bench_mask_replay: %s: %s\n", argv[2], src ? st.msg : "cannot read");
    return 1;
  }
  size_t words = di_grammar_mask_words(g);
  uint32_t *mask = malloc(words * sizeof *mask);
  uint64_t h = 0xcbf29ce484222325ull;
  long tokens = 0;
  int rc = 0;
  double t0 = cpu_s();
  for (int f = 0; f < nf && !rc; f++) {
    size_t len = 0;
    char *ids = slurp(files[f], &len), *p = ids ? strchr(ids, '[') : NULL;
    di_gmatcher *m = NULL;
    if (!p || di_gmatcher_new(g, &m, &st) != DI_OK) {
      fprintf(stderr, "bench_mask_replay: %s: no id list\n", files[f]);
      rc = 1;
    }
    for (char *e; !rc && *p && *p != ']'; p = e) {
      long id = strtol(p + 1, &e, 10);
      if (e == p + 1) break;
      di_gmatcher_fill_mask(m, mask);
      for (size_t w = 0; w < words; w++) h = (h ^ mask[w]) * 0x100000001b3ull;
      if (id < 0 || !(mask[id >> 5] >> (id & 31) & 1) || !di_gmatcher_accept_token(m, (int32_t)id)) {
        fprintf(stderr, "bench_mask_replay: %s: token %ld (#%ld) not allowed\n", files[f], id, tokens);
        rc = 1;
      }
      tokens++;
    }
    di_gmatcher_free(m);
    free(ids);
  }
  double cpu = cpu_s() - t0;
  if (!rc) printf("%ld tokens, %.1f us CPU per token, masks fnv %016llx\n", tokens, 1e6 * cpu / (double)(tokens ? tokens : 1),
                  (unsigned long long)h);
  free(mask);
  free(src);
  di_grammar_release(g);
  di_tokenizer_free(tok);
  return rc;
}
