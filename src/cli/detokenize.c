/* deepinfer detokenize: a JSON array of ids on stdin -> decoded bytes. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tokenizer/tokenizer.h"

static const char USAGE[] =
    "usage: deepinfer detokenize --tokenizer PATH [--skip-special]\n"
    "\n"
    "Reads a JSON array of token ids from stdin and writes the decoded text.\n"
    "  --tokenizer PATH   tokenizer.json, a directory holding one, or a .gguf file\n"
    "  --skip-special     drop special tokens (HF skip_special_tokens=True)\n"
    "  --jsonl            batch mode for tests: each stdin line is a JSON array of ids,\n"
    "                     each output line the decoded text as a JSON string\n";

/* ids from a JSON array; NULL with *err set on a bad element */
static int32_t *ids_from_json(json_t *arr, size_t *n, size_t *bad) {
  *n = json_array_size(arr);
  int32_t *ids = malloc((*n ? *n : 1) * sizeof *ids);
  for (size_t i = 0; ids && i < *n; i++) {
    json_t *v = json_array_get(arr, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
      free(ids);
      *bad = i;
      return NULL;
    }
    ids[i] = (int32_t)json_integer_value(v);
  }
  return ids;
}

static int detokenize_jsonl(const char *path, bool skip) {
  di_status st = {0};
  di_tokenizer *t;
  if (di_tokenizer_load(path, &t, &st) != DI_OK) return di_cli_fail("detokenize", "%s", st.msg);
  char *line = NULL;
  size_t cap = 0, lineno = 0;
  ssize_t r;
  int rc = 0;
  while (rc == 0 && (r = getline(&line, &cap, stdin)) > 0) {
    lineno++;
    json_error_t e;
    json_t *arr = json_loadb(line, (size_t)r, 0, &e);
    size_t n, bad = 0;
    int32_t *ids = json_is_array(arr) ? ids_from_json(arr, &n, &bad) : NULL;
    if (arr) json_decref(arr);
    if (!ids) {
      rc = di_cli_fail("detokenize", "stdin line %zu: expected a JSON array of ids", lineno);
      break;
    }
    char *out;
    size_t len;
    if (di_tokenizer_decode(t, ids, n, skip, &out, &len, &st) != DI_OK) {
      free(ids);
      rc = di_cli_fail("detokenize", "stdin line %zu: %s", lineno, st.msg);
      break;
    }
    free(ids);
    json_t *s = json_stringn(out, len);
    char *js = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
    if (js) puts(js);
    else rc = di_cli_fail("detokenize", "stdin line %zu: encoding output failed", lineno);
    free(js);
    json_decref(s);
    free(out);
  }
  free(line);
  di_tokenizer_free(t);
  return rc ? rc : fflush(stdout) == 0 ? 0 : di_cli_fail("detokenize", "writing stdout failed");
}

int di_cmd_detokenize(int argc, char **argv) {
  const char *path = NULL;
  bool skip = false, jsonl = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(USAGE, stdout);
      return 0;
    } else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) {
      path = argv[++i];
    } else if (!strncmp(argv[i], "--tokenizer=", 12)) {
      path = argv[i] + 12;
    } else if (!strcmp(argv[i], "--skip-special")) {
      skip = true;
    } else if (!strcmp(argv[i], "--jsonl")) {
      jsonl = true;
    } else {
      return di_cli_fail("detokenize", "unknown or incomplete option '%s' (see --help)", argv[i]);
    }
  }
  if (!path) return di_cli_fail("detokenize", "--tokenizer PATH is required");
  if (jsonl) return detokenize_jsonl(path, skip);
  json_error_t e;
  json_t *arr = json_loadf(stdin, 0, &e);
  if (!arr || !json_is_array(arr)) {
    if (arr) json_decref(arr);
    return di_cli_fail("detokenize", "stdin: expected a JSON array of ids (line %d column %d: %s)",
                       e.line, e.column, arr ? "not an array" : e.text);
  }
  size_t n = json_array_size(arr);
  int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
  if (!ids) {
    json_decref(arr);
    return di_cli_fail("detokenize", "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(arr, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
      json_decref(arr);
      free(ids);
      return di_cli_fail("detokenize", "stdin: element %zu is not a token id", i);
    }
    ids[i] = (int32_t)json_integer_value(v);
  }
  json_decref(arr);
  di_status st = {0};
  di_tokenizer *t;
  if (di_tokenizer_load(path, &t, &st) != DI_OK) {
    free(ids);
    return di_cli_fail("detokenize", "%s", st.msg);
  }
  char *out;
  size_t len;
  di_code rc = di_tokenizer_decode(t, ids, n, skip, &out, &len, &st);
  free(ids);
  di_tokenizer_free(t);
  if (rc != DI_OK) return di_cli_fail("detokenize", "%s", st.msg);
  size_t w = fwrite(out, 1, len, stdout);
  free(out);
  if (w != len || fflush(stdout) != 0) return di_cli_fail("detokenize", "writing stdout failed");
  return 0;
}
