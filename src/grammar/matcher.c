/* Per-request matcher: the current set of stacks (closed, only stacks that
 * can read a byte), one entry per accepted token for rollback, and masks
 * from the per-state caches plus a walk of the uncertain tokens. */
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "grammar/internal.h"

typedef struct hist {
  uint32_t off, n;   /* the set in m->sets */
  size_t pool_n;     /* pool size once this entry was made */
  size_t sets_n;
  bool accepting;
} hist;

struct di_gmatcher {
  di_grammar *g;
  gp pool;
  int32_t *sets; /* all history sets back to back */
  size_t n_sets, cap_sets;
  hist *h;
  size_t n_h, cap_h; /* h[0]: start; h[k]: after k tokens */
  gset *walk;        /* per depth, for token walks */
  gset adv[2];       /* advance's byte-by-byte sets, kept so a token allocates nothing */
  bool *wpop;
  uint32_t *stamp_state;
  uint32_t stamp;
  XXH3_state_t *xxh; /* for configuration keys */
};

static void *xre(void *p, size_t n) {
  void *q = realloc(p, n);
  if (!q && n) abort();
  return q;
}

static void push_hist(di_gmatcher *m, const gset *s, bool acc) {
  if (m->n_sets + s->n > m->cap_sets) {
    size_t nc = m->cap_sets ? m->cap_sets * 2 : 256;
    while (nc < m->n_sets + s->n) nc *= 2;
    m->sets = xre(m->sets, nc * sizeof *m->sets);
    m->cap_sets = nc;
  }
  if (m->n_h == m->cap_h) {
    m->cap_h = m->cap_h ? m->cap_h * 2 : 64;
    m->h = xre(m->h, m->cap_h * sizeof *m->h);
  }
  if (s->n) memcpy(m->sets + m->n_sets, s->v, s->n * sizeof *s->v);
  m->h[m->n_h++] = (hist){.off = (uint32_t)m->n_sets, .n = (uint32_t)s->n, .pool_n = m->pool.n,
                          .accepting = acc};
  m->n_sets += s->n;
  m->h[m->n_h - 1].sets_n = m->n_sets;
}

static void alloc_scratch(di_gmatcher *m) {
  uint32_t D = m->g->v->max_len + 2;
  m->walk = calloc(D, sizeof *m->walk);
  m->wpop = calloc(D, 1);
  m->stamp_state = calloc(m->g->a.n_st, sizeof *m->stamp_state);
  m->xxh = XXH3_createState();
  if (!m->walk || !m->wpop || !m->stamp_state || !m->xxh) abort();
}

di_code di_gmatcher_new(di_grammar *g, di_gmatcher **out, di_status *st) {
  di_gmatcher *m = calloc(1, sizeof *m);
  if (!m) return di_errorf(st, DI_ERR_NOMEM, "grammar matcher: out of memory");
  __atomic_add_fetch(&g->refs, 1, __ATOMIC_ACQ_REL);
  m->g = g;
  gp_init(&m->pool);
  alloc_scratch(m);
  gset s = {0};
  bool acc;
  int32_t root = gp_intern(&m->pool, g->a.rule_start[g->a.root], 0);
  gp_close(&m->pool, &g->a, root, &s, &acc);
  if (g->a.st[g->a.rule_start[g->a.root]].final) acc = true;
  push_hist(m, &s, acc);
  gset_free(&s);
  *out = m;
  return DI_OK;
}

void di_gmatcher_free(di_gmatcher *m) {
  if (!m) return;
  uint32_t D = m->g->v->max_len + 2;
  for (uint32_t d = 0; d < D; d++) gset_free(&m->walk[d]);
  free(m->walk);
  free(m->wpop);
  free(m->stamp_state);
  XXH3_freeState(m->xxh);
  gset_free(&m->adv[0]);
  gset_free(&m->adv[1]);
  gp_free(&m->pool);
  free(m->sets);
  free(m->h);
  di_grammar_release(m->g);
  free(m);
}

di_gmatcher *di_gmatcher_fork(const di_gmatcher *src) {
  di_gmatcher *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  *m = *src;
  __atomic_add_fetch(&m->g->refs, 1, __ATOMIC_ACQ_REL);
  gp_copy(&m->pool, &src->pool);
  m->sets = malloc(src->cap_sets * sizeof *m->sets);
  m->h = malloc(src->cap_h * sizeof *m->h);
  if (!m->sets || !m->h) abort();
  memcpy(m->sets, src->sets, src->n_sets * sizeof *m->sets);
  memcpy(m->h, src->h, src->n_h * sizeof *m->h);
  m->stamp = 0;
  m->adv[0] = m->adv[1] = (gset){0};
  alloc_scratch(m);
  return m;
}

static const hist *cur(const di_gmatcher *m) { return &m->h[m->n_h - 1]; }

bool di_gmatcher_is_accepting(const di_gmatcher *m) { return cur(m)->accepting; }
bool di_gmatcher_is_finished(const di_gmatcher *m) { return cur(m)->n == 0; }
size_t di_gmatcher_n_accepted(const di_gmatcher *m) { return m->n_h - 1; }

/* Walks bytes from the current set; on success pushes a history entry. */
static bool advance(di_gmatcher *m, const uint8_t *b, size_t n) {
  const hist *h = cur(m);
  gset a = {.v = m->sets ? m->sets + h->off : NULL, .n = h->n, .cap = h->n};
  bool pop = h->accepting && n == 0, ok = true;
  const gset *in = &a;
  for (size_t i = 0; i < n; i++) {
    gset *out = &m->adv[i & 1]; /* never in: in is a (i = 0) or the other one */
    gp_step(&m->pool, &m->g->a, in, b[i], out, &pop);
    if (out->n == 0 && !(pop && i + 1 == n)) {
      ok = false;
      break;
    }
    in = out;
  }
  if (ok) push_hist(m, in, pop);
  else gp_truncate(&m->pool, cur(m)->pool_n);
  return ok;
}

bool di_gmatcher_accept_bytes(di_gmatcher *m, const char *s, size_t n) {
  if (n == 0) return true;
  return advance(m, (const uint8_t *)s, n);
}

static bool is_eos(const gvocab *v, int32_t id) {
  for (size_t i = 0; i < v->n_eos; i++)
    if (v->eos[i] == id) return true;
  return false;
}

bool di_gmatcher_accept_token(di_gmatcher *m, int32_t id) {
  const gvocab *v = m->g->v;
  if (id < 0 || id >= v->n_vocab) return false;
  if (is_eos(v, id)) {
    if (!cur(m)->accepting) return false;
    gset empty = {0};
    push_hist(m, &empty, true); /* a terminated match reads nothing more */
    return true;
  }
  if (!v->tb[id]) return false;
  return advance(m, v->tb[id], v->tlen[id]);
}

void di_gmatcher_rollback(di_gmatcher *m, size_t n) {
  if (n > m->n_h - 1) n = m->n_h - 1;
  m->n_h -= n;
  m->n_sets = cur(m)->sets_n;
  gp_truncate(&m->pool, cur(m)->pool_n);
}

size_t di_grammar_mask_words(const di_grammar *g) { return ((size_t)g->v->n_vocab + 31) / 32; }

/* Uncertain tokens of one cache against the real stack x. */
static void walk_uncertain(di_gmatcher *m, const gcache *c, int32_t x, uint32_t *mask) {
  const gvocab *v = m->g->v;
  gset *w = m->walk;
  w[0].n = 0;
  gset_push(&w[0], x);
  uint32_t valid = 0;
  for (uint32_t k = 0; k < c->n_unc; k++) {
    int32_t t = c->unc[k];
    if (c->unc_lcp[k] < valid) valid = c->unc_lcp[k];
    if (mask[t >> 5] >> (t & 31) & 1) continue;
    const uint8_t *b = v->tb[t];
    uint32_t L = v->tlen[t];
    while (valid < L && w[valid].n) {
      gp_step(&m->pool, &m->g->a, &w[valid], b[valid], &w[valid + 1], &m->wpop[valid + 1]);
      valid++;
    }
    if (valid == L && (w[L].n || m->wpop[L])) mask[t >> 5] |= 1u << (t & 31);
  }
}

/* Entries k .. end of one order (from a group's start) against the stacks
 * m->walk[0]: each entry's rest is stepped from the longest prefix it
 * shares with the previous one that was walked. nx: the order's skips, or
 * NULL (refused entries are then passed one by one). */
static void walk_entries(di_gmatcher *m, const int32_t *tok, const uint16_t *jj, const uint16_t *lcp,
                         const uint32_t *nx, uint32_t k, uint32_t end, uint32_t *mask) {
  const gvocab *v = m->g->v;
  gset *w = m->walk;
  uint32_t valid = 0;
  while (k < end) {
    int32_t t = tok[k];
    const uint8_t *b = v->tb[t] + jj[k];
    uint32_t L = v->tlen[t] - jj[k];
    if (lcp[k] < valid) valid = lcp[k];
    if (mask[t >> 5] >> (t & 31) & 1) {
      k++;
      continue;
    }
    while (valid < L && w[valid].n) {
      gp_step(&m->pool, &m->g->a, &w[valid], b[valid], &w[valid + 1], &m->wpop[valid + 1]);
      valid++;
    }
    if (valid == L && (w[L].n || m->wpop[L])) mask[t >> 5] |= 1u << (t & 31);
    k++;
    /* no stack reads this rest's first `valid` bytes: every following rest
     * that shares them is refused too */
    if (valid > 0 && !w[valid].n && !m->wpop[valid])
      while (k < end && lcp[k] >= valid) k = nx ? nx[k] : k + 1;
  }
}

/* Uncertain tokens of one cache against the real stack x by their entries:
 * a token is accepted iff, for one of its entries (token, j), the caller's
 * stack below x reads the token's bytes from j (the rule of x's state
 * returned after j bytes; its walk inside the rule ended before the token
 * did, or the token would be decided already). Rests are walked in sorted
 * order, sharing prefixes, so the bytes before the rule's end (a string's
 * characters up to its closing quote) are never walked again; a group of
 * rests whose first byte no stack reads is refused unread. */
static void walk_rests(di_gmatcher *m, gcache *c, int32_t x, uint32_t *mask) {
  const ga *a = &m->g->a;
  int32_t P = m->pool.parent[x];
  if (P <= 0) return; /* x's rule is the root's: nothing may follow its end */
  const gsx *sx = gcache_sorted(m->g->v, c);
  const int32_t *tok = sx ? sx->tok : c->ent_tok;
  const uint16_t *jj = sx ? sx->j : c->ent_j, *lcp = sx ? sx->lcp : c->ent_lcp;
  uint32_t *nx = sx ? sx->nx : c->ent_nx;
  const ggroups *gr = sx ? &sx->grp : &c->grp;
  gset *w = m->walk;
  bool pop0;
  gp_close(&m->pool, a, P, &w[0], &pop0);
  /* the first bytes the stacks read (bit 256: an empty rest, walked as it is) */
  uint64_t rd[5] = {0, 0, 0, 0, 1};
  for (size_t i = 0; i < w[0].n; i++) {
    const ga_state *S = &a->st[m->pool.state[w[0].v[i]]];
    for (uint32_t r = S->r_off; r < S->r_off + S->r_n; r++) {
      unsigned lo = a->ranges[r].lo, hi = a->ranges[r].hi;
      for (unsigned q = lo >> 6; q <= hi >> 6; q++) { /* bits lo..hi of word q */
        unsigned f = q == lo >> 6 ? lo & 63 : 0, l = q == hi >> 6 ? hi & 63 : 63;
        rd[q] |= (~0ull >> (63 - l)) & (~0ull << f);
      }
    }
  }
  for (uint32_t i = 0; i < gr->n; i++)
    if (rd[gr->b[i] >> 6] >> (gr->b[i] & 63) & 1)
      walk_entries(m, tok, jj, lcp, ggroups_nx(gr, i, lcp, nx), gr->k[i], gr->k[i + 1], mask);
}

/* The key of the current configuration: every stack's states, top to bottom,
 * and the accepting flag. */
static void config_key(di_gmatcher *m, uint64_t key[2]) {
  const hist *h = cur(m);
  XXH3_state_t *x = m->xxh;
  XXH3_128bits_reset(x);
  uint32_t buf[256];
  size_t nb = 0;
  buf[nb++] = h->accepting;
  for (uint32_t i = 0; i < h->n; i++) {
    for (int32_t n = m->sets[h->off + i]; n > 0; n = m->pool.parent[n]) {
      if (nb == 256) {
        XXH3_128bits_update(x, buf, sizeof buf);
        nb = 0;
      }
      buf[nb++] = (uint32_t)m->pool.state[n];
    }
    if (nb == 256) {
      XXH3_128bits_update(x, buf, sizeof buf);
      nb = 0;
    }
    buf[nb++] = 0xFFFFFFFFu; /* end of one stack */
  }
  XXH3_128bits_update(x, buf, nb * sizeof *buf);
  XXH128_hash_t d = XXH3_128bits_digest(x);
  key[0] = d.low64 | 1; /* never the empty slot's 0 */
  key[1] = d.high64;
}

static void fill_mask_walk(di_gmatcher *m, uint32_t *mask, bool fresh);

void di_gmatcher_fill_mask(di_gmatcher *m, uint32_t *mask) {
  di_grammar *g = m->g;
  size_t bytes = di_grammar_mask_words(g) * sizeof *mask;
  uint64_t key[2];
  config_key(m, key);
  gmemo *e = NULL;
  pthread_mutex_lock(&g->mu);
  if (!g->memo) g->memo = calloc(MEMO_SLOTS, sizeof *g->memo);
  if (g->memo) {
    e = &g->memo[key[0] % MEMO_SLOTS];
    if (e->k0 == key[0] && e->k1 == key[1]) {
      memcpy(mask, e->mask, bytes);
      pthread_mutex_unlock(&g->mu);
      return;
    }
  }
  pthread_mutex_unlock(&g->mu);
  fill_mask_walk(m, mask, false);
  if (!e) return;
  pthread_mutex_lock(&g->mu);
  if (!e->mask) e->mask = malloc(bytes);
  if (e->mask) {
    memcpy(e->mask, mask, bytes);
    e->k0 = key[0];
    e->k1 = key[1];
  }
  pthread_mutex_unlock(&g->mu);
}

void gmatcher_fill_mask_fresh(di_gmatcher *m, uint32_t *mask) { fill_mask_walk(m, mask, true); }

/* The state's cached decisions, or (fresh) a node-by-node walk made now. */
static const gcache *state_cache(di_grammar *g, int32_t s, bool fresh, gcache **own) {
  if (!fresh) return grammar_state_cache(g, s);
  return *own = grammar_state_cache_fresh(g, s, false);
}

static void fill_mask_walk(di_gmatcher *m, uint32_t *mask, bool fresh) {
  di_grammar *g = m->g;
  const gvocab *v = g->v;
  memset(mask, 0, di_grammar_mask_words(g) * sizeof *mask);
  const hist *h = cur(m);
  if (++m->stamp == 0) {
    memset(m->stamp_state, 0, g->a.n_st * sizeof *m->stamp_state);
    m->stamp = 1;
  }
  size_t words = di_grammar_mask_words(g);
  /* context-free accepted sets first, so uncertain walks skip what is set */
  for (uint32_t i = 0; i < h->n; i++) {
    int32_t s = m->pool.state[m->sets[h->off + i]];
    if (m->stamp_state[s] == m->stamp) continue;
    m->stamp_state[s] = m->stamp;
    gcache *own = NULL;
    const gcache *c = state_cache(g, s, fresh, &own);
    if (c->acc_bits)
      for (size_t w = 0; w < words; w++) mask[w] |= c->acc_bits[w];
    else
      for (uint32_t k = 0; k < c->n_acc; k++) mask[c->acc_list[k] >> 5] |= 1u << (c->acc_list[k] & 31);
    gcache_free(own);
  }
  size_t mark = m->pool.n;
  for (uint32_t i = 0; i < h->n; i++) {
    int32_t x = m->sets[h->off + i];
    gcache *own = NULL;
    const gcache *c = state_cache(g, m->pool.state[x], fresh, &own);
    if (fresh) { /* tests: whole tokens from x, the reference for walk_rests */
      if (c->n_unc) walk_uncertain(m, c, x, mask);
    } else if (c->n_ent) {
      walk_rests(m, (gcache *)c, x, mask);
    }
    gcache_free(own);
  }
  gp_truncate(&m->pool, mark);
  if (h->accepting)
    for (size_t i = 0; i < v->n_eos; i++) mask[v->eos[i] >> 5] |= 1u << (v->eos[i] & 31);
}
