/* Tokenizer behaviour beyond conformance: hostile input (invalid UTF-8 of
 * every kind, NUL bytes, 10 MB without spaces, 100k repeats) gives clear
 * errors or bounded work; malformed tokenizer.json names the key at fault;
 * prompt assembly from spans never lets content produce an added token;
 * accessors. Uses the tokenizers unpacked by test_tokenizer (or unpacks). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "check.h"
#include "tokenizer/tokenizer.h"

static char root[1024];

static di_tokenizer *load(const char *name) {
  char dir[1200], f[1300];
  snprintf(dir, sizeof dir, "%s/%s", root, name);
  snprintf(f, sizeof f, "%s/tokenizer.json", dir);
  struct stat sb;
  if (stat(f, &sb) != 0) {
    char src[1024], cmd[16384];
    di_test_data("tokenizers", src, sizeof src);
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && cp %s/%s/*.json '%s'/ 2>/dev/null; xz -dc '%s/%s/tokenizer.json.xz' > '%s.tmp' && mv '%s.tmp' '%s'",
             dir, src, name, dir, src, name, f, f, f);
    if (system(cmd) != 0) return NULL;
  }
  di_status st = {0};
  di_tokenizer *t = NULL;
  CHECKF(di_tokenizer_load(dir, &t, &st) == DI_OK, "%s: %s", name, st.msg);
  return t;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void invalid_utf8(const di_tokenizer *t) {
  static const struct {
    const char *s;
    size_t len, off;
  } cases[] = {
      {"ab\xc0\xaf", 4, 2},          /* overlong '/' */
      {"\xe0\x80\xaf", 3, 0},        /* overlong, 3 bytes */
      {"x\xf0\x80\x80\xaf", 5, 1},   /* overlong, 4 bytes */
      {"ok \xed\xa0\x80", 6, 3},     /* UTF-16 surrogate */
      {"\xe4\xbd", 2, 0},            /* truncated */
      {"abc\xe4\xbd", 5, 3},         /* truncated at the end */
      {"a\x80z", 3, 1},              /* stray continuation byte */
      {"\xf5\x80\x80\x80", 4, 0},    /* lead byte past U+10FFFF */
      {"\xf4\x90\x80\x80", 4, 0},    /* U+110000 */
      {"\xff", 1, 0},
      {"hello \xe4\xbd\xa0\xe5", 10, 9},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    di_status st = {0};
    int32_t *ids = NULL;
    size_t n;
    di_code rc = di_tokenizer_encode(t, cases[i].s, cases[i].len, false, true, &ids, &n, &st);
    char want[64];
    snprintf(want, sizeof want, "byte offset %zu", cases[i].off);
    CHECKF(rc == DI_ERR_INVALID && strstr(st.msg, want), "case %zu: rc %d msg '%s'", i, rc, st.msg);
    size_t bad = 99;
    CHECK(!di_utf8_valid(cases[i].s, cases[i].len, &bad) && bad == cases[i].off);
  }
  CHECK(di_utf8_valid("\xf4\x8f\xbf\xbf\xed\x9f\xbf\xee\x80\x80", 10, NULL)); /* U+10FFFF, U+D7FF, U+E000 */
}

static void roundtrip(const di_tokenizer *t, const char *what, const char *s, size_t n, double limit) {
  di_status st = {0};
  int32_t *ids;
  size_t k;
  double t0 = now();
  di_code rc = di_tokenizer_encode(t, s, n, false, false, &ids, &k, &st);
  double dt = now() - t0;
  CHECKF(rc == DI_OK, "%s: %s", what, st.msg);
  CHECKF(dt < limit, "%s: encode took %.1fs (limit %.0fs)", what, dt, limit);
  if (rc != DI_OK) return;
  char *out;
  size_t len;
  rc = di_tokenizer_decode(t, ids, k, false, &out, &len, &st);
  CHECKF(rc == DI_OK && len == n && memcmp(out, s, n) == 0, "%s: decode(encode(x)) != x", what);
  if (rc == DI_OK) free(out);
  free(ids);
  printf("  %-28s %zu bytes -> %zu ids in %.2fs\n", what, n, k, dt);
}

static void hostile(const di_tokenizer *t, const char *name) {
  static const char *reps[] = {"a", " ", "1", "\n", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "<", "\t "};
  char what[96];
  for (size_t r = 0; r < sizeof reps / sizeof reps[0]; r++) {
    size_t l = strlen(reps[r]), n = 100000 * l;
    char *s = malloc(n);
    for (size_t i = 0; i < 100000; i++) memcpy(s + i * l, reps[r], l);
    snprintf(what, sizeof what, "%s 100k x %02x", name, (unsigned char)reps[r][0]);
    roundtrip(t, what, s, n, 60);
    free(s);
  }
  /* NUL bytes are text like any other */
  roundtrip(t, "NUL bytes", "a\0b\0\0c", 6, 5);
}

static void malformed(void) {
  static const struct {
    const char *json, *want;
  } cases[] = {
      {"{", "line 1"},
      {"[]", "top level"},
      {"{\"added_tokens\": []}", "missing \"model\""},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}", "model.merges[0]"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [7]}}", "model.merges[0]"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}", "used twice"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []}}", "bad id"},
      {"{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", "Unigram"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}",
       "bad regex"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"normalizer\": {\"type\": \"Bogus\"}}", "Bogus"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"unk_token\": \"<unk>\"}}", "unk_token"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": 5}]}", "added_tokens[0]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    di_status st = {0};
    di_tokenizer *t = NULL;
    di_code rc = di_tokenizer_from_json(cases[i].json, strlen(cases[i].json), NULL, 0, &t, &st);
    CHECKF(rc != DI_OK && t == NULL && strstr(st.msg, cases[i].want), "case %zu: rc %d msg '%s'", i, rc, st.msg);
  }
  di_status st = {0};
  di_tokenizer *t;
  CHECK(di_tokenizer_load("/nonexistent/tokenizer.json", &t, &st) == DI_ERR_IO && strstr(st.msg, "/nonexistent"));
}

/* Content spans never yield an added token; template spans do; the result
 * equals encoding the joined text when the content holds no token text. */
static size_t count_special(const di_tokenizer *t, const char *s, int32_t *first, int32_t *last) {
  di_status st = {0};
  int32_t *ids;
  size_t n, k = 0;
  if (di_tokenizer_encode(t, s, strlen(s), false, true, &ids, &n, &st) != DI_OK) return 0;
  for (size_t i = 0; i < n; i++) k += di_tokenizer_is_special(t, ids[i]);
  if (first) *first = n ? ids[0] : -1;
  if (last) *last = n ? ids[n - 1] : -1;
  free(ids);
  return k;
}

static void spans(const di_tokenizer *t, const char *name, const char *open, const char *close) {
  int32_t n_vocab = di_tokenizer_n_vocab(t);
  size_t leaks = 0, tested = 0;
  int32_t o, c;
  size_t template_added = count_special(t, open, &o, NULL) + count_special(t, close, NULL, &c);
  for (int32_t id = 0; id < n_vocab; id++) {
    if (!di_tokenizer_is_added(t, id)) continue;
    size_t tl;
    const char *tx = di_tokenizer_token_text(t, id, &tl);
    char content[512];
    if (tl + 20 > sizeof content) continue;
    int cl = snprintf(content, sizeof content, "say %.*s now", (int)tl, tx);
    di_tok_span sp[3] = {{open, strlen(open), DI_TOK_PARSE_ALL},
                         {content, (size_t)cl, DI_TOK_PARSE_NONE},
                         {close, strlen(close), DI_TOK_PARSE_ALL}};
    di_status st = {0};
    int32_t *ids;
    size_t n;
    if (di_tokenizer_encode_spans(t, sp, 3, false, &ids, &n, &st) != DI_OK) {
      CHECKF(0, "%s: %s", name, st.msg);
      continue;
    }
    tested++;
    /* only the template's own tokens may be special. (Non-special added
     * pieces such as Gemma's "▁▁" or "<table>" are ordinary vocabulary that
     * BPE may legitimately reach from plain text.) */
    size_t added = 0;
    for (size_t i = 0; i < n; i++) added += di_tokenizer_is_special(t, ids[i]);
    if (added != template_added) leaks++;
    bool has_open = n > 0 && ids[0] == o, has_close = n > 0 && ids[n - 1] == c;
    CHECKF(has_open && has_close, "%s: template tokens lost around id %d", name, id);
    free(ids);
    /* with the opt-in (content parsed as ALL) the token does appear */
    sp[1].parse = DI_TOK_PARSE_ALL;
    if (di_tokenizer_encode_spans(t, sp, 3, false, &ids, &n, &st) == DI_OK) {
      bool found = false;
      for (size_t i = 0; i < n; i++) found |= ids[i] == id;
      CHECKF(found, "%s: opt-in did not produce id %d", name, id);
      free(ids);
    }
  }
  CHECKF(leaks == 0, "%s: %zu special tokens leaked from content", name, leaks);
  CHECK(tested > 0);
  /* plain content: spans == joined text */
  const char *msg = " Hello, world! 你好 123";
  char joined[256];
  snprintf(joined, sizeof joined, "%s%s%s", open, msg, close);
  di_tok_span sp[3] = {{open, strlen(open), DI_TOK_PARSE_ALL},
                       {msg, strlen(msg), DI_TOK_PARSE_NONE},
                       {close, strlen(close), DI_TOK_PARSE_ALL}};
  di_status st = {0};
  int32_t *a, *b;
  size_t na, nb;
  CHECK(di_tokenizer_encode_spans(t, sp, 3, true, &a, &na, &st) == DI_OK);
  CHECK(di_tokenizer_encode(t, joined, strlen(joined), true, true, &b, &nb, &st) == DI_OK);
  CHECKF(na == nb && memcmp(a, b, na * sizeof *a) == 0, "%s: spans differ from the joined text", name);
  free(a);
  free(b);
  printf("  %-12s %zu added tokens placed in content: %zu special ids leaked\n", name, tested, leaks);
}

static void accessors(void) {
  di_tokenizer *t = load("llama3");
  if (!t) return;
  CHECK(di_tokenizer_n_vocab(t) == 128256);
  CHECK(di_tokenizer_bos(t) == 128000);
  CHECK(di_tokenizer_add_bos(t));
  const int32_t *eos;
  size_t ne = di_tokenizer_eos(t, &eos);
  bool eot = false;
  for (size_t i = 0; i < ne; i++) eot |= eos[i] == 128009;
  CHECK(eot);
  CHECK(di_tokenizer_find(t, "<|eot_id|>", 10) == 128009);
  CHECK(di_tokenizer_is_special(t, 128009) && !di_tokenizer_is_special(t, 15339));
  size_t l;
  const char *b = di_tokenizer_token_bytes(t, di_tokenizer_find(t, "\xc4\xa0hello", 7), &l);
  CHECK(b && l == 6 && memcmp(b, " hello", 6) == 0);
  CHECK(di_tokenizer_chat_template(t, NULL) != NULL);
  CHECK(di_tokenizer_special_text(t, "bos_token") && !strcmp(di_tokenizer_special_text(t, "bos_token"), "<|begin_of_text|>"));
  CHECK(di_tokenizer_token_text(t, -1, &l) == NULL && di_tokenizer_token_text(t, 1 << 20, &l) == NULL);
  int32_t bad[2] = {15339, 999999};
  di_status st = {0};
  char *out;
  size_t len;
  CHECK(di_tokenizer_decode(t, bad, 2, false, &out, &len, &st) == DI_ERR_RANGE && strstr(st.msg, "999999"));
  invalid_utf8(t);
  hostile(t, "llama3");
  /* 10 MB without spaces: bounded, linearithmic work */
  size_t n = 10u << 20;
  char *big = malloc(n);
  unsigned x = 1;
  for (size_t i = 0; i < n; i++) {
    x = x * 1103515245u + 12345u;
    big[i] = (char)('a' + (x >> 16) % 26);
  }
  roundtrip(t, "llama3 10 MB no spaces", big, n, 240);
  free(big);
  spans(t, "llama3", "<|start_header_id|>user<|end_header_id|>\n\n", "<|eot_id|>");
  di_tokenizer_free(t);
}

int main(void) {
  const char *home = getenv("HOME");
  snprintf(root, sizeof root, "%s/.cache/deepinfer/tokenizers", home ? home : "/tmp");
  malformed();
  accessors();
  di_tokenizer *t = load("mistral7b");
  if (t) {
    invalid_utf8(t);
    hostile(t, "mistral7b");
    spans(t, "mistral7b", "[INST]", "[/INST]");
    di_tokenizer_free(t);
  }
  static const struct {
    const char *name, *open, *close;
  } sp[] = {{"qwen3", "<|im_start|>user\n", "<|im_end|>"},
            {"deepseek-v3", "<\xef\xbd\x9cUser\xef\xbd\x9c>", "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"},
            {"gemma3", "<start_of_turn>user\n", "<end_of_turn>"},
            {"gpt-oss", "<|start|>user<|message|>", "<|end|>"}};
  for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) {
    t = load(sp[i].name);
    if (!t) continue;
    spans(t, sp[i].name, sp[i].open, sp[i].close);
    di_tokenizer_free(t);
  }
  return di_test_finish("test_tokenizer_robust");
}
