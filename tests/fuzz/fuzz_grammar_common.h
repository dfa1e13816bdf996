/* Shared body of the grammar front-end fuzzers: each front end and the
 * grammar compiler must reject or compile any input cleanly, in bounded time
 * and memory. Input: the grammar source, optionally followed by "\n---\n" and a
 * text walked through the compiled matcher.
 *
 * The grammar is compiled against a small byte-level vocabulary (every byte,
 * JSON and text pieces of several bytes, partial UTF-8, an end token), and the
 * text is walked token by token (longest token first) with the masks checked
 * at every step: the cached mask must equal a node-by-node walk that bypasses
 * every cache, and each token's bit must say whether the matcher accepts it
 * (end of generation: whether the output is complete). */
#ifndef DI_FUZZ_GRAMMAR_COMMON_H
#define DI_FUZZ_GRAMMAR_COMMON_H
#define _GNU_SOURCE
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/internal.h"
#include "fuzz_bytelevel.h"

/* Pieces that make tokens span a rule's end (a string's closing quote and
 * what follows), whitespace runs, keywords, numbers and partial characters. */
static const char *const fuzz_pieces[] = {
    "{\"", "\"}", "\":", "\": ", "\", \"", "\",", ", ", "[{\"", "}]", "},", "}, {", "\"]", "[\"", "[]", "{}",
    "true", "false", "null", "12", "0.", "-1", "e+", "E-", "\n", "\n  ", "  ", "    ", " \"", "\t", "\r\n",
    "name", "ab", "abc", "abc\",", "x\": ", "a\"", "\\u00", "\\\"", "\\n", "\xc3\xa9", "\xe4\xb8\xad", "\xe4\xb8",
    "\xf0\x9f\x98\x80", "\xf0\x9f", "-0", "1e", "T12:", "2024-", "://", "@a.", "::", "(", ")", " (", "a b"};

static di_tokenizer *fuzz_grammar_tokenizer(void) {
  static di_tokenizer *tok;
  if (tok) return tok;
  json_t *vocab = json_object();
  char c[4], buf[64];
  int id = 0;
  for (int b = 0; b < 256; b++) json_object_set_new(vocab, fuzz_bl_char(b, c), json_integer(id++));
  for (size_t i = 0; i < sizeof fuzz_pieces / sizeof fuzz_pieces[0]; i++) {
    buf[0] = 0;
    for (const char *p = fuzz_pieces[i]; *p; p++) strcat(buf, fuzz_bl_char((uint8_t)*p, c));
    if (!json_object_get(vocab, buf)) json_object_set_new(vocab, buf, json_integer(id++));
  }
  json_t *j = json_pack("{s:{s:s, s:o, s:[], s:b}, s:[{s:i, s:s, s:b, s:b}], s:{s:s}}", "model", "type", "BPE",
                        "vocab", vocab, "merges", "ignore_merges", 1, "added_tokens", "id", id, "content",
                        "<|endoftext|>", "special", 1, "normalized", 0, "decoder", "type", "ByteLevel");
  char *s = j ? json_dumps(j, 0) : NULL;
  json_decref(j);
  di_status st = {0};
  if (!s || di_tokenizer_from_json(s, strlen(s), NULL, 0, &tok, &st) != DI_OK) {
    fprintf(stderr, "fuzz_grammar: built-in tokenizer: %s\n", st.msg);
    abort();
  }
  free(s);
  return tok;
}

/* The longest token whose bytes start t[0..n) (every byte is one), or -1 at the end. */
static int32_t fuzz_next_token(const di_tokenizer *tok, const char *t, size_t n, size_t *len) {
  int32_t best = -1;
  *len = 0;
  for (int32_t id = 0; id < di_tokenizer_n_vocab(tok); id++) {
    size_t l = 0;
    const char *b = di_tokenizer_token_bytes(tok, id, &l);
    if (b && !di_tokenizer_is_special(tok, id) && l > *len && l <= n && !memcmp(b, t, l)) {
      best = id;
      *len = l;
    }
  }
  return best;
}

/* The mask of m's configuration against a fresh walk and against accept_token. */
static void fuzz_check_mask(di_gmatcher *m, const di_tokenizer *tok, uint32_t *mask, uint32_t *fresh, size_t words) {
  di_gmatcher_fill_mask(m, mask);
  gmatcher_fill_mask_fresh(m, fresh);
  if (memcmp(mask, fresh, words * sizeof *mask)) {
    fprintf(stderr, "fuzz_grammar: cached mask differs from a fresh walk\n");
    abort();
  }
  for (int32_t id = 0; id < di_tokenizer_n_vocab(tok); id++) {
    bool bit = mask[id >> 5] >> (id & 31) & 1;
    bool ok = di_gmatcher_accept_token(m, id);
    if (ok) di_gmatcher_rollback(m, 1);
    if (bit != ok) {
      fprintf(stderr, "fuzz_grammar: token %d: mask says %d, accept_token %d\n", id, bit, ok);
      abort();
    }
  }
}

enum { FUZZ_MAX_STEPS = 48 }; /* masks checked per input: each costs a pass over the vocabulary */

static int fuzz_grammar(di_grammar_kind kind, const char *default_text, const uint8_t *data, size_t size) {
  const char *src = (const char *)data, *sep = size >= 5 ? memmem(data, size, "\n---\n", 5) : NULL;
  size_t n = sep ? (size_t)(sep - src) : size;
  di_grammar_opts o = {.ws = (size & 1) ? DI_JSON_WS_FREE : DI_JSON_WS_PYTHON};
  const di_tokenizer *tok = fuzz_grammar_tokenizer();
  di_grammar *g = NULL;
  di_status st = {0};
  if (di_grammar_compile(tok, kind, src, n, &o, &g, &st) == DI_OK) {
    di_gmatcher *m = NULL;
    if (di_gmatcher_new(g, &m, &st) == DI_OK) {
      const char *t = sep ? sep + 5 : default_text;
      size_t tn = sep ? size - n - 5 : strlen(t), words = di_grammar_mask_words(g), steps = 0;
      uint32_t *mask = malloc(words * sizeof *mask), *fresh = malloc(words * sizeof *fresh);
      if (!mask || !fresh) abort();
      for (size_t i = 0, l = 0; steps < FUZZ_MAX_STEPS; i += l, steps++) {
        fuzz_check_mask(m, tok, mask, fresh, words);
        int32_t id = fuzz_next_token(tok, t + i, tn - i, &l);
        if (id < 0 || !di_gmatcher_accept_token(m, id)) break;
      }
      /* rollback returns to earlier configurations, whose masks the memo holds */
      di_gmatcher_rollback(m, steps / 2);
      fuzz_check_mask(m, tok, mask, fresh, words);
      free(mask);
      free(fresh);
      di_gmatcher_free(m);
    }
    di_grammar_release(g);
  }
  return 0;
}

#endif
