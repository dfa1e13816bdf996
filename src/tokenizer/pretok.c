/* Pre-tokenizers (HF `pre_tokenizers`): split a normalized segment into
 * pieces that the model encodes independently. Pieces are spans into one
 * buffer; the two steps that change text (Metaspace, ByteLevel's prefix space)
 * rebuild the buffer. ByteLevel's byte->char mapping itself is a no-op here
 * because byte-level vocabularies are stored as raw bytes. */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

typedef struct {
  size_t a, b;
  bool m;
} mseg;
typedef struct {
  mseg *p;
  size_t n, cap;
} msegvec;

static bool mpush(msegvec *v, size_t a, size_t b, bool m) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 64;
    mseg *p = realloc(v->p, cap * sizeof *p);
    if (!p) return false;
    v->p = p;
    v->cap = cap;
  }
  v->p[v->n++] = (mseg){a, b, m};
  return true;
}

static di_code oom(di_status *st) { return di_errorf(st, DI_ERR_NOMEM, "tokenizer: out of memory"); }

/* Applies a split behaviour to the match/non-match segments of one piece
 * (offsets relative to the buffer), appending non-empty results to out. */
static bool apply_behavior(msegvec *segs, di_split_behavior beh, bool invert, di_spanvec *out) {
  if (invert)
    for (size_t i = 0; i < segs->n; i++) segs->p[i].m = !segs->p[i].m;
  size_t base = out->n;
  switch (beh) {
  case DI_SPLIT_REMOVED:
    for (size_t i = 0; i < segs->n; i++)
      if (!segs->p[i].m && !di_spanvec_push(out, segs->p[i].a, segs->p[i].b - segs->p[i].a)) return false;
    break;
  case DI_SPLIT_ISOLATED:
    for (size_t i = 0; i < segs->n; i++)
      if (!di_spanvec_push(out, segs->p[i].a, segs->p[i].b - segs->p[i].a)) return false;
    break;
  case DI_SPLIT_MERGED_PREV: {
    bool prev = false;
    for (size_t i = 0; i < segs->n; i++) {
      mseg s = segs->p[i];
      if (s.m && !prev && out->n > base) out->p[out->n - 1].len = s.b - out->p[out->n - 1].off;
      else if (!di_spanvec_push(out, s.a, s.b - s.a)) return false;
      prev = s.m;
    }
    break;
  }
  case DI_SPLIT_MERGED_NEXT: {
    /* built right to left as HF does, then reversed */
    bool prev = false;
    for (size_t k = segs->n; k-- > 0;) {
      mseg s = segs->p[k];
      if (s.m && !prev && out->n > base) {
        di_span *l = &out->p[out->n - 1];
        l->len = l->off + l->len - s.a;
        l->off = s.a;
      } else if (!di_spanvec_push(out, s.a, s.b - s.a)) {
        return false;
      }
      prev = s.m;
    }
    for (size_t i = base, j = out->n; i + 1 < j; i++, j--) {
      di_span tmp = out->p[i];
      out->p[i] = out->p[j - 1];
      out->p[j - 1] = tmp;
    }
    break;
  }
  case DI_SPLIT_CONTIGUOUS: {
    bool prev = false;
    for (size_t i = 0; i < segs->n; i++) {
      mseg s = segs->p[i];
      if (s.m == prev && out->n > base) out->p[out->n - 1].len = s.b - out->p[out->n - 1].off;
      else if (!di_spanvec_push(out, s.a, s.b - s.a)) return false;
      prev = s.m;
    }
    break;
  }
  }
  /* HF drops empty pieces */
  size_t w = base;
  for (size_t i = base; i < out->n; i++)
    if (out->p[i].len) out->p[w++] = out->p[i];
  out->n = w;
  return true;
}

/* match segments for a regex over s[a..b) */
static di_code re_segments(pcre2_code *re, pcre2_match_data *md, const char *s, size_t a, size_t b,
                           msegvec *segs, di_status *st) {
  const char *sub = s + a;
  size_t n = b - a, pos = 0, prev = 0;
  while (pos <= n) {
    int rc = pcre2_match(re, (PCRE2_SPTR)sub, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[120];
      pcre2_get_error_message(rc, msg, sizeof msg);
      return di_errorf(st, DI_ERR_INVALID, "tokenizer: regex match failed at byte %zu: %s", a + pos,
                       (char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    if (ov[0] > prev && !mpush(segs, a + prev, a + ov[0], false)) return oom(st);
    if (!mpush(segs, a + ov[0], a + ov[1], true)) return oom(st);
    prev = ov[1];
    if (ov[1] == ov[0]) {
      if (ov[1] >= n) break;
      pos = ov[1] + (size_t)di_utf8_len((unsigned char)sub[ov[1]]);
    } else {
      pos = ov[1];
    }
  }
  if (prev < n && !mpush(segs, a + prev, b, false)) return oom(st);
  return DI_OK;
}

static di_code lit_segments(const char *lit, size_t ll, const char *s, size_t a, size_t b,
                            msegvec *segs, di_status *st) {
  size_t prev = a, i = a;
  while (ll && i < b) {
    const char *hit = memmem(s + i, b - i, lit, ll);
    if (!hit) break;
    size_t h = (size_t)(hit - s);
    if (h > prev && !mpush(segs, prev, h, false)) return oom(st);
    if (!mpush(segs, h, h + ll, true)) return oom(st);
    prev = i = h + ll;
  }
  if (prev < b && !mpush(segs, prev, b, false)) return oom(st);
  return DI_OK;
}

typedef bool (*char_pred)(int32_t);

static di_code pred_segments(char_pred pred, const char *s, size_t a, size_t b, msegvec *segs,
                             di_status *st) {
  size_t prev = a, i = a;
  while (i < b) {
    int l;
    int32_t cp = di_utf8_decode(s + i, b - i, &l);
    if (pred(cp)) {
      if (i > prev && !mpush(segs, prev, i, false)) return oom(st);
      if (!mpush(segs, i, i + (size_t)l, true)) return oom(st);
      prev = i + (size_t)l;
    }
    i += (size_t)l;
  }
  if (prev < b && !mpush(segs, prev, b, false)) return oom(st);
  return DI_OK;
}

/* Rebuilds the buffer so each piece can gain a prefix / have spaces replaced. */
static di_code rewrite(const di_pre *p, di_buf *buf, di_spanvec *pieces, bool at_start, di_status *st) {
  di_buf nb = {0};
  if (!di_buf_put(&nb, "", 0)) return oom(st);
  for (size_t k = 0; k < pieces->n; k++) {
    const char *s = buf->p + pieces->p[k].off;
    size_t n = pieces->p[k].len;
    size_t start = nb.n;
    bool ok = true;
    if (p->kind == DI_PRE_BYTELEVEL) {
      if (p->add_prefix_space && (n == 0 || s[0] != ' ')) ok = di_buf_putc(&nb, ' ');
      ok = ok && di_buf_put(&nb, s, n);
    } else { /* Metaspace */
      bool first = at_start && pieces->p[k].off == 0;
      bool starts = n >= p->litlen && memcmp(s, p->lit, p->litlen) == 0;
      if (!starts && n && s[0] == ' ') starts = true; /* the space becomes the replacement */
      if (!starts && (p->prepend_scheme == 0 || (p->prepend_scheme == 1 && first)))
        ok = di_buf_put(&nb, p->lit, p->litlen);
      for (size_t i = 0; ok && i < n; i++)
        ok = s[i] == ' ' ? di_buf_put(&nb, p->lit, p->litlen) : di_buf_putc(&nb, s[i]);
    }
    if (!ok) {
      free(nb.p);
      return oom(st);
    }
    pieces->p[k].off = start;
    pieces->p[k].len = nb.n - start;
  }
  free(buf->p);
  *buf = nb;
  return DI_OK;
}

di_code di_tok_pretokenize(const di_tokenizer *t, di_buf *buf, bool at_start, di_spanvec *out,
                           di_status *st) {
  out->n = 0;
  if (!di_spanvec_push(out, 0, buf->n)) return oom(st);
  if (buf->n == 0) return DI_OK;
  di_spanvec next = {0};
  msegvec segs = {0};
  pcre2_match_data *md = NULL;
  di_code rc = DI_OK;
  for (size_t k = 0; k < t->n_pres && rc == DI_OK; k++) {
    const di_pre *p = &t->pres[k];
    if (p->kind == DI_PRE_BYTELEVEL && p->add_prefix_space) rc = rewrite(p, buf, out, at_start, st);
    if (p->kind == DI_PRE_METASPACE) rc = rewrite(p, buf, out, at_start, st);
    if (rc != DI_OK) break;
    if (p->kind == DI_PRE_BYTELEVEL && !p->re) continue;
    if (p->kind == DI_PRE_METASPACE && !p->ms_split) continue;
    next.n = 0;
    if (p->re) {
      pcre2_match_data_free(md);
      md = pcre2_match_data_create_from_pattern(p->re, NULL);
      if (!md) {
        rc = oom(st);
        break;
      }
    }
    for (size_t i = 0; i < out->n && rc == DI_OK; i++) {
      size_t a = out->p[i].off, b = a + out->p[i].len;
      segs.n = 0;
      di_split_behavior beh = p->behavior;
      bool inv = p->invert;
      switch (p->kind) {
      case DI_PRE_SPLIT:
        rc = p->re ? re_segments(p->re, md, buf->p, a, b, &segs, st)
                   : lit_segments(p->lit, p->litlen, buf->p, a, b, &segs, st);
        break;
      case DI_PRE_BYTELEVEL:
        rc = re_segments(p->re, md, buf->p, a, b, &segs, st);
        beh = DI_SPLIT_ISOLATED;
        inv = false;
        break;
      case DI_PRE_WHITESPACE:
        rc = re_segments(p->re, md, buf->p, a, b, &segs, st);
        beh = DI_SPLIT_REMOVED;
        inv = true;
        break;
      case DI_PRE_METASPACE:
        rc = lit_segments(p->lit, p->litlen, buf->p, a, b, &segs, st);
        beh = DI_SPLIT_MERGED_NEXT;
        inv = false;
        break;
      case DI_PRE_DIGITS:
        rc = pred_segments(di_uni_is_numeric, buf->p, a, b, &segs, st);
        beh = p->individual_digits ? DI_SPLIT_ISOLATED : DI_SPLIT_CONTIGUOUS;
        inv = false;
        break;
      case DI_PRE_PUNCT:
        rc = pred_segments(di_uni_is_punct, buf->p, a, b, &segs, st);
        inv = false;
        break;
      case DI_PRE_WSSPLIT:
      case DI_PRE_BERT:
        rc = pred_segments(di_uni_is_whitespace, buf->p, a, b, &segs, st);
        beh = DI_SPLIT_REMOVED;
        inv = false;
        break;
      }
      if (rc == DI_OK && !apply_behavior(&segs, beh, inv, &next)) rc = oom(st);
    }
    if (rc == DI_OK && p->kind == DI_PRE_BERT) {
      di_spanvec tmp = *out;
      *out = next;
      next = tmp;
      next.n = 0;
      for (size_t i = 0; i < out->n && rc == DI_OK; i++) {
        segs.n = 0;
        rc = pred_segments(di_uni_is_punct, buf->p, out->p[i].off, out->p[i].off + out->p[i].len,
                           &segs, st);
        if (rc == DI_OK && !apply_behavior(&segs, DI_SPLIT_ISOLATED, false, &next)) rc = oom(st);
      }
    }
    di_spanvec tmp = *out;
    *out = next;
    next = tmp;
  }
  pcre2_match_data_free(md);
  free(next.p);
  free(segs.p);
  return rc;
}
