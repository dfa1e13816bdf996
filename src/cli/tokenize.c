/* deepinfer tokenize: raw bytes on stdin -> one JSON array of ids on stdout.
 * Safe by default: no BOS/EOS, special-token text is not parsed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tokenizer/tokenizer.h"

static const char USAGE[] =
    "usage: deepinfer tokenize --tokenizer PATH [--add-special] [--parse-special]\n"
    "\n"
    "Reads raw UTF-8 text from stdin and prints one JSON array of token ids.\n"
    "  --tokenizer PATH   tokenizer.json, a directory holding one, or a .gguf file\n"
    "  --add-special      apply the post-processor (e.g. prepend BOS)\n"
    "  --parse-special    recognise special-token text in the input (HF's default\n"
    "                     encode); without it special tokens are plain text\n";

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

int di_cmd_tokenize(int argc, char **argv) {
  const char *path = NULL;
  bool add = false, parse = false;
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
    } else {
      return di_cli_fail("tokenize", "unknown or incomplete option '%s' (see --help)", argv[i]);
    }
  }
  if (!path) return di_cli_fail("tokenize", "--tokenizer PATH is required");
  di_status st = {0};
  di_tokenizer *t;
  if (di_tokenizer_load(path, &t, &st) != DI_OK) return di_cli_fail("tokenize", "%s", st.msg);
  size_t len;
  char *text = di_cli_read_all(stdin, &len);
  if (!text) {
    di_tokenizer_free(t);
    return di_cli_fail("tokenize", "reading stdin failed");
  }
  int32_t *ids;
  size_t n;
  di_code rc = di_tokenizer_encode(t, text, len, add, parse, &ids, &n, &st);
  free(text);
  di_tokenizer_free(t);
  if (rc != DI_OK) return di_cli_fail("tokenize", "%s", st.msg);
  putchar('[');
  for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
  puts("]");
  free(ids);
  return fflush(stdout) == 0 ? 0 : di_cli_fail("tokenize", "writing stdout failed");
}
