/* Sharing state caches between grammars. A state's decisions depend only on
 * the automaton reachable from it (its rule's states and everything they
 * call) and the vocabulary, so states with the same canonical structure share
 * one cache: JSON strings, numbers and "any value" are computed once per
 * process, not once per schema. */
#include <pthread.h>
#include <stdlib.h>
#include <xxhash.h>

#include "grammar/internal.h"

/* Larger automata are schema-specific: hashing them costs more than sharing saves. */
enum { SHARE_MAX_STATES = 512, SHARE_SLOTS = 1 << 14 };
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

/* Whether state s may have a structural key: its own rule has at most
 * SHARE_MAX_STATES states, and no state of it reached more. A state of a
 * larger rule (an object's members with many properties) almost always
 * reaches more, and state_key would hash that many states to find out; so do
 * the other states of a rule one of whose states did (members that call the
 * properties' value rules). Such rules are schema-specific anyway. */
static bool shareable(di_grammar *g, int32_t s) {
  const ga *a = &g->a;
  if (!g->rule_n) {
    if (!(g->rule_n = calloc(a->n_rules, sizeof *g->rule_n))) return true;
    for (uint32_t i = 0; i < a->n_st; i++) g->rule_n[a->st[i].rule]++;
  }
  return g->rule_n[a->st[s].rule] <= SHARE_MAX_STATES;
}

static size_t gcache_bytes(const gcache *c, int32_t n_vocab) {
  return sizeof *c + (c->acc_bits ? ((size_t)n_vocab + 31) / 32 * 4 : (size_t)c->n_acc * 4) + (size_t)c->n_unc * 6 +
         (size_t)c->n_ent * 22 + (size_t)c->grp.n * 7; /* a group: start, first byte, skips' state */
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
  const gcache *c = grammar_state_cache_locked(g, state);
  pthread_mutex_unlock(&g->mu);
  return c;
}

const gcache *grammar_state_cache_locked(di_grammar *g, int32_t state) {
  gcache *c = g->cache[state];
  if (!c) {
    uint64_t key[2];
    bool keyed = shareable(g, state) && state_key(g, state, key);
    if (!keyed && g->rule_n) g->rule_n[g->a.st[state].rule] = UINT32_MAX; /* see shareable */
    if (keyed) {
      pthread_mutex_lock(&share_mu);
      c = share_find(key);
      pthread_mutex_unlock(&share_mu);
    }
    if (!c) {
      c = grammar_state_compute(g, state, true);
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
  return c;
}
