/* Decoding, full and streaming. Both are one state machine: the full decode
 * pushes every id through a stream, so "concatenation of the stream equals
 * the full decode" holds by construction. Per-token text (byte-level
 * unmapping, "▁" -> " ") is precomputed at load; what needs context is done
 * here: UTF-8 assembly with HF's lossy rules, byte-fallback runs, and the
 * strip of leading characters at the start of the output. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

struct di_detok_stream {
  const di_tokenizer *t;
  bool skip_special;
  size_t n_tokens;  /* tokens that reached the decoder */
  int strip_left;   /* leading strip chars still to drop */
  di_buf pend;      /* incomplete UTF-8 (byte-level) or the current byte-fallback run */
  di_buf out;       /* text produced by the current call */
};

static const char FFFD[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

static bool emit(di_detok_stream *s, const char *p, size_t n) {
  if (s->strip_left > 0) {
    char c[4];
    int cl = di_utf8_encode((uint32_t)s->t->dec_strip_char, c);
    while (s->strip_left > 0 && n >= (size_t)cl && memcmp(p, c, (size_t)cl) == 0) {
      p += cl;
      n -= (size_t)cl;
      s->strip_left--;
    }
    if (n) s->strip_left = 0;
  }
  return di_buf_put(&s->out, p, n);
}

/* Emits complete characters of pend (Rust from_utf8_lossy rules: each maximal
 * invalid prefix becomes one U+FFFD); keeps an incomplete tail unless final. */
static bool drain_lossy(di_detok_stream *s, bool final) {
  const unsigned char *p = (const unsigned char *)s->pend.p;
  size_t n = s->pend.n, i = 0, run = 0;
  bool ok = true;
  while (ok && i < n) {
    unsigned char c = p[i];
    if (c < 0x80) {
      i++;
      run++;
      continue;
    }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) need = 2, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) need = 2;
    else if (c == 0xED) need = 2, hi = 0x9F;
    else if (c >= 0xEE && c <= 0xEF) need = 2;
    else if (c == 0xF0) need = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) need = 3, hi = 0x8F;
    else need = 0;
    size_t k = 1;
    bool bad = need == 0;
    while (!bad && k <= need) {
      if (i + k >= n) break; /* incomplete */
      unsigned char d = p[i + k];
      if (k == 1 ? (d < lo || d > hi) : (d & 0xC0) != 0x80) bad = true;
      else k++;
    }
    if (!bad && k <= need) { /* ran out of bytes */
      if (!final) break;
      bad = true;
    }
    if (bad) {
      ok = emit(s, s->pend.p + i - run, run) && emit(s, FFFD, 3);
      run = 0;
      i += k;
    } else {
      i += k;
      run += k;
    }
  }
  if (ok && run) ok = emit(s, s->pend.p + i - run, run);
  memmove(s->pend.p, s->pend.p + i, n - i);
  s->pend.n = n - i;
  return ok;
}

static bool flush_run(di_detok_stream *s) {
  if (!s->pend.n) return true;
  bool ok;
  if (di_utf8_valid(s->pend.p, s->pend.n, NULL)) {
    ok = emit(s, s->pend.p, s->pend.n);
  } else {
    ok = true;
    for (size_t i = 0; ok && i < s->pend.n; i++) ok = emit(s, FFFD, 3);
  }
  s->pend.n = 0;
  return ok;
}

static di_code oom(di_status *st) { return di_errorf(st, DI_ERR_NOMEM, "tokenizer: out of memory"); }

di_code di_detok_stream_new(const di_tokenizer *t, bool skip_special, di_detok_stream **out,
                            di_status *st) {
  di_detok_stream *s = calloc(1, sizeof *s);
  if (!s) return oom(st);
  s->t = t;
  s->skip_special = skip_special;
  s->strip_left = t->dec_strip_start;
  if (!di_buf_put(&s->out, "", 0) || !di_buf_put(&s->pend, "", 0)) {
    di_detok_stream_free(s);
    return oom(st);
  }
  *out = s;
  return DI_OK;
}

void di_detok_stream_free(di_detok_stream *s) {
  if (!s) return;
  free(s->pend.p);
  free(s->out.p);
  free(s);
}

static di_code push_one(di_detok_stream *s, int32_t id, di_status *st) {
  const di_tokenizer *t = s->t;
  if (id < 0 || id >= t->n_vocab || !(t->flags[id] & DI_TF_PRESENT))
    return di_errorf(st, DI_ERR_RANGE, "token id %d is outside the vocabulary (size %d)", id,
                     t->n_vocab);
  if (s->skip_special && (t->flags[id] & (DI_TF_SPECIAL | DI_TF_NOSKIP)) == DI_TF_SPECIAL) return DI_OK;
  const char *p = t->pool + t->bytes_off[id];
  size_t n = t->bytes_len[id];
  bool first = s->n_tokens++ == 0;
  bool ok = true;
  if (t->dec_none) {
    if (!first) ok = emit(s, " ", 1);
    if (ok) ok = emit(s, p, n);
  } else if (t->dec_bytelevel) {
    ok = di_buf_put(&s->pend, p, n) && drain_lossy(s, false);
  } else if (t->dec_byte_fallback && (t->flags[id] & DI_TF_BYTE)) {
    ok = di_buf_putc(&s->pend, (char)t->byteval[id]);
  } else {
    ok = flush_run(s);
    if (ok && first && t->dec_metaspace_first && n && p[0] == ' ') p++, n--;
    if (ok) ok = emit(s, p, n);
  }
  return ok ? DI_OK : oom(st);
}

di_code di_detok_stream_push(di_detok_stream *s, int32_t id, const char **text, size_t *len,
                             di_status *st) {
  s->out.n = 0;
  s->out.p[0] = 0;
  di_code rc = push_one(s, id, st);
  *text = s->out.p;
  *len = rc == DI_OK ? s->out.n : 0;
  return rc;
}

di_code di_detok_stream_flush(di_detok_stream *s, const char **text, size_t *len, di_status *st) {
  s->out.n = 0;
  s->out.p[0] = 0;
  bool ok = s->t->dec_bytelevel ? drain_lossy(s, true) : flush_run(s);
  *text = s->out.p;
  *len = s->out.n;
  return ok ? DI_OK : oom(st);
}

di_code di_tokenizer_decode(const di_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                            char **out, size_t *len, di_status *st) {
  *out = NULL;
  *len = 0;
  di_detok_stream *s;
  di_code rc = di_detok_stream_new(t, skip_special, &s, st);
  if (rc != DI_OK) return rc;
  /* accumulate straight into the stream's output buffer */
  s->out.n = 0;
  for (size_t i = 0; i < n && rc == DI_OK; i++) {
    rc = push_one(s, ids[i], st);
    if (rc != DI_OK) di_error_wrap(st, "decoding id #%zu: ", i);
  }
  if (rc == DI_OK && !(t->dec_bytelevel ? drain_lossy(s, true) : flush_run(s))) rc = oom(st);
  if (rc != DI_OK) {
    di_detok_stream_free(s);
    return rc;
  }
  *out = s->out.p;
  *len = s->out.n;
  s->out.p = NULL;
  di_detok_stream_free(s);
  return DI_OK;
}
