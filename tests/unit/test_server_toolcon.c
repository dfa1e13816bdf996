/* The token-level tool-call constraint (server/toolcon.c) on DeepSeek-V3's
 * real tokenizer: a valid reply in each format walks through the mask token
 * by token (every token allowed and accepted; the tags are single tokens and
 * forced one at a time), invalid arguments are refused, the end comes right
 * after <｜tool▁calls▁end｜>, rollback(k) from the end and a re-walk give the
 * same masks as the first walk (speculative decoding), and in auto mode a
 * text tag (<tool_call>, matched across tokens) opens a constrained call
 * while other text stays free. */
#include <jansson.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "check.h"
#include "test_tok.h"
#include "server/toolcon.h"
#include "tokenizer/tokenizer.h"

static di_tokenizer *tok;

static di_code be_grammar(void *ctx, di_grammar_kind kind, const char *src, size_t len, const di_grammar_opts *o,
                          di_grammar **out, di_status *st) {
  (void)ctx;
  return di_grammar_compile(tok, kind, src, len, o, out, st);
}

static di_code be_tokenize(void *ctx, const char *text, size_t len, int add_special, int parse_special, int32_t **ids,
                           size_t *n, di_status *st) {
  (void)ctx;
  return di_tokenizer_encode(tok, text, len, add_special, parse_special, ids, n, st);
}

static int be_token_bytes(void *ctx, int32_t id, char *buf, size_t cap) {
  (void)ctx;
  size_t len = 0;
  const char *b = di_tokenizer_token_bytes(tok, id, &len);
  if (!b) return -1;
  if (len > cap) len = cap;
  memcpy(buf, b, len);
  return (int)len;
}

static di_code be_submit(void *ctx, const di_request_params *p, const di_srv_tokcon *c, uint64_t *id, char *err,
                         size_t errlen) {
  (void)ctx, (void)p, (void)c, (void)id, (void)err, (void)errlen;
  return DI_OK;
}

static di_srv_backend be;
static size_t words;

static uint64_t mask_hash(di_srv_tokcon *c, uint32_t *mask) {
  c->fill_mask(c->self, mask);
  return XXH3_64bits(mask, words * sizeof *mask);
}

static int popcount(const uint32_t *mask) {
  int n = 0;
  for (size_t i = 0; i < words; i++) n += __builtin_popcount(mask[i]);
  return n;
}

static const char *TOOLS = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
                           "\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":20},\"unit\":{\"enum\":[\"c\",\"f\"]}},"
                           "\"required\":[\"city\",\"unit\"],\"additionalProperties\":false}}},"
                           "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"strict\":true,\"parameters\":{\"type\":"
                           "\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},"
                           "\"required\":[\"a\",\"b\"],\"additionalProperties\":false}}}]";

/* Walks reply (tags parsed as tokens) through a fresh constraint: every
 * token allowed and accepted; then rollback(k) and a re-walk must show the
 * same masks. Returns the constraint for further checks (free it). */
static di_srv_toolcon *walk(const di_srv_toolfmt *f, di_srv_tool_mode mode, const char *name, const char *reply,
                            int want_finished, int think) {
  json_t *tools = json_loads(TOOLS, 0, NULL);
  di_srv_tool_choice c = {mode, name, 1};
  di_srv_toolcon *t = NULL;
  di_srv_err e = {0};
  CHECKF(di_srv_toolcon_new(&be, tools, &c, f, think, &t, &e), "%s", e.msg);
  json_decref(tools);
  if (!t) return NULL;
  di_srv_tokcon k;
  di_srv_toolcon_bind(t, &k);
  int32_t *ids = NULL;
  size_t n = 0;
  di_status st = {0};
  CHECK(di_tokenizer_encode(tok, reply, strlen(reply), false, true, &ids, &n, &st) == DI_OK);
  uint32_t *mask = calloc(words, sizeof *mask);
  uint64_t *hs = calloc(n + 1, sizeof *hs);
  for (size_t i = 0; i < n; i++) {
    hs[i] = mask_hash(&k, mask);
    bool allowed = mask[ids[i] >> 5] >> (ids[i] & 31) & 1;
    CHECKF(allowed && k.accept(k.self, ids[i]), "%s: token %zu (id %d) refused in '%s'", f->name, i, ids[i], reply);
    if (!allowed) break;
  }
  hs[n] = mask_hash(&k, mask);
  CHECKF(k.finished(k.self) == want_finished, "%s: finished %d", f->name, k.finished(k.self));
  for (size_t back = 1; back <= n; back += 3) {
    k.rollback(k.self, back);
    for (size_t i = n - back; i < n; i++) {
      CHECKF(mask_hash(&k, mask) == hs[i], "%s: rollback %zu: mask at %zu differs", f->name, back, i);
      k.accept(k.self, ids[i]);
    }
    CHECK(mask_hash(&k, mask) == hs[n]);
  }
  free(hs);
  free(mask);
  free(ids);
  return t;
}

int main(void) {
  tok = di_test_tokenizer("deepseek-v3");
  if (!tok) {
    printf("test_server_toolcon: deepseek-v3 tokenizer unavailable, skipped\n");
    return 0;
  }
  be = (di_srv_backend){.grammar = be_grammar, .tokenize = be_tokenize, .token_bytes = be_token_bytes,
                        .submit_tokcon = be_submit, .n_vocab = 129280};
  words = (129280 + 31) / 32;
  const di_srv_toolfmt *D31 = &DI_TOOLFMT_DEEPSEEK_V31, *D3 = &DI_TOOLFMT_DEEPSEEK_V3, *H = &DI_TOOLFMT_HERMES;

  /* V3.1 forced, two calls (parallel: at most one per function) */
  di_srv_toolcon *t = walk(D31, DI_TOOLS_REQUIRED, NULL,
                           "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": 2, \"b\": 40}<｜tool▁call▁end｜>"
                           "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", \"unit\": \"c\"}"
                           "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                           1, 0);
  di_srv_toolcon_free(t);
  /* V3 / R1 named */
  t = walk(D3, DI_TOOLS_NAMED, "get_weather",
           "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Oslo\", "
           "\"unit\": \"f\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
           1, 0);
  di_srv_toolcon_free(t);

  /* a prompt that opened <think>: free reasoning (tags included) first, then the forced calls */
  t = walk(D31, DI_TOOLS_REQUIRED, NULL,
           "Let me <｜tool▁sep｜> think.</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{\"a\": 1, "
           "\"b\": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
           1, 1);
  di_srv_toolcon_free(t);
  /* forced: the first token is the block tag alone; wrong names and arguments are refused */
  json_t *tools = json_loads(TOOLS, 0, NULL);
  di_srv_tool_choice c = {DI_TOOLS_NAMED, "add", 0};
  di_srv_err e = {0};
  CHECK(di_srv_toolcon_new(&be, tools, &c, D31, 0, &t, &e));
  di_srv_tokcon k;
  di_srv_toolcon_bind(t, &k);
  uint32_t *mask = calloc(words, sizeof *mask);
  k.fill_mask(k.self, mask);
  CHECK(popcount(mask) == 1 && (mask[128806 >> 5] >> (128806 & 31) & 1));
  CHECK(!k.accept(k.self, 128808) && k.accept(k.self, 128806) && k.accept(k.self, 128808));
  int32_t *ids = NULL;
  size_t n = 0;
  di_status st = {0};
  di_tokenizer_encode(tok, "get", 3, false, false, &ids, &n, &st);
  CHECK(n == 1 && !k.accept(k.self, ids[0])); /* named add: get_weather is not a choice */
  free(ids);
  di_tokenizer_encode(tok, "add", 3, false, false, &ids, &n, &st);
  CHECK(n == 1 && k.accept(k.self, ids[0]) && k.accept(k.self, 128814));
  free(ids);
  di_tokenizer_encode(tok, "[", 1, false, false, &ids, &n, &st);
  CHECK(n == 1 && !k.accept(k.self, ids[0])); /* arguments are an object */
  free(ids);
  di_tokenizer_encode(tok, "{\"", 2, false, false, &ids, &n, &st);
  CHECK(n == 1 && k.accept(k.self, ids[0]));
  free(ids);
  di_srv_toolcon_free(t);
  /* auto: a non-strict set is not constrained; Hermes tags in text are watched across tokens */
  c = (di_srv_tool_choice){DI_TOOLS_AUTO, NULL, 1};
  CHECK(di_srv_toolcon_wanted(tools, &c, H));
  json_object_del(json_object_get(json_array_get(tools, 1), "function"), "strict");
  CHECK(!di_srv_toolcon_wanted(tools, &c, H) && !di_srv_toolcon_wanted(tools, &c, &DI_TOOLFMT_LLAMA3));
  json_object_set_new(json_object_get(json_array_get(tools, 1), "function"), "strict", json_true());
  /* Llama 3 auto, strict: a reply that starts '{' is one call under the schemas and ends with it */
  t = walk(&DI_TOOLFMT_LLAMA3, DI_TOOLS_AUTO, NULL, " {\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}", 1, 0);
  di_srv_toolcon_bind(t, &k);
  k.rollback(k.self, 1000);
  di_tokenizer_encode(tok, "{\"name\": \"sub\"", 15, false, false, &ids, &n, &st);
  bool refused = false;
  for (size_t i = 0; i < n && !refused; i++) refused = !k.accept(k.self, ids[i]);
  CHECK(refused); /* not a declared function */
  free(ids);
  di_srv_toolcon_free(t);
  t = walk(&DI_TOOLFMT_LLAMA3, DI_TOOLS_AUTO, NULL, "Hello {\"name\": 1} and more", 0, 0); /* text first: free */
  di_srv_toolcon_free(t);
  json_decref(tools);
  t = walk(H, DI_TOOLS_AUTO, NULL,
           "Sure, adding. <tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call> Done.", 0, 0);
  di_srv_toolcon_bind(t, &k);
  k.fill_mask(k.self, mask);
  CHECK(popcount(mask) >= 128000); /* free text again */
  di_srv_toolcon_free(t);
  /* ... and the call in between is held to the schemas: a string where add takes an integer is refused */
  t = walk(H, DI_TOOLS_AUTO, NULL, "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": ", 0, 0);
  di_srv_toolcon_bind(t, &k);
  di_tokenizer_encode(tok, "\"", 1, false, false, &ids, &n, &st);
  CHECK(n == 1 && !k.accept(k.self, ids[0]));
  free(ids);
  di_srv_toolcon_free(t);
  free(mask);
  di_tokenizer_free(tok);
  return di_test_finish("test_server_toolcon");
}
