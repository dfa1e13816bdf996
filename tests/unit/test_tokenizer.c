/* Conformance of src/tokenizer against HF `tokenizers` 0.23.3 on the six
 * reference tokenizers in ../shared/data/tokenizers: every corpus string,
 * every encode mode, every decode mode, and the streaming detokenizer
 * token by token. The .xz files are unpacked once into
 * ~/.cache/deepinfer/tokenizers (never into the repository). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "check.h"
#include "tokenizer/tokenizer.h"

static const char *NAMES[] = {"deepseek-v3", "llama3", "qwen3", "gemma3", "gpt-oss", "mistral7b"};

static char cache_root[1024];

static bool exists(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0;
}

static int sh(const char *fmt, const char *a, const char *b) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, fmt, a, b);
  return system(cmd);
}

/* Unpacks <name>/ and expected/<name>.jsonl into the cache; returns the dir. */
static bool prepare(const char *name, char *dir, size_t dn, char *exp, size_t en) {
  char src[1024], f[1200];
  di_test_data("tokenizers", src, sizeof src);
  snprintf(dir, dn, "%s/%s", cache_root, name);
  snprintf(exp, en, "%s/%s.expected.jsonl", cache_root, name);
  snprintf(f, sizeof f, "%s/tokenizer.json", dir);
  if (!exists(f)) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && cp %s/%s/*.json '%s'/ 2>/dev/null; cp %s/%s/*.jinja '%s'/ 2>/dev/null; "
             "xz -dc '%s/%s/tokenizer.json.xz' > '%s/tokenizer.json.tmp' && mv '%s/tokenizer.json.tmp' '%s/tokenizer.json'",
             dir, src, name, dir, src, name, dir, src, name, dir, dir, dir);
    if (system(cmd) != 0) return false;
  }
  if (!exists(exp)) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "xz -dc '%s/expected/%s.jsonl.xz' > '%s.tmp' && mv '%s.tmp' '%s'", src,
             name, exp, exp, exp);
    if (system(cmd) != 0) return false;
  }
  return true;
}

static bool ids_equal(json_t *arr, const int32_t *ids, size_t n) {
  if (!json_is_array(arr) || json_array_size(arr) != n) return false;
  for (size_t i = 0; i < n; i++)
    if (json_integer_value(json_array_get(arr, i)) != ids[i]) return false;
  return true;
}

static int32_t *json_ids(json_t *arr, size_t *n) {
  *n = json_array_size(arr);
  int32_t *p = malloc((*n + 1) * sizeof *p);
  for (size_t i = 0; i < *n; i++) p[i] = (int32_t)json_integer_value(json_array_get(arr, i));
  return p;
}

static int reported = 0;

static void report(const char *name, size_t line, const char *what, const char *text) {
  if (reported++ < 30) fprintf(stderr, "  %s line %zu: %s mismatch: %.80s\n", name, line, what, text);
}

static void check_decode(const di_tokenizer *t, const char *name, size_t line, json_t *ids_j,
                         bool skip, json_t *want, const char *what) {
  if (!json_is_string(want)) return;
  size_t n;
  int32_t *ids = json_ids(ids_j, &n);
  di_status st = {0};
  char *out;
  size_t len;
  di_code rc = di_tokenizer_decode(t, ids, n, skip, &out, &len, &st);
  bool ok = rc == DI_OK && len == json_string_length(want) && memcmp(out, json_string_value(want), len) == 0;
  CHECK(ok);
  if (!ok) report(name, line, what, json_string_value(want));
  /* streaming, token by token, must concatenate to the same bytes */
  if (rc == DI_OK) {
    di_detok_stream *s;
    di_detok_stream_new(t, skip, &s, &st);
    char *acc = malloc(len + 64);
    size_t an = 0;
    bool sok = true;
    for (size_t i = 0; i <= n && sok; i++) {
      const char *p;
      size_t pl;
      rc = i < n ? di_detok_stream_push(s, ids[i], &p, &pl, &st) : di_detok_stream_flush(s, &p, &pl, &st);
      if (rc != DI_OK || an + pl > len) {
        sok = false;
        break;
      }
      size_t bad;
      /* each chunk is whole UTF-8 */
      if (!di_utf8_valid(p, pl, &bad)) sok = false;
      memcpy(acc + an, p, pl);
      an += pl;
    }
    sok = sok && an == len && memcmp(acc, out, len) == 0;
    CHECK(sok);
    if (!sok) report(name, line, "stream", json_string_value(want));
    free(acc);
    di_detok_stream_free(s);
    free(out);
  }
  free(ids);
}

static void run_one(const char *name) {
  char dir[1100], exp[1200];
  if (!prepare(name, dir, sizeof dir, exp, sizeof exp)) {
    CHECKF(0, "could not unpack %s", name);
    return;
  }
  di_status st = {0};
  di_tokenizer *t;
  clock_t c0 = clock();
  di_code rc = di_tokenizer_load(dir, &t, &st);
  CHECKF(rc == DI_OK, "%s: %s", name, st.msg);
  if (rc != DI_OK) return;
  double load_s = (double)(clock() - c0) / CLOCKS_PER_SEC;
  FILE *f = fopen(exp, "r");
  CHECK(f != NULL);
  if (!f) return;
  char *line = NULL;
  size_t cap = 0, lineno = 0, mism = 0, checks0 = (size_t)di_test_checks, fails0 = (size_t)di_test_failures;
  ssize_t r;
  static const struct {
    const char *key;
    bool add, parse;
  } modes[] = {{"ids_parse_special", false, true},
               {"ids_parse_special_add_special", true, true},
               {"ids_no_parse_special", false, false},
               {"ids_no_parse_special_add_special", true, false}};
  while ((r = getline(&line, &cap, f)) > 0) {
    lineno++;
    json_error_t e;
    json_t *o = json_loads(line, JSON_ALLOW_NUL, &e);
    if (!o) {
      CHECKF(0, "%s line %zu: bad json", name, lineno);
      continue;
    }
    json_t *tx = json_object_get(o, "text");
    const char *text = json_string_value(tx);
    size_t tl = json_string_length(tx);
    for (int m = 0; m < 4; m++) {
      json_t *want = json_object_get(o, modes[m].key);
      if (!want) continue;
      int32_t *ids;
      size_t n;
      rc = di_tokenizer_encode(t, text, tl, modes[m].add, modes[m].parse, &ids, &n, &st);
      bool ok = rc == DI_OK && ids_equal(want, ids, n);
      CHECK(ok);
      if (!ok) {
        mism++;
        report(name, lineno, modes[m].key, text);
      }
      if (rc == DI_OK) free(ids);
    }
    json_t *ps = json_object_get(o, "ids_parse_special"), *psa = json_object_get(o, "ids_parse_special_add_special");
    json_t *nps = json_object_get(o, "ids_no_parse_special");
    check_decode(t, name, lineno, ps, false, json_object_get(o, "decode"), "decode");
    check_decode(t, name, lineno, ps, true, json_object_get(o, "decode_skip_special"), "decode_skip_special");
    check_decode(t, name, lineno, psa, false, json_object_get(o, "decode_add_special"), "decode_add_special");
    check_decode(t, name, lineno, psa, true, json_object_get(o, "decode_add_special_skip_special"),
                 "decode_add_special_skip_special");
    check_decode(t, name, lineno, nps, false, json_object_get(o, "decode_no_parse_special"), "decode_no_parse_special");
    json_decref(o);
  }
  free(line);
  fclose(f);
  printf("%-12s load %.2fs  %zu lines  %d checks  %d failed\n", name, load_s, lineno,
         di_test_checks - (int)checks0, di_test_failures - (int)fails0);
  CHECKF(lineno >= 800, "%s: only %zu expected lines", name, lineno);
  di_tokenizer_free(t);
}

int main(int argc, char **argv) {
  const char *home = getenv("HOME");
  snprintf(cache_root, sizeof cache_root, "%s/.cache/deepinfer/tokenizers", home ? home : "/tmp");
  sh("mkdir -p '%s'%s", cache_root, "");
  for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
    if (argc < 2 || !strcmp(argv[1], NAMES[i])) run_one(NAMES[i]);
  return di_test_finish("test_tokenizer");
}
