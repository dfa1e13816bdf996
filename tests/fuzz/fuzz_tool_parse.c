/* libFuzzer target: the tool-call output parser (server/tools.c) on model
 * output. The first byte picks the format (Hermes tags or Llama 3 JSON) and
 * a chunk size; the rest is the reply. Fed whole and in chunks, the content
 * and calls must be the same (streamed deltas and whole answers agree), and
 * every call must carry a name and arguments that are strings. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/tools.h"

typedef struct out {
  di_srv_buf text, calls;
} out;

static void on_text(void *u, const char *s, size_t n) { di_srv_buf_put(&((out *)u)->text, s, n); }

static void on_call(void *u, int index, json_t *call) {
  out *o = u;
  const char *name = json_string_value(json_object_get(call, "name"));
  const char *args = json_string_value(json_object_get(call, "arguments"));
  if (!name || !args || index < 0) abort();
  di_srv_buf_put(&o->calls, name, strlen(name) + 1);
  di_srv_buf_put(&o->calls, args, strlen(args) + 1);
}

static void run(const di_srv_toolfmt *f, const char *s, size_t n, size_t step, out *o) {
  di_srv_toolparse p;
  di_srv_toolparse_init(&p, f);
  di_srv_toolsink k = {o, on_text, on_call};
  for (size_t i = 0; i < n; i += step) di_srv_toolparse_feed(&p, s + i, i + step > n ? n - i : step, 0, &k);
  di_srv_toolparse_feed(&p, "", 0, 1, &k);
  di_srv_toolparse_free(&p);
}

static int same(const di_srv_buf *a, const di_srv_buf *b) {
  return a->len == b->len && (!a->len || !memcmp(a->p, b->p, a->len));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 4096) return 0;
  const di_srv_toolfmt *f = data[0] & 1 ? &DI_TOOLFMT_LLAMA3 : &DI_TOOLFMT_HERMES;
  size_t step = (size_t)(data[0] >> 1) % 16 + 1;
  const char *s = (const char *)data + 1;
  size_t n = size - 1;
  out whole, parts;
  memset(&whole, 0, sizeof whole);
  memset(&parts, 0, sizeof parts);
  run(f, s, n, n ? n : 1, &whole);
  run(f, s, n, step, &parts);
  if (!same(&whole.text, &parts.text) || !same(&whole.calls, &parts.calls)) abort();
  di_srv_buf_free(&whole.text);
  di_srv_buf_free(&whole.calls);
  di_srv_buf_free(&parts.text);
  di_srv_buf_free(&parts.calls);
  return 0;
}
