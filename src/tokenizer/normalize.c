/* Normalizers (HF `normalizers`): each step rewrites the whole segment. No
 * offsets are tracked: added tokens are matched before normalization and the
 * engine never needs character alignments. */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_internal.h"

static di_code oom(di_status *st) { return di_errorf(st, DI_ERR_NOMEM, "tokenizer: out of memory"); }

static di_code uni_map(const char *s, size_t n, int opts, di_buf *out, di_status *st) {
  utf8proc_uint8_t *dst = NULL;
  utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                    (utf8proc_option_t)(opts | UTF8PROC_STABLE));
  if (r < 0) {
    free(dst);
    return di_errorf(st, DI_ERR_INVALID, "tokenizer: unicode normalization failed: %s",
                     utf8proc_errmsg(r));
  }
  out->n = 0;
  bool ok = di_buf_put(out, dst, (size_t)r);
  free(dst);
  return ok ? DI_OK : oom(st);
}

static di_code lower(const char *s, size_t n, di_buf *out, di_status *st) {
  out->n = 0;
  if (!di_buf_reserve(out, n + 8)) return oom(st);
  size_t i = 0;
  while (i < n) {
    int l;
    int32_t cp = di_utf8_decode(s + i, n - i, &l);
    char tmp[8];
    int k;
    if (cp == 0x130) { /* Rust: 'İ'.to_lowercase() == "i\u{307}" */
      memcpy(tmp, "i\xcc\x87", 3);
      k = 3;
    } else {
      k = di_utf8_encode((uint32_t)utf8proc_tolower(cp), tmp);
    }
    if (!di_buf_put(out, tmp, (size_t)k)) return oom(st);
    i += (size_t)l;
  }
  return DI_OK;
}

static di_code replace_lit(const di_norm *nm, const char *s, size_t n, di_buf *out, di_status *st) {
  out->n = 0;
  if (!di_buf_reserve(out, n + 1)) return oom(st);
  size_t i = 0;
  while (i < n) {
    const char *hit = nm->alen ? memmem(s + i, n - i, nm->a, nm->alen) : NULL;
    if (!hit) {
      if (!di_buf_put(out, s + i, n - i)) return oom(st);
      break;
    }
    if (!di_buf_put(out, s + i, (size_t)(hit - (s + i))) || !di_buf_put(out, nm->b, nm->blen))
      return oom(st);
    i = (size_t)(hit - s) + nm->alen;
  }
  if (!out->p && !di_buf_put(out, "", 0)) return oom(st);
  return DI_OK;
}

static di_code replace_re(const di_norm *nm, const char *s, size_t n, di_buf *out, di_status *st) {
  out->n = 0;
  if (!di_buf_put(out, "", 0)) return oom(st);
  pcre2_match_data *md = pcre2_match_data_create_from_pattern(nm->re, NULL);
  if (!md) return oom(st);
  size_t i = 0, prev = 0;
  while (i <= n) {
    int rc = pcre2_match(nm->re, (PCRE2_SPTR)s, n, i, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc < 0) break;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    if (!di_buf_put(out, s + prev, ov[0] - prev) || !di_buf_put(out, nm->b, nm->blen)) {
      pcre2_match_data_free(md);
      return oom(st);
    }
    prev = ov[1];
    if (ov[1] == ov[0]) {
      if (ov[1] >= n) break;
      int l = di_utf8_len((unsigned char)s[ov[1]]);
      if (!di_buf_put(out, s + ov[1], (size_t)l)) {
        pcre2_match_data_free(md);
        return oom(st);
      }
      prev = ov[1] + (size_t)l;
    }
    i = prev;
  }
  pcre2_match_data_free(md);
  if (prev < n && !di_buf_put(out, s + prev, n - prev)) return oom(st);
  return DI_OK;
}

static di_code strip(const di_norm *nm, const char *s, size_t n, di_buf *out, di_status *st) {
  size_t a = 0, b = n;
  if (nm->left)
    while (a < b) {
      int l;
      int32_t cp = di_utf8_decode(s + a, b - a, &l);
      if (!di_uni_is_whitespace(cp)) break;
      a += (size_t)l;
    }
  if (nm->right)
    while (b > a) {
      size_t k = b - 1;
      while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
      int l;
      int32_t cp = di_utf8_decode(s + k, b - k, &l);
      if (!di_uni_is_whitespace(cp)) break;
      b = k;
    }
  out->n = 0;
  return di_buf_put(out, s + a, b - a) ? DI_OK : oom(st);
}

static di_code strip_accents(const char *s, size_t n, di_buf *out, di_status *st) {
  out->n = 0;
  if (!di_buf_put(out, "", 0)) return oom(st);
  size_t i = 0;
  while (i < n) {
    int l;
    int32_t cp = di_utf8_decode(s + i, n - i, &l);
    if (utf8proc_category(cp) != UTF8PROC_CATEGORY_MN && !di_buf_put(out, s + i, (size_t)l))
      return oom(st);
    i += (size_t)l;
  }
  return DI_OK;
}

di_code di_tok_normalize(const di_tokenizer *t, const char *s, size_t n, di_buf *out,
                         di_status *st) {
  out->n = 0;
  if (!di_buf_put(out, s, n)) return oom(st);
  di_buf tmp = {0};
  di_code rc = DI_OK;
  for (size_t k = 0; k < t->n_norms && rc == DI_OK; k++) {
    const di_norm *nm = &t->norms[k];
    const char *in = out->p;
    size_t len = out->n;
    switch (nm->kind) {
    case DI_NORM_NFC: rc = uni_map(in, len, UTF8PROC_COMPOSE, &tmp, st); break;
    case DI_NORM_NFD: rc = uni_map(in, len, UTF8PROC_DECOMPOSE, &tmp, st); break;
    case DI_NORM_NFKC: rc = uni_map(in, len, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, &tmp, st); break;
    case DI_NORM_NFKD: rc = uni_map(in, len, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, &tmp, st); break;
    case DI_NORM_LOWER: rc = lower(in, len, &tmp, st); break;
    case DI_NORM_REPLACE:
      rc = nm->re ? replace_re(nm, in, len, &tmp, st) : replace_lit(nm, in, len, &tmp, st);
      break;
    case DI_NORM_PREPEND:
      tmp.n = 0;
      if (len && (!di_buf_put(&tmp, nm->a, nm->alen) || !di_buf_put(&tmp, in, len))) rc = oom(st);
      else if (!len && !di_buf_put(&tmp, "", 0)) rc = oom(st);
      break;
    case DI_NORM_STRIP: rc = strip(nm, in, len, &tmp, st); break;
    case DI_NORM_STRIP_ACCENTS: rc = strip_accents(in, len, &tmp, st); break;
    }
    if (rc == DI_OK) {
      di_buf sw = *out;
      *out = tmp;
      tmp = sw;
    }
  }
  free(tmp.p);
  return rc;
}
