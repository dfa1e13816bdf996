/* Runs over an ASCII byte class for mask.c's walks (see internal.h's
 * brun_cls): per class and vocabulary, the tables that decide class-only
 * subtrees and tokens without a walk, and per grammar state, its run. */
#include <pthread.h>
#include <stdlib.h>

#include "grammar/internal.h"

enum { BRUN_CLASSES = 32, BRUN_MIN_BYTES = 8 };
static brun_cls brun_tab[BRUN_CLASSES];
static int brun_n;
static pthread_mutex_t brun_mu = PTHREAD_MUTEX_INITIALIZER;

/* The class's index in brun_tab, built if new; -1 when the table is full. */
static int brun_class(const gvocab *v, const uint64_t m[2]) {
  pthread_mutex_lock(&brun_mu);
  int k = 0;
  for (; k < brun_n; k++)
    if (brun_tab[k].v == v && brun_tab[k].m[0] == m[0] && brun_tab[k].m[1] == m[1]) break;
  if (k == brun_n) {
    uint32_t *cum = k < BRUN_CLASSES ? malloc(sizeof *cum * (v->n_nodes + 1)) : NULL;
    if (!cum) {
      pthread_mutex_unlock(&brun_mu);
      return -1;
    }
    cum[0] = 0;
    for (uint32_t i = 0; i < v->n_nodes; i++) cum[i + 1] = cum[i] + !brun_in(m, v->byte[i]);
    brun_cls c = {.v = v, .m = {m[0], m[1]}, .out_cum = cum};
    /* exits and class-only tokens: nodes reached here have class-only paths */
    uint32_t n_tok = 0, cap_exit = 256;
    uint32_t *cnt = calloc(v->max_len + 2, sizeof *cnt);
    c.exit = malloc(sizeof *c.exit * cap_exit);
    if (!cnt || !c.exit) abort();
    for (uint32_t i = 0; i < v->n_nodes;) {
      if (!brun_in(m, v->byte[i])) {
        GROW(c.exit, cap_exit, c.n_exit + 1);
        c.exit[c.n_exit++] = i;
        i = v->end[i];
        continue;
      }
      cnt[v->depth[i]] += v->t_n[i];
      n_tok += v->t_n[i];
      i++;
    }
    c.tok = malloc(sizeof *c.tok * (n_tok + 1));
    c.len_end = malloc(sizeof *c.len_end * (v->max_len + 1));
    if (!c.tok || !c.len_end) abort();
    for (uint32_t L = 0, at = 0; L <= v->max_len; L++) { /* cnt[L]: first index of length L */
      uint32_t n = cnt[L];
      cnt[L] = at;
      at += n;
      c.len_end[L] = at;
    }
    for (uint32_t i = 0; i < v->n_nodes;) {
      if (!brun_in(m, v->byte[i])) {
        i = v->end[i];
        continue;
      }
      for (uint32_t q = 0; q < v->t_n[i]; q++) c.tok[cnt[v->depth[i]]++] = v->sorted[v->t_off[i] + q];
      i++;
    }
    free(cnt);
    brun_tab[k] = c;
    brun_n++;
  }
  pthread_mutex_unlock(&brun_mu);
  return k;
}

/* The run of class m from t: K as above, CHAIN_INF for a cycle, -1 if some
 * state on the way is not plain or splits the class. */
static int brun_len(const ga *a, int32_t t, const uint64_t m[2]) {
  int32_t path[CHAIN_INF];
  int n = 0;
  for (int32_t x = t;; n++) {
    if (!plain_state(a, x)) return -1;
    for (int j = 0; j < n; j++)
      if (path[j] == x) return CHAIN_INF;
    if (n == CHAIN_INF) return -1; /* a token may have more bytes */
    path[n] = x;
    int32_t y = -2;
    for (unsigned b = 0; b < 128; b++) {
      if (!brun_in(m, b)) continue;
      int32_t s = ga_step(a, x, (uint8_t)b);
      if (y == -2) y = s;
      else if (s != y) return -1;
    }
    if (y < 0) return n; /* x reads no byte of the class */
    x = y;
  }
}

/* Memoised in g->brun: 0 unknown, 1 none, else 2 + (class index << 9 | K). */
const brun_cls *grammar_class_run(di_grammar *g, int32_t t, int *K) {
  const ga *a = &g->a;
  if (!g->brun && !(g->brun = calloc(a->n_st, sizeof *g->brun))) return NULL;
  uint32_t e = g->brun[t];
  if (e == 0) {
    e = 1;
    int32_t to[128];
    for (unsigned b = 0x20; b < 0x80; b++) to[b] = ga_step(a, t, (uint8_t)b);
    int32_t best = -1;
    int best_n = 0;
    for (unsigned b = 0x20; b < 0x80; b++) {
      if (to[b] < 0) continue;
      int c = 0;
      for (unsigned b2 = 0x20; b2 < 0x80; b2++) c += to[b2] == to[b];
      if (c > best_n) best = to[b], best_n = c;
    }
    if (best_n >= BRUN_MIN_BYTES) {
      uint64_t m[2] = {0, 0};
      for (unsigned b = 0x20; b < 0x80; b++)
        if (to[b] == best) m[b >> 6] |= 1ull << (b & 63);
      int k = brun_len(a, t, m), idx = k >= 0 ? brun_class(g->v, m) : -1;
      if (idx >= 0) e = 2 + ((uint32_t)idx << 9 | (uint32_t)k);
    }
    g->brun[t] = e;
  }
  if (e == 1) return NULL;
  *K = (int)((e - 2) & 511);
  return &brun_tab[(e - 2) >> 9];
}

