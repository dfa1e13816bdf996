/* Small containers, hash maps, UTF-8 and Unicode helpers for the tokenizer. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include <xxhash.h>

#include "tokenizer/tok_internal.h"

bool di_buf_reserve(di_buf *b, size_t extra) {
  if (b->n + extra <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < b->n + extra) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) return false;
  b->p = p;
  b->cap = cap;
  return true;
}

bool di_buf_put(di_buf *b, const void *s, size_t n) {
  if (!di_buf_reserve(b, n + 1)) return false;
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
  return true;
}

bool di_ivec_push(di_ivec *v, int32_t x) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 64;
    int32_t *p = realloc(v->p, cap * sizeof *p);
    if (!p) return false;
    v->p = p;
    v->cap = cap;
  }
  v->p[v->n++] = x;
  return true;
}

bool di_spanvec_push(di_spanvec *v, size_t off, size_t len) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 64;
    di_span *p = realloc(v->p, cap * sizeof *p);
    if (!p) return false;
    v->p = p;
    v->cap = cap;
  }
  v->p[v->n].off = off;
  v->p[v->n].len = len;
  v->n++;
  return true;
}

uint64_t di_tok_hash(const void *p, size_t n) { return XXH3_64bits(p, n); }

static size_t pow2_at_least(size_t n) {
  size_t c = 16;
  while (c < n) c *= 2;
  return c;
}

bool di_smap_init(di_smap *m, size_t expect, const char *const *pool) {
  m->cap = pow2_at_least(expect * 2 + 16);
  m->n = 0;
  m->pool = pool;
  m->slots = malloc(m->cap * sizeof *m->slots);
  if (!m->slots) return false;
  for (size_t i = 0; i < m->cap; i++) m->slots[i].val = -1;
  return true;
}

void di_smap_free(di_smap *m) {
  free(m->slots);
  m->slots = NULL;
  m->cap = m->n = 0;
}

static bool smap_grow(di_smap *m) {
  di_smap nm = *m;
  nm.cap = m->cap * 2;
  nm.slots = malloc(nm.cap * sizeof *nm.slots);
  if (!nm.slots) return false;
  for (size_t i = 0; i < nm.cap; i++) nm.slots[i].val = -1;
  for (size_t i = 0; i < m->cap; i++) {
    if (m->slots[i].val < 0) continue;
    size_t j = m->slots[i].hash & (nm.cap - 1);
    while (nm.slots[j].val >= 0) j = (j + 1) & (nm.cap - 1);
    nm.slots[j] = m->slots[i];
  }
  free(m->slots);
  *m = nm;
  return true;
}

bool di_smap_put(di_smap *m, uint32_t koff, uint32_t klen, int32_t val, int32_t *existing) {
  if ((m->n + 1) * 2 > m->cap && !smap_grow(m)) return false;
  const char *k = *m->pool + koff;
  uint32_t h = (uint32_t)di_tok_hash(k, klen);
  size_t i = h & (m->cap - 1);
  for (;;) {
    di_smap_slot *s = &m->slots[i];
    if (s->val < 0) break;
    if (s->hash == h && s->klen == klen && memcmp(*m->pool + s->koff, k, klen) == 0) {
      if (existing) *existing = s->val;
      return true;
    }
    i = (i + 1) & (m->cap - 1);
  }
  m->slots[i] = (di_smap_slot){h, val, koff, klen};
  m->n++;
  if (existing) *existing = -1;
  return true;
}

int32_t di_smap_get(const di_smap *m, const char *k, size_t n) {
  if (!m->cap) return -1;
  uint32_t h = (uint32_t)di_tok_hash(k, n);
  size_t i = h & (m->cap - 1);
  const char *pool = *m->pool;
  for (;;) {
    const di_smap_slot *s = &m->slots[i];
    if (s->val < 0) return -1;
    if (s->hash == h && s->klen == n && memcmp(pool + s->koff, k, n) == 0) return s->val;
    i = (i + 1) & (m->cap - 1);
  }
}

bool di_pmap_init(di_pmap *m, size_t expect) {
  m->cap = pow2_at_least(expect * 2 + 16);
  m->n = 0;
  m->slots = malloc(m->cap * sizeof *m->slots);
  if (!m->slots) return false;
  for (size_t i = 0; i < m->cap; i++) m->slots[i].key = UINT64_MAX;
  return true;
}

void di_pmap_free(di_pmap *m) {
  free(m->slots);
  m->slots = NULL;
  m->cap = m->n = 0;
}

bool di_pmap_put(di_pmap *m, int32_t a, int32_t b, int32_t rank, int32_t id) {
  if ((m->n + 1) * 2 > m->cap) {
    di_pmap nm;
    if (!di_pmap_init(&nm, m->cap)) return false;
    for (size_t i = 0; i < m->cap; i++)
      if (m->slots[i].key != UINT64_MAX) {
        di_pmap_slot s = m->slots[i];
        uint64_t h = s.key * 0x9E3779B97F4A7C15ull;
        size_t j = (size_t)(h >> 20) & (nm.cap - 1);
        while (nm.slots[j].key != UINT64_MAX) j = (j + 1) & (nm.cap - 1);
        nm.slots[j] = s;
        nm.n++;
      }
    free(m->slots);
    *m = nm;
  }
  uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
  uint64_t h = key * 0x9E3779B97F4A7C15ull;
  size_t i = (size_t)(h >> 20) & (m->cap - 1);
  while (m->slots[i].key != UINT64_MAX) {
    if (m->slots[i].key == key) return true; /* HF keeps the first (lowest-rank) merge */
    i = (i + 1) & (m->cap - 1);
  }
  m->slots[i] = (di_pmap_slot){key, rank, id};
  m->n++;
  return true;
}

/* ---- UTF-8 ---- */

bool di_utf8_valid(const char *str, size_t len, size_t *bad_offset) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  while (i < len) {
    unsigned char c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) need = 2, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) need = 2;
    else if (c == 0xED) need = 2, hi = 0x9F; /* excludes surrogates */
    else if (c >= 0xEE && c <= 0xEF) need = 2;
    else if (c == 0xF0) need = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) need = 3, hi = 0x8F;
    else goto bad;
    if (i + need >= len) goto bad; /* truncated */
    if (s[i + 1] < lo || s[i + 1] > hi) goto bad;
    for (size_t k = 2; k <= need; k++)
      if ((s[i + k] & 0xC0) != 0x80) goto bad;
    i += need + 1;
    continue;
  bad:
    if (bad_offset) *bad_offset = i;
    return false;
  }
  return true;
}

int32_t di_utf8_decode(const char *str, size_t n, int *len) {
  const unsigned char *s = (const unsigned char *)str;
  if (n == 0) {
    *len = 0;
    return -1;
  }
  unsigned char c = s[0];
  int l = di_utf8_len(c);
  if ((size_t)l > n) l = 1;
  *len = l;
  switch (l) {
  case 1: return c;
  case 2: return ((c & 0x1F) << 6) | (s[1] & 0x3F);
  case 3: return ((c & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F);
  default: return ((c & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F);
  }
}

int di_utf8_encode(uint32_t cp, char out[4]) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

bool di_uni_is_whitespace(int32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool di_uni_is_numeric(int32_t c) {
  utf8proc_category_t k = utf8proc_category(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool di_uni_is_punct(int32_t c) {
  if (c < 0x80)
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
  utf8proc_category_t k = utf8proc_category(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

bool di_uni_is_alnum(int32_t c) {
  utf8proc_category_t k = utf8proc_category(c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || di_uni_is_numeric(c);
}

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the
 * rest to U+0100.. in byte order. */
const uint16_t di_bytelevel_char[256] = {
    0x100, 0x101, 0x102, 0x103, 0x104, 0x105, 0x106, 0x107, 0x108, 0x109, 0x10a, 0x10b,
    0x10c, 0x10d, 0x10e, 0x10f, 0x110, 0x111, 0x112, 0x113, 0x114, 0x115, 0x116, 0x117,
    0x118, 0x119, 0x11a, 0x11b, 0x11c, 0x11d, 0x11e, 0x11f, 0x120, 0x21, 0x22, 0x23,
    0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f,
    0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x3b,
    0x3c, 0x3d, 0x3e, 0x3f, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47,
    0x48, 0x49, 0x4a, 0x4b, 0x4c, 0x4d, 0x4e, 0x4f, 0x50, 0x51, 0x52, 0x53,
    0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x5b, 0x5c, 0x5d, 0x5e, 0x5f,
    0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x6b,
    0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77,
    0x78, 0x79, 0x7a, 0x7b, 0x7c, 0x7d, 0x7e, 0x121, 0x122, 0x123, 0x124, 0x125,
    0x126, 0x127, 0x128, 0x129, 0x12a, 0x12b, 0x12c, 0x12d, 0x12e, 0x12f, 0x130, 0x131,
    0x132, 0x133, 0x134, 0x135, 0x136, 0x137, 0x138, 0x139, 0x13a, 0x13b, 0x13c, 0x13d,
    0x13e, 0x13f, 0x140, 0x141, 0x142, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
    0xa8, 0xa9, 0xaa, 0xab, 0xac, 0x143, 0xae, 0xaf, 0xb0, 0xb1, 0xb2, 0xb3,
    0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf,
    0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb,
    0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7,
    0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xe0, 0xe1, 0xe2, 0xe3,
    0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xeb, 0xec, 0xed, 0xee, 0xef,
    0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb,
    0xfc, 0xfd, 0xfe, 0xff,
};

int di_bytelevel_byte(int32_t cp) {
  if (cp >= 0x21 && cp <= 0x7E) return cp;
  if ((cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return cp;
  if (cp >= 0x100 && cp <= 0x143) {
    /* U+0100.. number the unprintable bytes in order: 0x00-0x20, 0x7F-0xA0, 0xAD */
    int n = cp - 0x100;
    return n <= 32 ? n : n <= 66 ? 0x7F + (n - 33) : 0xAD;
  }
  return -1;
}

/* ---- trie of added tokens ---- */

static bool trie_grow(di_trie *tr) {
  size_t cap = tr->cap ? tr->cap * 2 : 1024;
  uint32_t *k = calloc(cap, sizeof *k), *v = calloc(cap, sizeof *v);
  if (!k || !v) {
    free(k);
    free(v);
    return false;
  }
  for (size_t i = 0; i < tr->cap; i++) {
    if (!tr->keys[i]) continue;
    size_t j = (tr->keys[i] * 2654435761u) & (cap - 1);
    while (k[j]) j = (j + 1) & (cap - 1);
    k[j] = tr->keys[i];
    v[j] = tr->vals[i];
  }
  free(tr->keys);
  free(tr->vals);
  tr->keys = k;
  tr->vals = v;
  tr->cap = cap;
  return true;
}

static inline uint32_t trie_child(const di_trie *tr, uint32_t node, unsigned char c) {
  if (!tr->cap) return 0;
  uint32_t key = ((node << 8) | c) + 1;
  size_t j = (key * 2654435761u) & (tr->cap - 1);
  while (tr->keys[j]) {
    if (tr->keys[j] == key) return tr->vals[j];
    j = (j + 1) & (tr->cap - 1);
  }
  return 0;
}

bool di_trie_add(di_trie *tr, const char *s, size_t n, int32_t idx) {
  if (n == 0) return true;
  if (tr->n_nodes == 0) {
    tr->term = malloc(64 * sizeof *tr->term);
    if (!tr->term) return false;
    tr->term_cap = 64;
    tr->term[0] = -1;
    tr->n_nodes = 1;
  }
  uint32_t node = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    uint32_t ch = trie_child(tr, node, c);
    if (!ch) {
      if ((tr->n_nodes + 1) * 2 > tr->cap && !trie_grow(tr)) return false;
      if (tr->n_nodes == tr->term_cap) {
        int32_t *t = realloc(tr->term, tr->term_cap * 2 * sizeof *t);
        if (!t) return false;
        tr->term = t;
        tr->term_cap *= 2;
      }
      ch = (uint32_t)tr->n_nodes++;
      tr->term[ch] = -1;
      uint32_t key = ((node << 8) | c) + 1;
      size_t j = (key * 2654435761u) & (tr->cap - 1);
      while (tr->keys[j]) j = (j + 1) & (tr->cap - 1);
      tr->keys[j] = key;
      tr->vals[j] = ch;
    }
    node = ch;
  }
  if (tr->term[node] < 0) tr->term[node] = idx; /* the first entry for equal text wins */
  tr->first[(unsigned char)s[0] >> 3] |= (uint8_t)(1u << ((unsigned char)s[0] & 7));
  tr->n_entries++;
  return true;
}

void di_trie_free(di_trie *tr) {
  free(tr->keys);
  free(tr->vals);
  free(tr->term);
  memset(tr, 0, sizeof *tr);
}

int32_t di_trie_longest(const di_trie *tr, const char *s, size_t n, size_t *mlen) {
  if (!tr->n_entries || !n) return -1;
  unsigned char c0 = (unsigned char)s[0];
  if (!(tr->first[c0 >> 3] & (1u << (c0 & 7)))) return -1;
  uint32_t node = 0;
  int32_t best = -1;
  for (size_t i = 0; i < n; i++) {
    node = trie_child(tr, node, (unsigned char)s[i]);
    if (!node) break;
    if (tr->term[node] >= 0) {
      best = tr->term[node];
      *mlen = i + 1;
    }
  }
  return best;
}
