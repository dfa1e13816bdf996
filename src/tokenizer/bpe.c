/* Models: BPE (HF `models.BPE`: merges by rank, ignore_merges, byte_fallback,
 * fuse_unk) and SentencePiece score merging (llama.cpp "SPM", used for GGUF
 * `llama` vocabularies that have scores but no merges). Both run in
 * O(n log n) per word with a binary heap over a linked list of symbols, so a
 * 10 MB word without spaces costs seconds, not hours. Short words go through a
 * small direct-mapped cache. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

#define CACHE_BITS 15
#define CACHE_WORD 46
#define CACHE_IDS 14

typedef struct {
  uint64_t hash;
  uint8_t wlen, nids;
  char w[CACHE_WORD];
  int32_t ids[CACHE_IDS];
} cache_entry;

struct di_bpe_cache {
  pthread_mutex_t mu;
  cache_entry e[1u << CACHE_BITS];
};

di_bpe_cache *di_bpe_cache_new(void) {
  di_bpe_cache *c = calloc(1, sizeof *c);
  if (c) pthread_mutex_init(&c->mu, NULL);
  return c;
}

void di_bpe_cache_free(di_bpe_cache *c) {
  if (!c) return;
  pthread_mutex_destroy(&c->mu);
  free(c);
}

static bool cache_get(di_bpe_cache *c, const char *w, size_t n, uint64_t h, di_ivec *out) {
  if (pthread_mutex_trylock(&c->mu) != 0) return false;
  cache_entry *e = &c->e[h & ((1u << CACHE_BITS) - 1)];
  bool hit = e->hash == h && e->wlen == n && memcmp(e->w, w, n) == 0 && e->nids;
  int32_t ids[CACHE_IDS];
  size_t k = e->nids;
  if (hit) memcpy(ids, e->ids, k * sizeof *ids);
  pthread_mutex_unlock(&c->mu);
  if (!hit) return false;
  for (size_t i = 0; i < k; i++)
    if (!di_ivec_push(out, ids[i])) return false;
  return true;
}

static void cache_put(di_bpe_cache *c, const char *w, size_t n, uint64_t h, const int32_t *ids,
                      size_t k) {
  if (k == 0 || k > CACHE_IDS || pthread_mutex_trylock(&c->mu) != 0) return;
  cache_entry *e = &c->e[h & ((1u << CACHE_BITS) - 1)];
  e->hash = h;
  e->wlen = (uint8_t)n;
  e->nids = (uint8_t)k;
  memcpy(e->w, w, n);
  memcpy(e->ids, ids, k * sizeof *ids);
  pthread_mutex_unlock(&c->mu);
}

/* 4-ary min-heap of (rank << 32 | position): HF pops the lowest rank, then
 * the leftmost position. Packed keys and four children per cache line keep
 * 10-million-symbol words (a 10 MB input without spaces) within seconds. */
typedef struct {
  uint64_t *p;
  size_t n, cap;
} heap;

static bool hpush(heap *h, uint64_t x) {
  if (h->n == h->cap) {
    size_t cap = h->cap ? h->cap * 2 : 64;
    uint64_t *p = realloc(h->p, cap * sizeof *p);
    if (!p) return false;
    h->p = p;
    h->cap = cap;
  }
  size_t i = h->n++;
  while (i > 0) {
    size_t par = (i - 1) / 4;
    if (h->p[par] <= x) break;
    h->p[i] = h->p[par];
    i = par;
  }
  h->p[i] = x;
  return true;
}

static void hsift(heap *h, size_t i, uint64_t x) {
  for (;;) {
    size_t c = 4 * i + 1;
    if (c >= h->n) break;
    size_t m = c, e = c + 4 < h->n ? c + 4 : h->n;
    for (size_t k = c + 1; k < e; k++)
      if (h->p[k] < h->p[m]) m = k;
    if (h->p[m] >= x) break;
    h->p[i] = h->p[m];
    i = m;
  }
  h->p[i] = x;
}

static uint64_t hpop(heap *h) {
  uint64_t top = h->p[0], x = h->p[--h->n];
  if (h->n) hsift(h, 0, x);
  return top;
}

static void heapify(heap *h) {
  if (h->n < 2) return;
  for (size_t i = (h->n - 2) / 4 + 1; i-- > 0;) hsift(h, i, h->p[i]);
}

static inline uint64_t hkey(uint32_t rank, int32_t pos) { return ((uint64_t)rank << 32) | (uint32_t)pos; }

typedef struct {
  int32_t id;
  int32_t prev, next;
  uint32_t start, len;
} sym;

static di_code oom(di_status *st) { return di_errorf(st, DI_ERR_NOMEM, "tokenizer: out of memory"); }

/* Initial symbols: bytes (byte-level) or UTF-8 characters, with byte
 * fallback / unk for characters the vocabulary lacks. id -1 marks a
 * character to resolve after SPM merging. */
static bool initial_symbols(const di_tokenizer *t, const char *w, size_t n, sym **out, size_t *nsym) {
  sym *s = malloc((n + 1) * sizeof *s);
  if (!s) return false;
  size_t k = 0;
  bool prev_unk = false;
  for (size_t i = 0; i < n;) {
    size_t l = t->byte_level ? 1 : (size_t)di_utf8_len((unsigned char)w[i]);
    if (l > n - i) l = n - i;
    int32_t id = t->byte_level ? t->byte_sym[(unsigned char)w[i]] : di_smap_get(&t->model_map, w + i, l);
    if (id < 0 && t->model == DI_MODEL_SPM) {
      s[k++] = (sym){-1, 0, 0, (uint32_t)i, (uint32_t)l};
      prev_unk = false;
    } else if (id >= 0) {
      s[k++] = (sym){id, 0, 0, (uint32_t)i, (uint32_t)l};
      prev_unk = false;
    } else {
      bool fb = t->byte_fallback;
      for (size_t j = 0; fb && j < l; j++) fb = t->byte_sym[(unsigned char)w[i + j]] >= 0;
      if (fb) {
        for (size_t j = 0; j < l; j++) s[k++] = (sym){t->byte_sym[(unsigned char)w[i + j]], 0, 0, (uint32_t)(i + j), 1};
        prev_unk = false;
      } else if (t->unk_id >= 0) {
        if (t->fuse_unk && prev_unk) {
          s[k - 1].len += (uint32_t)l;
        } else {
          s[k++] = (sym){t->unk_id, 0, 0, (uint32_t)i, (uint32_t)l};
        }
        prev_unk = true;
      } /* else: HF drops the character */
    }
    i += l;
  }
  for (size_t i = 0; i < k; i++) {
    s[i].prev = (int32_t)i - 1;
    s[i].next = i + 1 < k ? (int32_t)i + 1 : -1;
  }
  *out = s;
  *nsym = k;
  return true;
}

/* Rank of the merge of the pair starting at symbol a, or UINT32_MAX; *id gets
 * the merged token. */
static inline uint32_t pair_rank(const di_tokenizer *t, const char *w, const sym *s, int32_t a, int32_t *id) {
  int32_t b = s[a].next;
  if (b < 0) return UINT32_MAX;
  if (t->model == DI_MODEL_BPE) {
    if (s[a].id < 0 || s[b].id < 0) return UINT32_MAX;
    const di_pmap_slot *m = di_pmap_get(&t->merges, s[a].id, s[b].id);
    if (!m) return UINT32_MAX;
    *id = m->id;
    return (uint32_t)m->rank;
  }
  size_t len = s[a].len + s[b].len;
  if (len > t->max_token_len) return UINT32_MAX;
  int32_t k = di_smap_get(&t->model_map, w + s[a].start, len);
  if (k < 0) return UINT32_MAX;
  *id = k;
  return t->spm_rank[k];
}

static inline bool try_push(const di_tokenizer *t, heap *h, const char *w, const sym *s, int32_t a) {
  int32_t id;
  uint32_t r = pair_rank(t, w, s, a, &id);
  return r == UINT32_MAX || hpush(h, hkey(r, a));
}

di_code di_tok_model_encode(const di_tokenizer *t, const char *w, size_t n, di_ivec *out,
                            di_status *st) {
  if (n == 0) return DI_OK;
  if (t->ignore_merges && n <= t->max_token_len) {
    int32_t id = di_smap_get(&t->model_map, w, n);
    if (id >= 0) return di_ivec_push(out, id) ? DI_OK : oom(st);
  }
  uint64_t h = 0;
  bool cacheable = t->cache && n <= CACHE_WORD;
  if (cacheable) {
    h = di_tok_hash(w, n);
    if (cache_get(t->cache, w, n, h, out)) return DI_OK;
  }
  size_t first_out = out->n;
  sym *s;
  size_t ns;
  if (!initial_symbols(t, w, n, &s, &ns)) return oom(st);
  heap hp = {0};
  bool ok = true;
  if (ns > 1) {
    hp.cap = ns;
    if (!(hp.p = malloc(hp.cap * sizeof *hp.p))) ok = false;
    for (size_t i = 0; ok && i + 1 < ns; i++) {
      int32_t id;
      uint32_t r = pair_rank(t, w, s, (int32_t)i, &id);
      if (r != UINT32_MAX) hp.p[hp.n++] = hkey(r, (int32_t)i);
    }
    heapify(&hp);
  }
  while (ok && hp.n) {
    uint64_t top = hpop(&hp);
    int32_t a = (int32_t)(uint32_t)top, b = s[a].next, id = -1;
    if (s[a].len == 0 || b < 0 || pair_rank(t, w, s, a, &id) != (uint32_t)(top >> 32)) continue;
    s[a].id = id;
    s[a].len += s[b].len;
    s[a].next = s[b].next;
    if (s[b].next >= 0) s[s[b].next].prev = a;
    s[b].len = 0;
    if (s[a].prev >= 0) ok = try_push(t, &hp, w, s, s[a].prev);
    if (ok) ok = try_push(t, &hp, w, s, a);
  }
  for (int32_t i = ns ? 0 : -1; ok && i >= 0; i = s[i].next) {
    if (s[i].id >= 0) {
      ok = di_ivec_push(out, s[i].id);
      continue;
    }
    /* SPM: a character outside the vocabulary */
    bool fb = t->byte_fallback;
    for (uint32_t j = 0; fb && j < s[i].len; j++) fb = t->byte_sym[(unsigned char)w[s[i].start + j]] >= 0;
    if (fb) {
      for (uint32_t j = 0; ok && j < s[i].len; j++)
        ok = di_ivec_push(out, t->byte_sym[(unsigned char)w[s[i].start + j]]);
    } else if (t->unk_id >= 0) {
      ok = di_ivec_push(out, t->unk_id);
    }
  }
  free(s);
  free(hp.p);
  if (!ok) return oom(st);
  if (cacheable && out->n > first_out) cache_put(t->cache, w, n, h, out->p + first_out, out->n - first_out);
  return DI_OK;
}
