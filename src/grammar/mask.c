/* Token masks: per automaton state, a context-free walk of the vocabulary
 * trie decides most tokens once (accepted / rejected whatever the stack
 * below); the rest ("uncertain": they finish the state's rule and read on
 * into the caller's) are walked against the real stack at mask time, sharing
 * prefixes between consecutive uncertain tokens. */
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"

void gcache_free(gcache *c) {
  if (!c) return;
  free(c->acc_bits);
  free(c->acc_list);
  free(c->unc);
  free(c->unc_lcp);
  free(c);
}

typedef struct tokbuf {
  int32_t *v;
  uint16_t *lcp;
  size_t n, cap;
} tokbuf;

static void tb_push(tokbuf *b, int32_t t, uint16_t lcp) {
  if (b->n == b->cap) {
    b->cap = b->cap ? b->cap * 2 : 64;
    b->v = realloc(b->v, b->cap * sizeof *b->v);
    b->lcp = realloc(b->lcp, b->cap * sizeof *b->lcp);
    if (!b->v || !b->lcp) abort();
  }
  b->v[b->n] = t;
  b->lcp[b->n++] = lcp;
}

/* Uncertain tokens are recorded with the depth of the trie node where the
 * previous uncertain token and this one part; a walk in trie order makes that
 * the smallest depth seen since the previous record. */
typedef struct unc_rec {
  tokbuf *b;
  uint32_t min_depth;
} unc_rec;

static void unc_add(unc_rec *u, int32_t t, uint32_t node_depth) {
  uint32_t l = u->min_depth < node_depth ? u->min_depth : node_depth;
  tb_push(u->b, t, (uint16_t)(u->b->n ? l : 0));
  u->min_depth = 0xFFFF;
}

static gcache *compute(di_grammar *g, int32_t state) {
  const gvocab *v = g->v;
  const ga *a = &g->a;
  gp *p = &g->scratch;
  size_t mark = p->n;
  uint32_t D = v->max_len + 1;
  gset *sets = calloc(D, sizeof *sets);
  bool *esc = calloc(D, 1);
  gset_push(&sets[0], gp_intern(p, state, 0));
  tokbuf acc = {0}, unc = {0};
  unc_rec ur = {.b = &unc, .min_depth = 0};
  for (uint32_t i = 0; i < v->n_nodes;) {
    uint32_t d = v->depth[i];
    if (d - 1 < ur.min_depth) ur.min_depth = d - 1;
    bool popped;
    gp_step(p, a, &sets[d - 1], v->byte[i], &sets[d], &popped);
    esc[d] = esc[d - 1] || popped;
    bool alive = sets[d].n > 0;
    for (uint32_t k = 0; k < v->t_n[i]; k++) {
      int32_t t = v->sorted[v->t_off[i] + k];
      if (alive || popped) tb_push(&acc, t, 0);
      else if (esc[d - 1]) unc_add(&ur, t, d);
    }
    if (alive) {
      i++;
      continue;
    }
    if (esc[d]) /* the subtree reads past the rule's end: all uncertain */
      for (uint32_t j = i + 1; j < v->end[i]; j++) {
        uint32_t dj = v->depth[j];
        if (dj - 1 < ur.min_depth) ur.min_depth = dj - 1;
        for (uint32_t k = 0; k < v->t_n[j]; k++) unc_add(&ur, v->sorted[v->t_off[j] + k], dj);
      }
    i = v->end[i];
  }
  for (uint32_t d = 0; d < D; d++) gset_free(&sets[d]);
  free(sets);
  free(esc);
  gp_truncate(p, mark);
  gcache *c = calloc(1, sizeof *c);
  c->n_acc = (uint32_t)acc.n;
  size_t words = ((size_t)v->n_vocab + 31) / 32;
  if (acc.n * 32 > (size_t)v->n_vocab) {
    c->acc_bits = calloc(words, sizeof *c->acc_bits);
    for (size_t k = 0; k < acc.n; k++) c->acc_bits[acc.v[k] >> 5] |= 1u << (acc.v[k] & 31);
    free(acc.v);
    g->cache_bytes += words * 4;
  } else {
    c->acc_list = acc.v;
    g->cache_bytes += acc.n * 4;
  }
  free(acc.lcp);
  c->unc = unc.v;
  c->unc_lcp = unc.lcp;
  c->n_unc = (uint32_t)unc.n;
  g->cache_bytes += unc.n * 6 + sizeof *c;
  return c;
}

const gcache *grammar_state_cache(di_grammar *g, int32_t state) {
  pthread_mutex_lock(&g->mu);
  gcache *c = g->cache[state];
  if (!c) c = g->cache[state] = compute(g, state);
  pthread_mutex_unlock(&g->mu);
  return c;
}
