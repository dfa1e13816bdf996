/* Token masks: per automaton state, a context-free walk of the vocabulary
 * trie decides most tokens once (accepted / rejected whatever the stack
 * below); the rest ("uncertain": they finish the state's rule and read on
 * into the caller's) are walked against the real stack at mask time, sharing
 * prefixes between consecutive uncertain tokens. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

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

/* Whether reading the byte ranges rng[0..n) one after the other from st
 * always ends in target (all of them defined). */
static bool seq_to(const ga *a, int32_t st, const uint8_t (*rng)[2], int n, int32_t target) {
  if (n == 0) return st == target;
  int32_t prev = -1;
  for (unsigned b = rng[0][0]; b <= rng[0][1]; b++) {
    int32_t t = ga_step(a, st, (uint8_t)b);
    if (t < 0) return false;
    if (t != prev && !seq_to(a, t, rng + 1, n - 1, target)) return false;
    prev = t;
  }
  return true;
}

/* Whether state s comes back to itself after any one string character:
 * printable ASCII but '"' and '\\', or any valid UTF-8 sequence of a code
 * point >= 0x80 (the inside of a JSON string, between characters);
 * memo[s]: 0 unknown, 1 yes, 2 no. */
static bool plain_loop(const ga *a, uint8_t *memo, int32_t s) {
  static const uint8_t seqs[][4][2] = {
      {{0xC2, 0xDF}, {0x80, 0xBF}},
      {{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}},
      {{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}},
      {{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}},
      {{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}},
      {{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
      {{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
      {{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}},
  };
  static const int len[] = {2, 3, 3, 3, 3, 4, 4, 4};
  if (!memo[s]) {
    bool yes = true;
    for (unsigned b = 0x20; b < 0x7F && yes; b++)
      if (b != '"' && b != '\\') yes = ga_step(a, s, (uint8_t)b) == s;
    for (size_t k = 0; k < sizeof len / sizeof len[0] && yes; k++) yes = seq_to(a, s, seqs[k], len[k], s);
    memo[s] = yes ? 1 : 2;
  }
  return memo[s] == 1;
}

static gcache *compute(di_grammar *g, int32_t state) {
  const gvocab *v = g->v;
  const ga *a = &g->a;
  gp *p = &g->scratch;
  size_t mark = p->n;
  uint32_t D = v->max_len + 1;
  gset *sets = calloc(D, sizeof *sets);
  bool *esc = calloc(D, 1);
  int32_t *simple = malloc(sizeof *simple * D);
  uint8_t *loop = calloc(a->n_st, 1);
  simple[0] = state; /* the start is read from directly, without closure */
  gset one = {0};
  tokbuf unc = {0};
  size_t words = ((size_t)v->n_vocab + 31) / 32, n_acc = 0;
  uint32_t *acc = calloc(words, sizeof *acc); /* accepted tokens as bits: a walk may accept most of them */
#define ACCEPT(t) (acc[(t) >> 5] |= 1u << ((t) & 31), n_acc++)
  unc_rec ur = {.b = &unc, .min_depth = 0};
  for (uint32_t i = 0; i < v->n_nodes;) {
    uint32_t d = v->depth[i];
    if (d - 1 < ur.min_depth) ur.min_depth = d - 1;
    bool popped = false;
    /* Fast path: while the walk is one plain state of a regular stretch
     * (no calls, not final) there is no stack to build. */
    simple[d] = -1;
    sets[d].n = 0;
    if (simple[d - 1] >= 0) {
      int32_t t = ga_step(a, simple[d - 1], v->byte[i]);
      if (t >= 0 && !a->st[t].c_n && !a->st[t].final) {
        simple[d] = t;
        /* a subtree of whole or partial string characters, below a node
         * that ends one, in a state that comes back to itself after every
         * string character: all its tokens are accepted, without a walk */
        if (v->u8[i] == U8_BOUNDARY && v->end[i] > i + 1 && v->rare_cum[v->end[i]] == v->rare_cum[i + 1] &&
            plain_loop(a, loop, t)) {
          for (uint32_t k = v->tok_cum[i]; k < v->tok_cum[v->end[i]]; k++) ACCEPT(v->sorted[k]);
          i = v->end[i];
          continue;
        }
      } else if (t >= 0) {
        one.n = 0;
        gset_push(&one, gp_intern(p, simple[d - 1], 0));
        gp_step(p, a, &one, v->byte[i], &sets[d], &popped);
      }
    } else {
      gp_step(p, a, &sets[d - 1], v->byte[i], &sets[d], &popped);
    }
    esc[d] = esc[d - 1] || popped;
    bool alive = simple[d] >= 0 || sets[d].n > 0;
    for (uint32_t k = 0; k < v->t_n[i]; k++) {
      int32_t t = v->sorted[v->t_off[i] + k];
      if (alive || popped) ACCEPT(t);
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
  free(simple);
  free(loop);
  gset_free(&one);
  free(esc);
  gp_truncate(p, mark);
#undef ACCEPT
  gcache *c = calloc(1, sizeof *c);
  c->n_acc = (uint32_t)n_acc;
  if (n_acc * 32 > (size_t)v->n_vocab) {
    c->acc_bits = acc;
    g->cache_bytes += words * 4;
  } else {
    c->acc_list = malloc(sizeof *c->acc_list * (n_acc + 1));
    size_t k = 0;
    for (size_t w = 0; w < words; w++)
      for (uint32_t b = acc[w]; b; b &= b - 1) c->acc_list[k++] = (int32_t)(w * 32 + (uint32_t)__builtin_ctz(b));
    free(acc);
    g->cache_bytes += n_acc * 4;
  }
  c->unc = unc.v;
  c->unc_lcp = unc.lcp;
  c->n_unc = (uint32_t)unc.n;
  g->cache_bytes += unc.n * 6 + sizeof *c;
  return c;
}

/* ---- sharing between grammars ----
 * A state's decisions depend only on the automaton reachable from it (its
 * rule's states and everything they call) and the vocabulary, so states with
 * the same canonical structure share one cache: JSON strings, numbers and
 * "any value" are computed once per process, not once per schema. */

enum { SHARE_MAX_STATES = 4096, SHARE_SLOTS = 1 << 14 };
static const size_t SHARE_MAX_BYTES = (size_t)512 << 20;

typedef struct share_ent {
  uint64_t k0, k1;
  gcache *c;
} share_ent;

static pthread_mutex_t share_mu = PTHREAD_MUTEX_INITIALIZER;
static share_ent *share_tab;
static size_t share_n, share_bytes;

/* Canonical structural key of state s (BFS numbering); false if too big. */
static bool state_key(di_grammar *g, int32_t s, uint64_t key[2]) {
  const ga *a = &g->a;
  int32_t *q = malloc(sizeof *q * (SHARE_MAX_STATES + 1));
  uint32_t *buf = malloc(sizeof *buf * 4096);
  size_t nq = 0, head = 0, nb = 0;
  bool ok = true;
  XXH3_state_t *h = XXH3_createState();
  XXH3_128bits_reset(h);
  uintptr_t vp = (uintptr_t)g->v;
  XXH3_128bits_update(h, &vp, sizeof vp);
#define LOCAL(x)                                                                                    \
  (g->local[x] >= 0 ? (uint32_t)g->local[x]                                                        \
                    : (nq < SHARE_MAX_STATES ? (q[nq] = (x), g->local[x] = (int32_t)nq, (uint32_t)nq++) \
                                             : (ok = false, 0u)))
  LOCAL(s);
  while (head < nq && ok) {
    const ga_state *S = &a->st[q[head++]];
    if (nb + 4 + 3 * S->r_n + 3 * S->c_n > 4096) {
      XXH3_128bits_update(h, buf, nb * sizeof *buf);
      nb = 0;
    }
    if (4 + 3 * S->r_n + 3 * S->c_n > 4096) {
      ok = false;
      break;
    }
    buf[nb++] = S->final | S->r_n << 1;
    buf[nb++] = S->c_n;
    for (uint32_t j = 0; j < S->r_n; j++) {
      const ga_range *r = &a->ranges[S->r_off + j];
      buf[nb++] = (uint32_t)r->lo << 8 | r->hi;
      buf[nb++] = LOCAL(r->to);
    }
    for (uint32_t j = 0; j < S->c_n; j++) {
      const ga_call *c = &a->calls[S->c_off + j];
      buf[nb++] = LOCAL(a->rule_start[c->rule]);
      buf[nb++] = LOCAL(c->ret);
    }
  }
#undef LOCAL
  XXH3_128bits_update(h, buf, nb * sizeof *buf);
  XXH128_hash_t d = XXH3_128bits_digest(h);
  XXH3_freeState(h);
  for (size_t i = 0; i < nq; i++) g->local[q[i]] = -1;
  free(q);
  free(buf);
  key[0] = d.low64;
  key[1] = d.high64;
  return ok;
}

static size_t gcache_bytes(const gcache *c, int32_t n_vocab) {
  return sizeof *c + (c->acc_bits ? ((size_t)n_vocab + 31) / 32 * 4 : (size_t)c->n_acc * 4) + (size_t)c->n_unc * 6;
}

static gcache *share_find(const uint64_t key[2]) {
  if (!share_tab) return NULL;
  for (size_t i = key[0] & (SHARE_SLOTS - 1);; i = (i + 1) & (SHARE_SLOTS - 1)) {
    if (!share_tab[i].c) return NULL;
    if (share_tab[i].k0 == key[0] && share_tab[i].k1 == key[1]) return share_tab[i].c;
  }
}

static bool share_put(const uint64_t key[2], gcache *c, int32_t n_vocab) {
  size_t b = gcache_bytes(c, n_vocab);
  if (share_n * 2 >= SHARE_SLOTS || share_bytes + b > SHARE_MAX_BYTES) return false;
  if (!share_tab && !(share_tab = calloc(SHARE_SLOTS, sizeof *share_tab))) return false;
  size_t i = key[0] & (SHARE_SLOTS - 1);
  while (share_tab[i].c) i = (i + 1) & (SHARE_SLOTS - 1);
  share_tab[i] = (share_ent){.k0 = key[0], .k1 = key[1], .c = c};
  share_n++;
  share_bytes += b;
  c->shared = true;
  return true;
}

const gcache *grammar_state_cache(di_grammar *g, int32_t state) {
  pthread_mutex_lock(&g->mu);
  gcache *c = g->cache[state];
  if (!c) {
    uint64_t key[2];
    bool keyed = state_key(g, state, key);
    if (keyed) {
      pthread_mutex_lock(&share_mu);
      c = share_find(key);
      pthread_mutex_unlock(&share_mu);
    }
    if (!c) {
      c = compute(g, state);
      if (keyed) {
        pthread_mutex_lock(&share_mu);
        gcache *other = share_find(key);
        if (other) {
          gcache_free(c);
          c = other;
        } else {
          share_put(key, c, g->v->n_vocab);
        }
        pthread_mutex_unlock(&share_mu);
      }
    }
    g->cache[state] = c;
  }
  pthread_mutex_unlock(&g->mu);
  return c;
}
