/* libFuzzer target: the tool-call output parser (server/tool_parse.c) on
 * model output. The first byte picks the format (Hermes tags, Llama 3 JSON,
 * DeepSeek V3 or V3.1) and a chunk size; the rest is the reply. Fed whole and
 * in chunks, the content and calls must be the same (streamed deltas and
 * whole answers agree), and arguments only ever follow their call's name. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/tools.h"

typedef struct out {
  di_srv_buf text, calls;
  int n_calls;
} out;

static void on_text(void *u, const char *s, size_t n) { di_srv_buf_put(&((out *)u)->text, s, n); }

static void on_call(void *u, int index, const char *name) {
  out *o = u;
  if (!name || index != o->n_calls++) abort();
  di_srv_buf_put(&o->calls, "\0", 1);
  di_srv_buf_put(&o->calls, name, strlen(name) + 1);
}

static void on_args(void *u, int index, const char *s, size_t n) {
  out *o = u;
  if (index != o->n_calls - 1 || !n) abort();
  di_srv_buf_put(&o->calls, s, n);
}

static void run(const di_srv_toolfmt *f, const char *s, size_t n, size_t step, out *o) {
  di_srv_toolparse p;
  di_srv_toolparse_init(&p, f);
  di_srv_toolsink k = {o, on_text, on_call, on_args};
  for (size_t i = 0; i < n; i += step) di_srv_toolparse_feed(&p, s + i, i + step > n ? n - i : step, 0, &k);
  di_srv_toolparse_feed(&p, "", 0, 1, &k);
  di_srv_toolparse_free(&p);
}

static int same(const di_srv_buf *a, const di_srv_buf *b) {
  return a->len == b->len && (!a->len || !memcmp(a->p, b->p, a->len));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 4096) return 0;
  static const di_srv_toolfmt *const fmts[4] = {&DI_TOOLFMT_HERMES, &DI_TOOLFMT_LLAMA3, &DI_TOOLFMT_DEEPSEEK_V3,
                                                &DI_TOOLFMT_DEEPSEEK_V31};
  const di_srv_toolfmt *f = fmts[data[0] & 3];
  size_t step = (size_t)(data[0] >> 2) % 16 + 1;
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
