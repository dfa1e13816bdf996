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

/* Character counts for the string-chain shortcuts in mask.c: in a state from
 * which every string character leads on through a chain of exactly K more
 * such states, a token made of string characters is accepted iff it has at
 * most K characters (a partial last one counts as one). "Plain" tokens (no
 * rare node from their start) of at most K characters are kept as one bitmap
 * per K, so a walk from such a state ORs one bitmap instead of visiting them. */
static void char_counts(gvocab *v) {
  uint32_t nn = v->n_nodes;
  size_t words = ((size_t)v->n_vocab + 31) / 32;
  v->spec_cum = malloc(sizeof *v->spec_cum * (nn + 1));
  v->ccn = malloc(nn ? nn : 1);
  v->mcc = malloc(nn ? nn : 1);
  v->cct = malloc(v->tok_cum[nn] ? v->tok_cum[nn] : 1);
  uint8_t *cc = malloc(v->max_len + 1); /* characters completed per depth along the walk */
  bool *plain = malloc(v->max_len + 1); /* no rare node so far, per depth */
  cc[0] = 0;
  plain[0] = true;
  v->spec_cum[0] = 0;
  v->max_cc = 0;
  for (uint32_t i = 0; i < nn; i++) {
    uint32_t d = v->depth[i];
    uint8_t b = v->byte[i];
    bool rare = v->rare_cum[i + 1] > v->rare_cum[i];
    v->spec_cum[i + 1] = v->spec_cum[i] + (v->u8[i] == U8_INVALID || b == '"' || b == '\\');
    cc[d] = (uint8_t)(cc[d - 1] + (v->u8[i] == U8_BOUNDARY && cc[d - 1] < 255));
    v->ccn[i] = cc[d];
    plain[d] = plain[d - 1] && !rare;
    uint8_t tc = (uint8_t)(cc[d] + (v->u8[i] != U8_BOUNDARY && cc[d] < 255));
    for (uint32_t k = 0; k < v->t_n[i]; k++) v->cct[v->t_off[i] + k] = tc;
    if (v->t_n[i] && plain[d] && tc > v->max_cc) v->max_cc = tc;
  }
  /* subtree maxima, children before parents: nodes are in preorder */
  for (uint32_t i = nn; i-- > 0;) {
    uint8_t m = v->t_n[i] ? v->cct[v->t_off[i]] : 0;
    for (uint32_t j = i + 1; j < v->end[i]; j = v->end[j])
      if (v->mcc[j] > m) m = v->mcc[j];
    v->mcc[i] = m;
  }
  v->plain = calloc(v->max_cc + 1, sizeof *v->plain);
  uint32_t *bits = calloc(words * (v->max_cc + 1), sizeof *bits);
  for (uint32_t i = 0; i < nn; i++) {
    uint32_t d = v->depth[i];
    bool ok = v->rare_cum[i + 1] == v->rare_cum[i] && (d == 1 || plain[d - 1]);
    plain[d] = ok;
    if (!ok) continue;
    for (uint32_t k = 0; k < v->t_n[i]; k++) {
      int32_t t = v->sorted[v->t_off[i] + k];
      uint8_t c = v->cct[v->t_off[i] + k];
      bits[(size_t)c * words + ((uint32_t)t >> 5)] |= 1u << (t & 31);
    }
  }
  for (uint32_t K = 0; K <= v->max_cc; K++) {
    v->plain[K] = bits + (size_t)K * words;
    if (K)
      for (size_t w = 0; w < words; w++) v->plain[K][w] |= v->plain[K - 1][w];
  }
  free(cc);
  free(plain);
}

static gvocab *build(const di_tokenizer *tok, di_status *st) {
  gvocab *v = calloc(1, sizeof *v);
  v->tok_serial = di_tokenizer_serial(tok);
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
  v->pos = malloc(sizeof *v->pos * (size_t)(n ? n : 1));
  memset(v->pos, 0xff, sizeof *v->pos * (size_t)n);
  for (size_t k = 0; k < ns; k++) v->pos[v->sorted[k]] = (uint32_t)k;
  size_t cap = total + 1;
  v->byte = malloc(cap);
  v->depth = malloc(cap * sizeof *v->depth);
  v->end = malloc(cap * sizeof *v->end);
  v->t_off = malloc(cap * sizeof *v->t_off);
  v->t_n = calloc(cap, sizeof *v->t_n);
  uint32_t *path = malloc(sizeof *path * (v->max_len + 1));
  v->sorted_lcp = malloc(sizeof *v->sorted_lcp * (ns + 1));
  uint32_t plen = 0, nn = 0;
  const uint8_t *prev = NULL;
  uint32_t prevlen = 0;
  for (size_t k = 0; k < ns; k++) {
    int32_t t = v->sorted[k];
    const uint8_t *b = v->tb[t];
    uint32_t len = v->tlen[t], l = 0;
    while (prev && l < len && l < prevlen && b[l] == prev[l]) l++;
    v->sorted_lcp[k] = (uint16_t)l;
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
  memset(v->root, 0xff, sizeof v->root);
  for (uint32_t i = 0; i < nn; i = v->end[i]) v->root[v->byte[i]] = i;
  /* Prefix counts for whole-subtree shortcuts in mask.c: tokens (nodes are in
   * token order) and "rare" nodes: a byte that is not ASCII 0x20-0x7F (but
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
    bool rare = d == U8_INVALID || (b < 0x80 && !(b >= 0x20 && b <= 0x7F && b != '"' && b != '\\'));
    v->tok_cum[i + 1] = v->tok_cum[i] + v->t_n[i];
    v->rare_cum[i + 1] = v->rare_cum[i] + rare;
  }
  free(at);
  char_counts(v);
  const int32_t *eos;
  v->n_eos = di_tokenizer_eos(tok, &eos);
  v->eos = malloc(sizeof *v->eos * (v->n_eos + 1));
  memcpy(v->eos, eos, sizeof *eos * v->n_eos);
  (void)st;
  return v;
}

const gvocab *gvocab_get(const di_tokenizer *tok, di_status *st) {
  const uint64_t serial = di_tokenizer_serial(tok);
  pthread_mutex_lock(&g_mu);
  for (size_t i = 0; i < g_n; i++)
    if (g_v[i]->tok_serial == serial) {
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
