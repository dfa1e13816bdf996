/* libFuzzer target for the tokenizer. The first byte picks what the rest is:
 *   0: text for two built-in tokenizers (byte-level BPE with a Split regex,
 *      NFC + Replace, special/lstrip/rstrip/single_word added tokens, ignore_merges;
 *      and a SentencePiece-style BPE with Prepend/Replace, byte fallback,
 *      fuse_unk, Strip decoder), in every parse mode and as two spans; the
 *      ids are decoded fully and streamed, which must agree; byte-level
 *      decode must return the input when it was valid UTF-8
 *   1: a tokenizer.json to load (then used on a fixed text)
 *   2: a GGUF image whose tokenizer metadata is loaded */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_bytelevel.h"
#include "tokenizer/tokenizer.h"

static di_tokenizer *tok_bl, *tok_spm;

static di_tokenizer *build_bytelevel(void) {
  json_t *vocab = json_object(), *merges = json_array();
  char c[4];
  int id = 0;
  for (int b = 0; b < 256; b++) json_object_set_new(vocab, fuzz_bl_char(b, c), json_integer(id++));
  static const char *m[][2] = {{"\xc4\xa0", "t"}, {"h", "e"}, {"\xc4\xa0t", "he"}, {"i", "n"},
                               {"\xc4\xa0", "a"}, {"e", "r"}, {"\xc4\xa0", "\xc4\xa0"}, {"1", "2"},
                               {"\xe4\xb8", "\xad"}, {"\xc3\xa4", "\xc2\xb8"}};
  char buf[64];
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
    snprintf(buf, sizeof buf, "%s%s", m[i][0], m[i][1]);
    if (!json_object_get(vocab, buf)) json_object_set_new(vocab, buf, json_integer(id++));
    snprintf(buf, sizeof buf, "%s %s", m[i][0], m[i][1]);
    json_array_append_new(merges, json_string(buf));
  }
  json_object_set_new(vocab, "\xc4\xa0" "the" "\xc4\xa0" "cat", json_integer(id++));
  char tmpl[4096];
  snprintf(tmpl, sizeof tmpl,
           "{\"model\":{\"type\":\"BPE\",\"ignore_merges\":true},"
           "\"added_tokens\":["
           "{\"id\":%d,\"content\":\"<|end|>\",\"special\":true,\"normalized\":false},"
           "{\"id\":%d,\"content\":\"<|e\",\"special\":false,\"lstrip\":true,\"rstrip\":true,\"normalized\":false},"
           "{\"id\":%d,\"content\":\"word\",\"special\":false,\"single_word\":true,\"normalized\":true},"
           "{\"id\":%d,\"content\":\"<s>\",\"special\":true,\"normalized\":false}],"
           "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},"
           "{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\t\"},\"content\":\"    \"}]},"
           "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
           "\"(?i:'s|'t)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
           "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]},"
           "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},"
           "{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[%d]}}},"
           "\"decoder\":{\"type\":\"ByteLevel\"}}",
           id, id + 1, id + 2, id + 3, id + 3);
  json_error_t e;
  json_t *j = json_loads(tmpl, 0, &e);
  if (!j) {
    fprintf(stderr, "fuzz_tokenizer: template json: %s\n", e.text);
    abort();
  }
  json_t *model = json_object_get(j, "model");
  json_object_set_new(model, "vocab", vocab);
  json_object_set_new(model, "merges", merges);
  char *s = json_dumps(j, 0);
  json_decref(j);
  di_status st = {0};
  di_tokenizer *t = NULL;
  if (di_tokenizer_from_json(s, strlen(s), NULL, 0, &t, &st) != DI_OK) {
    fprintf(stderr, "fuzz_tokenizer: built-in byte-level tokenizer: %s\n", st.msg);
    abort();
  }
  free(s);
  return t;
}

static di_tokenizer *build_spm(void) {
  static const char js[] =
      "{\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,"
      "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0x41>\":3,\"<0xE4>\":4,\"<0xB8>\":5,\"<0xAD>\":6,"
      "\"<0x0A>\":7,\"\xe2\x96\x81\":8,\"a\":9,\"b\":10,\"\xe2\x96\x81" "a\":11,\"ab\":12,\"\xe2\x96\x81" "ab\":13},"
      "\"merges\":[[\"\xe2\x96\x81\",\"a\"],[\"a\",\"b\"],[\"\xe2\x96\x81" "a\",\"b\"]]},"
      "\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true,\"normalized\":false},"
      "{\"id\":1,\"content\":\"<s>\",\"special\":true,\"normalized\":false},"
      "{\"id\":2,\"content\":\"</s>\",\"special\":true,\"normalized\":false}],"
      "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\xe2\x96\x81\"},"
      "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xe2\x96\x81\"}]},"
      "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\",\"prepend_scheme\":\"first\",\"split\":true},"
      "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}},"
      "{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1]}}},"
      "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xe2\x96\x81\"},"
      "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \","
      "\"start\":1,\"stop\":0}]}}";
  di_status st = {0};
  di_tokenizer *t = NULL;
  if (di_tokenizer_from_json(js, sizeof js - 1, NULL, 0, &t, &st) != DI_OK) {
    fprintf(stderr, "fuzz_tokenizer: built-in spm tokenizer: %s\n", st.msg);
    abort();
  }
  return t;
}

static void exercise(const di_tokenizer *t, const uint8_t *d, size_t n, bool lossless) {
  size_t bad;
  bool valid = di_utf8_valid((const char *)d, n, &bad);
  for (int mode = 0; mode < 3; mode++) {
    di_status st = {0};
    int32_t *ids = NULL;
    size_t k = 0;
    di_code rc;
    if (mode < 2) {
      rc = di_tokenizer_encode(t, (const char *)d, n, mode == 1, mode == 0, &ids, &k, &st);
    } else {
      size_t cut = n ? d[0] % (n + 1) : 0;
      while (cut < n && (d[cut] & 0xC0) == 0x80) cut++;
      di_tok_span sp[2] = {{(const char *)d, cut, DI_TOK_PARSE_ALL}, {(const char *)d + cut, n - cut, DI_TOK_PARSE_NONE}};
      rc = di_tokenizer_encode_spans(t, sp, 2, true, &ids, &k, &st);
    }
    if (!valid) {
      if (rc != DI_ERR_INVALID) abort();
      continue;
    }
    if (rc != DI_OK) abort();
    char *out = NULL;
    size_t len = 0;
    if (di_tokenizer_decode(t, ids, k, false, &out, &len, &st) != DI_OK) abort();
    if (lossless && mode == 2 && (len != n || memcmp(out, d, n) != 0)) {
      /* NFC and the tab rule may change text; only check when they do not apply */
      bool plain = true;
      for (size_t i = 0; i < n; i++) plain &= d[i] != '\t' && d[i] < 0x80;
      for (size_t i = 1; i < k; i++) plain &= !di_tokenizer_is_added(t, ids[i]); /* lstrip/rstrip eat spaces */
      if (plain && k && t == tok_bl) {
        /* the BOS from add_special decodes as "<s>" */
        if (len != n + 3 || memcmp(out + 3, d, n) != 0) abort();
      }
    }
    di_detok_stream *s;
    if (di_detok_stream_new(t, mode == 1, &s, &st) != DI_OK) abort();
    char *full = NULL;
    size_t flen = 0;
    if (di_tokenizer_decode(t, ids, k, mode == 1, &full, &flen, &st) != DI_OK) abort();
    size_t acc = 0;
    for (size_t i = 0; i <= k; i++) {
      const char *p;
      size_t pl;
      rc = i < k ? di_detok_stream_push(s, ids[i], &p, &pl, &st) : di_detok_stream_flush(s, &p, &pl, &st);
      if (rc != DI_OK || acc + pl > flen || memcmp(full + acc, p, pl) != 0 || !di_utf8_valid(p, pl, &bad)) abort();
      acc += pl;
    }
    if (acc != flen) abort();
    di_detok_stream_free(s);
    free(full);
    free(out);
    free(ids);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!tok_bl) {
    tok_bl = build_bytelevel();
    tok_spm = build_spm();
  }
  if (size == 0) return 0;
  const uint8_t *d = data + 1;
  size_t n = size - 1;
  switch (data[0] % 3) {
  case 0:
    exercise(tok_bl, d, n, true);
    exercise(tok_spm, d, n, false);
    break;
  case 1: {
    di_status st = {0};
    di_tokenizer *t = NULL;
    if (di_tokenizer_from_json((const char *)d, n, NULL, 0, &t, &st) == DI_OK) {
      static const uint8_t text[] = "Hello <s> world\xe4\xb8\xad 123 \t\n";
      exercise(t, text, sizeof text - 1, false);
      di_tokenizer_free(t);
    }
    break;
  }
  default: {
    di_gguf *g = NULL;
    di_status st = {0};
    if (di_gguf_open_memory(d, n, "fuzz.gguf", &g, &st) == DI_OK) {
      di_tokenizer *t = NULL;
      if (di_tokenizer_from_gguf(g, &t, &st) == DI_OK) {
        static const uint8_t text[] = "Hello <s> world\xe4\xb8\xad 123 \t\n";
        exercise(t, text, sizeof text - 1, false);
        di_tokenizer_free(t);
      }
      di_gguf_close(g);
    }
    break;
  }
  }
  return 0;
}
