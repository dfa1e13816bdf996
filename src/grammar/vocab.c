/* Vocabulary byte tries, one per tokenizer for the life of the process. */
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static gvocab **g_v;
static size_t g_n;

static const gvocab *cmp_v;
static int cmp_tok(const void *x, const void *y) {
  int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
  uint32_t la = cmp_v->tlen[a], lb = cmp_v->tlen[b];
  int c = memcmp(cmp_v->tb[a], cmp_v->tb[b], la < lb ? la : lb);
  if (c) return c;
  if (la != lb) return la < lb ? -1 : 1;
  return a < b ? -1 : a > b;
}

/* UTF-8 decoding, one byte at a time: the state names what the next byte
 * must be (continuation ranges per RFC 3629, no overlongs or surrogates). */
enum { U8_NEED1 = 2, U8_NEED2, U8_NEED3, U8_E0, U8_ED, U8_F0, U8_F4 };
static uint8_t u8_step(uint8_t s, uint8_t b) {
  bool cont = b >= 0x80 && b <= 0xBF;
  switch (s) {
  case U8_BOUNDARY:
    if (b < 0x80) return U8_BOUNDARY;
    if (b >= 0xC2 && b <= 0xDF) return U8_NEED1;
    if (b == 0xE0) return U8_E0;
    if (b == 0xED) return U8_ED;
    if (b >= 0xE1 && b <= 0xEF) return U8_NEED2;
    if (b == 0xF0) return U8_F0;
    if (b >= 0xF1 && b <= 0xF3) return U8_NEED3;
    if (b == 0xF4) return U8_F4;
    return U8_INVALID;
  case U8_NEED1: return cont ? U8_BOUNDARY : U8_INVALID;
  case U8_NEED2: return cont ? U8_NEED1 : U8_INVALID;
  case U8_NEED3: return cont ? U8_NEED2 : U8_INVALID;
  case U8_E0: return b >= 0xA0 && b <= 0xBF ? U8_NEED1 : U8_INVALID;
  case U8_ED: return b >= 0x80 && b <= 0x9F ? U8_NEED1 : U8_INVALID;
  case U8_F0: return b >= 0x90 && b <= 0xBF ? U8_NEED2 : U8_INVALID;
  case U8_F4: return b >= 0x80 && b <= 0x8F ? U8_NEED2 : U8_INVALID;
  default: return U8_INVALID;
  }
}

static gvocab *build(const di_tokenizer *tok, di_status *st) {
  gvocab *v = calloc(1, sizeof *v);
  v->tok = tok;
  v->n_vocab = di_tokenizer_n_vocab(tok);
  int32_t n = v->n_vocab;
  v->tb = calloc((size_t)n, sizeof *v->tb);
  v->tlen = calloc((size_t)n, sizeof *v->tlen);
  v->sorted = malloc(sizeof *v->sorted * (size_t)n);
  size_t ns = 0, total = 0;
  for (int32_t i = 0; i < n; i++) {
    size_t len = 0;
    const char *b = di_tokenizer_token_bytes(tok, i, &len);
    if (!b || !len || di_tokenizer_is_special(tok, i) || len > 65535) continue;
    v->tb[i] = (const uint8_t *)b;
    v->tlen[i] = (uint32_t)len;
    if (len > v->max_len) v->max_len = (uint32_t)len;
    v->sorted[ns++] = i;
    total += len;
  }
  pthread_mutex_lock(&g_mu); /* cmp_v: qsort has no context argument */
  cmp_v = v;
  qsort(v->sorted, ns, sizeof *v->sorted, cmp_tok);
  pthread_mutex_unlock(&g_mu);
  size_t cap = total + 1;
  v->byte = malloc(cap);
  v->depth = malloc(cap * sizeof *v->depth);
  v->end = malloc(cap * sizeof *v->end);
  v->t_off = malloc(cap * sizeof *v->t_off);
  v->t_n = calloc(cap, sizeof *v->t_n);
  uint32_t *path = malloc(sizeof *path * (v->max_len + 1));
  uint32_t plen = 0, nn = 0;
  const uint8_t *prev = NULL;
  uint32_t prevlen = 0;
  for (size_t k = 0; k < ns; k++) {
    int32_t t = v->sorted[k];
    const uint8_t *b = v->tb[t];
    uint32_t len = v->tlen[t], l = 0;
    while (prev && l < len && l < prevlen && b[l] == prev[l]) l++;
    while (plen > l) v->end[path[--plen]] = nn;
    for (uint32_t d = l; d < len; d++) {
      v->byte[nn] = b[d];
      v->depth[nn] = (uint16_t)(d + 1);
      v->t_off[nn] = 0;
      path[plen++] = nn++;
    }
    uint32_t last = path[len - 1];
    if (v->t_n[last] == 0) v->t_off[last] = (uint32_t)k;
    v->t_n[last]++;
    prev = b;
    prevlen = len;
  }
  while (plen) v->end[path[--plen]] = nn;
  free(path);
  v->n_nodes = nn;
  /* Prefix counts for whole-subtree shortcuts in mask.c: tokens (nodes are in
   * token order) and "rare" nodes: a byte that is not printable ASCII (but
   * '"', '\\') nor part of valid UTF-8 read from the token's start. A
   * subtree without rare nodes, below a node that ends a character, reads
   * only whole or partial string characters. */
  v->tok_cum = malloc(sizeof *v->tok_cum * (nn + 1));
  v->rare_cum = malloc(sizeof *v->rare_cum * (nn + 1));
  v->u8 = malloc(nn ? nn : 1);
  uint8_t *at = malloc(v->max_len + 1); /* decoder state per depth along the walk */
  at[0] = U8_BOUNDARY;
  v->tok_cum[0] = v->rare_cum[0] = 0;
  for (uint32_t i = 0; i < nn; i++) {
    uint8_t b = v->byte[i], d = u8_step(at[v->depth[i] - 1], b);
    at[v->depth[i]] = v->u8[i] = d;
    bool rare = d == U8_INVALID || (b < 0x80 && !(b >= 0x20 && b < 0x7F && b != '"' && b != '\\'));
    v->tok_cum[i + 1] = v->tok_cum[i] + v->t_n[i];
    v->rare_cum[i + 1] = v->rare_cum[i] + rare;
  }
  free(at);
  const int32_t *eos;
  v->n_eos = di_tokenizer_eos(tok, &eos);
  v->eos = malloc(sizeof *v->eos * (v->n_eos + 1));
  memcpy(v->eos, eos, sizeof *eos * v->n_eos);
  (void)st;
  return v;
}

const gvocab *gvocab_get(const di_tokenizer *tok, di_status *st) {
  pthread_mutex_lock(&g_mu);
  for (size_t i = 0; i < g_n; i++)
    if (g_v[i]->tok == tok) {
      pthread_mutex_unlock(&g_mu);
      return g_v[i];
    }
  pthread_mutex_unlock(&g_mu);
  gvocab *v = build(tok, st);
  pthread_mutex_lock(&g_mu);
  gvocab **nv = realloc(g_v, sizeof *g_v * (g_n + 1));
  if (!nv) abort();
  g_v = nv;
  g_v[g_n++] = v;
  pthread_mutex_unlock(&g_mu);
  return v;
}
