/* Shared body of the grammar front-end fuzzers: each front end and the
 * grammar compiler must reject or compile any input cleanly, in bounded time
 * and memory. Input: the grammar source, optionally followed by "\n---\n" and a
 * text walked through the compiled matcher byte by byte. */
#ifndef DI_FUZZ_GRAMMAR_COMMON_H
#define DI_FUZZ_GRAMMAR_COMMON_H
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>

#include "grammar/grammar.h"

static int fuzz_grammar(di_grammar_kind kind, const char *default_text, const uint8_t *data, size_t size) {
  const char *src = (const char *)data, *sep = size >= 5 ? memmem(data, size, "\n---\n", 5) : NULL;
  size_t n = sep ? (size_t)(sep - src) : size;
  di_grammar_opts o = {.ws = (size & 1) ? DI_JSON_WS_FREE : DI_JSON_WS_PYTHON};
  di_grammar *g = NULL;
  di_status st = {0};
  if (di_grammar_compile(NULL, kind, src, n, &o, &g, &st) == DI_OK) {
    di_gmatcher *m = NULL;
    if (di_gmatcher_new(g, &m, &st) == DI_OK) {
      const char *t = sep ? sep + 5 : default_text;
      size_t tn = sep ? size - n - 5 : strlen(t);
      for (size_t i = 0; i < tn; i++)
        if (!di_gmatcher_accept_bytes(m, t + i, 1)) break;
      (void)di_gmatcher_is_accepting(m);
      di_gmatcher_rollback(m, tn / 2);
      di_gmatcher_free(m);
    }
    di_grammar_release(g);
  }
  return 0;
}

#endif
