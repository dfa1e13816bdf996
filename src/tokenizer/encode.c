/* Encoding: added tokens are matched in the raw text first (leftmost, longest
 * first, as HF's AddedVocabulary does); the text between them is normalized,
 * split by the normalized added tokens, pre-tokenized and run through the
 * model. For safe prompt assembly the text arrives as spans, and an added
 * token is recognised only inside a span that allows it: content spans can
 * never produce one, whatever bytes they hold. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static di_code oom(di_status *st) { return di_errorf(st, DI_ERR_NOMEM, "tokenizer: out of memory"); }

typedef struct {
  const di_tokenizer *t;
  const char *text;
  size_t len;
  const di_tok_span *spans;
  size_t n_spans;
  size_t *span_end; /* cumulative end offsets */
  di_ivec *out;
  di_buf seg, norm;
  di_spanvec pieces;
} enc_ctx;

static size_t span_at(const enc_ctx *c, size_t pos) {
  size_t lo = 0, hi = c->n_spans;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c->span_end[mid] <= pos) lo = mid + 1;
    else hi = mid;
  }
  return lo < c->n_spans ? lo : c->n_spans - 1;
}

static bool allowed(di_tok_parse mode, const di_added *a) {
  return mode == DI_TOK_PARSE_ALL || (mode == DI_TOK_PARSE_NONSPECIAL && !a->special);
}

static bool is_word_char(int32_t cp) { return di_uni_is_alnum(cp) || cp == '_'; }

static bool ends_with_word(const char *s, size_t n) {
  if (!n) return false;
  size_t k = n - 1;
  while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
  int l;
  return is_word_char(di_utf8_decode(s + k, n - k, &l));
}

static bool starts_with_word(const char *s, size_t n) {
  if (!n) return false;
  int l;
  return is_word_char(di_utf8_decode(s, n, &l));
}

/* One match of an added token in s[0..n): start/stop after lstrip/rstrip. */
typedef struct {
  size_t start, stop;
  int32_t id;
} amatch;

/* Finds the next accepted added-token match in text[from..to) using trie tr.
 * mode_at gives the parse mode for a position; a match must lie in one span.
 * Returns false when none. floor = end of the previous match (lstrip bound). */
static bool next_match(const enc_ctx *c, const di_trie *tr, size_t from, size_t to, size_t floor,
                       di_tok_parse fixed_mode, bool use_spans, amatch *m) {
  const di_tokenizer *t = c->t;
  const char *s = c->text;
  size_t i = from;
  while (i < to) {
    size_t lim = to;
    di_tok_parse mode = fixed_mode;
    if (use_spans) {
      size_t k = span_at(c, i);
      mode = c->spans[k].parse;
      if (mode == DI_TOK_PARSE_NONE) {
        i = c->span_end[k];
        continue;
      }
      if (c->span_end[k] < lim) lim = c->span_end[k];
    } else if (mode == DI_TOK_PARSE_NONE) {
      return false;
    }
    /* skip quickly to a byte that can start a token */
    unsigned char b = (unsigned char)s[i];
    if (!(tr->first[b >> 3] & (1u << (b & 7)))) {
      i++;
      continue;
    }
    size_t ml = 0;
    int32_t k = di_trie_longest(tr, s + i, lim - i, &ml);
    if (k < 0) {
      i++;
      continue;
    }
    const di_added *a = &t->added[k];
    size_t start = i, stop = i + ml;
    /* HF consumes a rejected match: scanning resumes after it */
    if (!allowed(mode, a)) {
      i = stop;
      continue;
    }
    if (a->single_word && (ends_with_word(s, start) || starts_with_word(s + stop, c->len - stop))) {
      i = stop;
      continue;
    }
    if (a->lstrip) {
      while (start > floor) {
        size_t q = start - 1;
        while (q > floor && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
        int l;
        if (!di_uni_is_whitespace(di_utf8_decode(s + q, start - q, &l))) break;
        start = q;
      }
    }
    if (a->rstrip) {
      while (stop < to) {
        int l;
        if (!di_uni_is_whitespace(di_utf8_decode(s + stop, to - stop, &l))) break;
        stop += (size_t)l;
      }
    }
    m->start = start;
    m->stop = stop;
    m->id = a->id;
    return true;
  }
  return false;
}

static di_tok_parse most_restrictive(const enc_ctx *c, size_t a, size_t b) {
  if (a >= b) return DI_TOK_PARSE_ALL;
  di_tok_parse m = DI_TOK_PARSE_ALL;
  for (size_t k = span_at(c, a); k < c->n_spans; k++) {
    if (c->spans[k].parse < m) m = c->spans[k].parse;
    if (c->span_end[k] >= b) break;
  }
  return m;
}

/* normalized, pre-tokenized, modelled text */
static di_code encode_plain(enc_ctx *c, const char *s, size_t n, bool at_start, di_status *st) {
  const di_tokenizer *t = c->t;
  di_code rc;
  c->seg.n = 0;
  if (!di_buf_put(&c->seg, s, n)) return oom(st);
  rc = di_tok_pretokenize(t, &c->seg, at_start, &c->pieces, st);
  for (size_t i = 0; rc == DI_OK && i < c->pieces.n; i++)
    rc = di_tok_model_encode(t, c->seg.p + c->pieces.p[i].off, c->pieces.p[i].len, c->out, st);
  return rc;
}

/* A segment between raw added-token matches: text[a..b). */
static di_code encode_segment(enc_ctx *c, size_t a, size_t b, di_status *st) {
  const di_tokenizer *t = c->t;
  bool at_start = a == 0;
  if (t->n_norms == 0) {
    if (!t->trie_norm.n_entries) return encode_plain(c, c->text + a, b - a, at_start, st);
    /* identity normalizer: the normalized tokens can be matched in place */
    size_t pos = a;
    amatch m;
    while (next_match(c, &t->trie_norm, pos, b, pos, DI_TOK_PARSE_ALL, true, &m)) {
      if (m.start > pos) {
        di_code rc = encode_plain(c, c->text + pos, m.start - pos, pos == 0, st);
        if (rc != DI_OK) return rc;
      }
      if (!di_ivec_push(c->out, m.id)) return oom(st);
      pos = m.stop;
    }
    return pos < b ? encode_plain(c, c->text + pos, b - pos, pos == 0, st) : DI_OK;
  }
  di_code rc = di_tok_normalize(t, c->text + a, b - a, &c->norm, st);
  if (rc != DI_OK) return rc;
  if (!t->trie_norm.n_entries) return encode_plain(c, c->norm.p, c->norm.n, at_start, st);
  /* The normalized text no longer lines up with the spans, so the segment
   * gets the most restrictive mode of the spans it touches. */
  enc_ctx sub = *c;
  sub.text = c->norm.p;
  sub.len = c->norm.n;
  sub.seg = (di_buf){0};
  sub.norm = (di_buf){0};
  sub.pieces = (di_spanvec){0};
  di_tok_parse mode = most_restrictive(c, a, b);
  size_t pos = 0;
  amatch m;
  while (rc == DI_OK && next_match(&sub, &t->trie_norm, pos, sub.len, pos, mode, false, &m)) {
    if (m.start > pos) rc = encode_plain(&sub, sub.text + pos, m.start - pos, at_start && pos == 0, st);
    if (rc == DI_OK && !di_ivec_push(c->out, m.id)) rc = oom(st);
    pos = m.stop;
  }
  if (rc == DI_OK && pos < sub.len) rc = encode_plain(&sub, sub.text + pos, sub.len - pos, at_start && pos == 0, st);
  free(sub.seg.p);
  free(sub.norm.p);
  free(sub.pieces.p);
  return rc;
}

di_code di_tokenizer_encode_spans(const di_tokenizer *t, const di_tok_span *spans, size_t n_spans,
                                  bool add_special, int32_t **ids, size_t *n, di_status *st) {
  *ids = NULL;
  *n = 0;
  if (!t) return di_errorf(st, DI_ERR_INVALID, "tokenizer: NULL tokenizer");
  size_t total = 0;
  for (size_t k = 0; k < n_spans; k++) {
    size_t bad;
    if (spans[k].len && !spans[k].text) return di_errorf(st, DI_ERR_INVALID, "tokenizer: NULL text");
    if (!di_utf8_valid(spans[k].text, spans[k].len, &bad))
      return di_errorf(st, DI_ERR_INVALID, "invalid UTF-8 at byte offset %zu", total + bad);
    total += spans[k].len;
  }
  enc_ctx c = {0};
  c.t = t;
  di_ivec out = {0};
  c.out = &out;
  size_t one_end = total;
  di_tok_span one;
  char *joined = NULL;
  if (n_spans <= 1) {
    one = n_spans ? spans[0] : (di_tok_span){"", 0, DI_TOK_PARSE_NONE};
    c.spans = &one;
    c.n_spans = 1;
    c.span_end = &one_end;
    c.text = one.text ? one.text : "";
  } else {
    joined = malloc(total + 1);
    c.span_end = malloc(n_spans * sizeof *c.span_end);
    if (!joined || !c.span_end) {
      free(joined);
      free(c.span_end);
      return oom(st);
    }
    size_t o = 0;
    for (size_t k = 0; k < n_spans; k++) {
      if (spans[k].len) memcpy(joined + o, spans[k].text, spans[k].len);
      o += spans[k].len;
      c.span_end[k] = o;
    }
    c.spans = spans;
    c.n_spans = n_spans;
    c.text = joined;
  }
  c.len = total;
  di_code rc = DI_OK;
  size_t pos = 0;
  amatch m;
  while (rc == DI_OK && next_match(&c, &t->trie_raw, pos, total, pos, DI_TOK_PARSE_ALL, true, &m)) {
    if (m.start > pos) rc = encode_segment(&c, pos, m.start, st);
    if (rc == DI_OK && !di_ivec_push(&out, m.id)) rc = oom(st);
    pos = m.stop;
  }
  if (rc == DI_OK && (pos < total || total == 0)) rc = encode_segment(&c, pos, total, st);
  free(c.seg.p);
  free(c.norm.p);
  free(c.pieces.p);
  if (joined) {
    free(joined);
    free(c.span_end);
  }
  if (rc == DI_OK && add_special && t->n_post) {
    size_t body = out.n, need = body;
    for (size_t k = 0; k < t->n_post; k++) need += t->post[k] >= 0;
    int32_t *r = malloc((need ? need : 1) * sizeof *r);
    if (!r) rc = oom(st);
    else {
      size_t o = 0;
      for (size_t k = 0; k < t->n_post; k++) {
        if (t->post[k] >= 0) r[o++] = t->post[k];
        else {
          if (body) memcpy(r + o, out.p, body * sizeof *r);
          o += body;
        }
      }
      free(out.p);
      out.p = r;
      out.n = o;
    }
  }
  if (rc != DI_OK) {
    free(out.p);
    return rc;
  }
  if (!out.p) out.p = malloc(sizeof(int32_t));
  if (!out.p) return oom(st);
  *ids = out.p;
  *n = out.n;
  return DI_OK;
}

di_code di_tokenizer_encode(const di_tokenizer *t, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t **ids, size_t *n, di_status *st) {
  di_tok_span s = {text ? text : "", text ? len : 0,
                   parse_special ? DI_TOK_PARSE_ALL : DI_TOK_PARSE_NONSPECIAL};
  return di_tokenizer_encode_spans(t, &s, 1, add_special, ids, n, st);
}
