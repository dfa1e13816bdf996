/* deepinfer grammar-check: which strings a grammar matches as a whole (no
 * tokenizer: the byte-level matcher). One JSON string per stdin line, one
 * `true`/`false` per stdout line. For property tests against reference
 * regex engines and for checking a grammar by hand. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "grammar/grammar.h"

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t cap = 0, n = 0, k;
  do {
    if (n + 65536 > cap) {
      cap = (n + 65536) * 2;
      char *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = nb;
    }
    k = fread(buf + n, 1, cap - n, f);
    n += k;
  } while (k > 0);
  fclose(f);
  *len = n;
  return buf;
}

int di_cmd_grammar_check(int argc, char **argv) {
  di_grammar_kind kind = DI_GRAMMAR_REGEX;
  const char *arg = NULL;
  di_grammar_opts o = {.ws = DI_JSON_WS_PYTHON};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: deepinfer grammar-check (--regex RE | --json-schema FILE | --grammar FILE) [--ws python|compact|free]\n"
             "Reads one JSON string per line on stdin; prints true or false per line: whether the\n"
             "grammar matches the whole string (JSON Schema output spacing: --ws, default python).\n");
      return 0;
    }
    if (i + 1 >= argc) return di_cli_fail("grammar-check", "option %s needs a value", argv[i]);
    if (!strcmp(argv[i], "--regex")) kind = DI_GRAMMAR_REGEX, arg = argv[++i];
    else if (!strcmp(argv[i], "--json-schema")) kind = DI_GRAMMAR_JSON_SCHEMA, arg = argv[++i];
    else if (!strcmp(argv[i], "--grammar")) kind = DI_GRAMMAR_GBNF, arg = argv[++i];
    else if (!strcmp(argv[i], "--ws")) {
      const char *w = argv[++i];
      o.ws = !strcmp(w, "compact") ? DI_JSON_WS_COMPACT : !strcmp(w, "free") ? DI_JSON_WS_FREE : DI_JSON_WS_PYTHON;
    } else return di_cli_fail("grammar-check", "unknown option '%s' (see --help)", argv[i]);
  }
  if (!arg) return di_cli_fail("grammar-check", "give --regex, --json-schema or --grammar");
  size_t len = strlen(arg);
  char *src = kind == DI_GRAMMAR_REGEX ? strdup(arg) : read_file(arg, &len);
  if (!src) return di_cli_fail("grammar-check", "cannot read %s", arg);
  di_grammar *g = NULL;
  di_status st = {0};
  di_code rc = di_grammar_compile(NULL, kind, src, len, &o, &g, &st);
  free(src);
  if (rc) return di_cli_fail("grammar-check", "%s", st.msg);
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  int ret = 0;
  while ((n = getline(&line, &cap, stdin)) > 0) {
    json_error_t je;
    json_t *s = json_loadb(line, (size_t)n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!json_is_string(s)) {
      json_decref(s);
      ret = di_cli_fail("grammar-check", "stdin: each line must be a JSON string");
      break;
    }
    di_gmatcher *m = NULL;
    di_gmatcher_new(g, &m, &st);
    bool ok = di_gmatcher_accept_bytes(m, json_string_value(s), json_string_length(s)) && di_gmatcher_is_accepting(m);
    puts(ok ? "true" : "false");
    di_gmatcher_free(m);
    json_decref(s);
  }
  free(line);
  di_grammar_release(g);
  return ret;
}
