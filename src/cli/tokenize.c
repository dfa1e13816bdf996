/* deepinfer tokenize: raw bytes on stdin -> one JSON array of ids on stdout.
 * Safe by default: no BOS/EOS, special-token text is not parsed. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "tokenizer/tokenizer.h"

static const char USAGE[] =
    "usage: deepinfer tokenize --tokenizer PATH [--add-special] [--parse-special]\n"
    "\n"
    "Reads raw UTF-8 text from stdin and prints one JSON array of token ids.\n"
    "  --tokenizer PATH   tokenizer.json, a directory holding one, or a .gguf file\n"
    "  --add-special      apply the post-processor (e.g. prepend BOS)\n"
    "  --parse-special    recognise special-token text in the input (HF's default\n"
    "                     encode); without it special tokens are plain text\n"
    "  --jsonl            batch mode for tests: each stdin line is a JSON string,\n"
    "                     each output line the JSON array of its ids\n"
    "  --stats            print encode time and throughput to stderr\n";

/* Reads all of f; NULL on failure. */
char *di_cli_read_all(FILE *f, size_t *len);
char *di_cli_read_all(FILE *f, size_t *len) {
  size_t cap = 1 << 16, n = 0;
  char *p = malloc(cap);
  if (!p) return NULL;
  size_t r;
  while ((r = fread(p + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) {
      char *q = realloc(p, cap * 2);
      if (!q) {
        free(p);
        return NULL;
      }
      p = q;
      cap *= 2;
    }
  }
  if (ferror(f)) {
    free(p);
    return NULL;
  }
  p[n] = 0;
  *len = n;
  return p;
}

static void print_ids(FILE *f, const int32_t *ids, size_t n) {
  fputc('[', f);
  for (size_t i = 0; i < n; i++) fprintf(f, i ? ", %d" : "%d", ids[i]);
  fputs("]\n", f);
}

static int tokenize_jsonl(const di_tokenizer *t, bool add, bool parse, bool stats) {
  double enc_s = 0;
  size_t bytes = 0, tokens = 0;
  char *line = NULL;
  size_t cap = 0, lineno = 0;
  ssize_t r;
  while ((r = getline(&line, &cap, stdin)) > 0) {
    lineno++;
    json_error_t e;
    json_t *j = json_loadb(line, (size_t)r, JSON_ALLOW_NUL | JSON_DECODE_ANY, &e);
    if (!j || !json_is_string(j)) {
      if (j) json_decref(j);
      free(line);
      return di_cli_fail("tokenize", "stdin line %zu: expected a JSON string", lineno);
    }
    di_status st = {0};
    int32_t *ids;
    size_t n;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    di_code rc = di_tokenizer_encode(t, json_string_value(j), json_string_length(j), add, parse, &ids, &n, &st);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    enc_s += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    bytes += json_string_length(j);
    tokens += n;
    if (rc != DI_OK) {
      json_decref(j);
      free(line);
      return di_cli_fail("tokenize", "stdin line %zu: %s", lineno, st.msg);
    }
    json_decref(j);
    print_ids(stdout, ids, n);
    free(ids);
  }
  free(line);
  if (stats)
    fprintf(stderr, "encode_s=%.6f bytes=%zu tokens=%zu MB_per_s=%.2f\n", enc_s, bytes, tokens,
            enc_s > 0 ? (double)bytes / 1e6 / enc_s : 0.0);
  return fflush(stdout) == 0 ? 0 : di_cli_fail("tokenize", "writing stdout failed");
}

int di_cmd_tokenize(int argc, char **argv) {
  const char *path = NULL;
  bool add = false, parse = false, jsonl = false, stats = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(USAGE, stdout);
      return 0;
    } else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) {
      path = argv[++i];
    } else if (!strncmp(argv[i], "--tokenizer=", 12)) {
      path = argv[i] + 12;
    } else if (!strcmp(argv[i], "--add-special")) {
      add = true;
    } else if (!strcmp(argv[i], "--parse-special")) {
      parse = true;
    } else if (!strcmp(argv[i], "--jsonl")) {
      jsonl = true;
    } else if (!strcmp(argv[i], "--stats")) {
      stats = true;
    } else {
      return di_cli_fail("tokenize", "unknown or incomplete option '%s' (see --help)", argv[i]);
    }
  }
  if (!path) return di_cli_fail("tokenize", "--tokenizer PATH is required");
  di_status st = {0};
  di_tokenizer *t;
  if (di_tokenizer_load(path, &t, &st) != DI_OK) return di_cli_fail("tokenize", "%s", st.msg);
  if (jsonl) {
    int rc = tokenize_jsonl(t, add, parse, stats);
    di_tokenizer_free(t);
    return rc;
  }
  size_t len;
  char *text = di_cli_read_all(stdin, &len);
  if (!text) {
    di_tokenizer_free(t);
    return di_cli_fail("tokenize", "reading stdin failed");
  }
  int32_t *ids;
  size_t n;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  di_code rc = di_tokenizer_encode(t, text, len, add, parse, &ids, &n, &st);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  free(text);
  di_tokenizer_free(t);
  if (rc != DI_OK) return di_cli_fail("tokenize", "%s", st.msg);
  if (stats) {
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    fprintf(stderr, "encode_s=%.6f bytes=%zu tokens=%zu MB_per_s=%.2f\n", s, len, n,
            s > 0 ? (double)len / 1e6 / s : 0.0);
  }
  print_ids(stdout, ids, n);
  free(ids);
  return fflush(stdout) == 0 ? 0 : di_cli_fail("tokenize", "writing stdout failed");
}
