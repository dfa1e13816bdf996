/* Token masks: per automaton state, a context-free walk of the vocabulary
 * trie decides most tokens once (accepted / rejected whatever the stack
 * below); the rest ("uncertain": they finish the state's rule and read on
 * into the caller's) are walked against the real stack at mask time, sharing
 * prefixes between consecutive uncertain tokens. */
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"

static void groups_free(ggroups *gr) {
  free(gr->k);
  free(gr->b);
  free(gr->nx_ready);
}

void gcache_free(gcache *c) {
  if (!c) return;
  groups_free(&c->grp);
  free(c->acc_bits);
  free(c->acc_list);
  free(c->unc);
  free(c->unc_lcp);
  free(c->ent_tok);
  free(c->ent_j);
  free(c->ent_lcp);
  free(c->ent_nx);
  gsx *x = __atomic_load_n(&c->sx, __ATOMIC_ACQUIRE);
  if (x) {
    free(x->tok);
    free(x->j);
    free(x->lcp);
    free(x->nx);
    groups_free(&x->grp);
    free(x);
  }
  free(c);
}

/* Tokens with a 16-bit value each (a depth, or an entry's byte count j);
 * kl: for entries, the bytes of rest shared with the previous entry's where
 * the walk knows it from the vocabulary's order (KL_UNKNOWN otherwise), so
 * ent_index loads no token's bytes for them. */
typedef struct tokbuf {
  int32_t *v;
  uint16_t *lcp, *kl;
  size_t n, cap;
} tokbuf;
enum { KL_UNKNOWN = 0xFFFF };

static void tb_reserve(tokbuf *b, size_t n) {
  if (n <= b->cap) return;
  while (b->cap < n) b->cap = b->cap ? b->cap * 2 : 64;
  b->v = realloc(b->v, b->cap * sizeof *b->v);
  b->lcp = realloc(b->lcp, b->cap * sizeof *b->lcp);
  b->kl = realloc(b->kl, b->cap * sizeof *b->kl);
  if (!b->v || !b->lcp || !b->kl) abort();
}

static void tb_push_kl(tokbuf *b, int32_t t, uint16_t lcp, uint16_t kl) {
  if (b->n == b->cap) tb_reserve(b, b->n + 1);
  b->v[b->n] = t;
  b->kl[b->n] = kl;
  b->lcp[b->n++] = lcp;
}

static void tb_push(tokbuf *b, int32_t t, uint16_t lcp) { tb_push_kl(b, t, lcp, KL_UNKNOWN); }

/* Uncertain tokens are recorded with the depth of the trie node where the
 * previous uncertain token and this one part; a walk in trie order makes that
 * the smallest depth seen since the previous record. Each also gets one
 * entry per depth on its path where the walk left the state's rule
 * (pd[j]: it did after j bytes), up to pop_lim. */
typedef struct unc_rec {
  tokbuf *b;
  tokbuf *e; /* entries: token, and (in lcp) the depth it leaves at */
  const bool *pd;
  uint32_t min_depth;
} unc_rec;

static void unc_add(unc_rec *u, int32_t t, uint32_t node_depth, uint32_t pop_lim) {
  uint32_t l = u->min_depth < node_depth ? u->min_depth : node_depth;
  if (u->b) tb_push(u->b, t, (uint16_t)(u->b->n ? l : 0));
  u->min_depth = 0xFFFF;
  for (uint32_t j = 1; j <= pop_lim; j++)
    if (u->pd[j]) tb_push(u->e, t, (uint16_t)j);
}

typedef struct sx_ent {
  const uint8_t *p;
  uint32_t n;
  int32_t t;
  uint16_t j;
} sx_ent;

/* a before b: their bytes from d on (earlier bytes are equal), shorter first */
static bool sx_less(const sx_ent *a, const sx_ent *b, uint32_t d) {
  uint32_t n = a->n < b->n ? a->n : b->n;
  for (; d < n; d++)
    if (a->p[d] != b->p[d]) return a->p[d] < b->p[d];
  return a->n < b->n;
}

/* Sorts e[0..n) (equal in their first d bytes) by their bytes: most
 * significant byte first, one stable counting pass per level (tmp: n
 * entries of scratch), insertion sort for short runs. A sort by comparisons
 * cost more than the walk it prepares. */
static void sx_sort(sx_ent *e, sx_ent *tmp, size_t n, uint32_t d) {
  if (n <= 16) {
    for (size_t i = 1; i < n; i++) {
      sx_ent x = e[i];
      size_t j = i;
      for (; j > 0 && sx_less(&x, &e[j - 1], d); j--) e[j] = e[j - 1];
      e[j] = x;
    }
    return;
  }
  size_t cnt[258] = {0}; /* bucket 0: ended at d; 1 + b: byte b at d */
  for (size_t i = 0; i < n; i++) cnt[(e[i].n > d ? e[i].p[d] + 1u : 0u) + 1]++;
  for (size_t b = 1; b < 258; b++) cnt[b] += cnt[b - 1];
  for (size_t i = 0; i < n; i++) tmp[cnt[e[i].n > d ? e[i].p[d] + 1u : 0u]++] = e[i];
  memcpy(e, tmp, n * sizeof *e);
  /* cnt[b] is now the end of bucket b */
  for (size_t b = 1, lo = cnt[0]; b < 257; lo = cnt[b++])
    if (cnt[b] - lo > 1) sx_sort(e + lo, tmp, cnt[b] - lo, d + 1);
}

/* The groups of the entries (tok, j) in an order whose shared rest
 * prefixes are lcp. */
static void groups_build(ggroups *gr, const gvocab *v, const int32_t *tok, const uint16_t *j, const uint16_t *lcp,
                         uint32_t n) {
  uint32_t ng = 0;
  for (uint32_t k = 0; k < n; k++) ng += !k || lcp[k] == 0;
  if (!(gr->k = malloc(sizeof *gr->k * (ng + 1))) || !(gr->b = malloc(sizeof *gr->b * (ng ? ng : 1)))) abort();
  gr->n = 0;
  for (uint32_t k = 0; k < n; k++)
    if (!k || lcp[k] == 0) {
      gr->k[gr->n] = k;
      gr->b[gr->n++] = v->tlen[tok[k]] > j[k] ? v->tb[tok[k]][j[k]] : 256;
    }
  gr->k[gr->n] = n;
}

/* The entries ordered by the bytes each token has left after its rule. */
static gsx *sx_order(const gvocab *v, const gcache *c) {
  gsx *x = calloc(1, sizeof *x);
  sx_ent *e = malloc(sizeof *e * c->n_ent), *tmp = malloc(sizeof *tmp * c->n_ent);
  if (!x || !e || !tmp || !(x->tok = malloc(sizeof *x->tok * c->n_ent)) || !(x->j = malloc(sizeof *x->j * c->n_ent)) ||
      !(x->lcp = malloc(sizeof *x->lcp * c->n_ent)))
    abort();
  for (uint32_t k = 0; k < c->n_ent; k++) {
    int32_t t = c->ent_tok[k];
    uint16_t j = c->ent_j[k];
    e[k] = (sx_ent){.p = v->tb[t] + j, .n = v->tlen[t] - j, .t = t, .j = j};
  }
  sx_sort(e, tmp, c->n_ent, 0);
  for (uint32_t k = 0; k < c->n_ent; k++) {
    x->tok[k] = e[k].t;
    x->j[k] = e[k].j;
    uint32_t l = 0;
    if (k) {
      uint32_t n = e[k].n < e[k - 1].n ? e[k].n : e[k - 1].n;
      while (l < n && e[k].p[l] == e[k - 1].p[l]) l++;
    }
    x->lcp[k] = (uint16_t)l;
  }
  x->nx = gcache_next_smaller(x->lcp, c->n_ent);
  groups_build(&x->grp, v, x->tok, x->j, x->lcp, c->n_ent);
  free(tmp);
  free(e);
  return x;
}

void gcache_next_smaller_range(const uint16_t *lcp, uint32_t *nx, uint32_t lo, uint32_t hi) {
  /* from the right: the candidates after k are k + 1, then each one's own
   * next smaller (those in between are not smaller than it), so each entry is
   * passed over at most once in all */
  for (uint32_t k = hi; k-- > lo;) {
    uint32_t i = k + 1;
    while (i < hi && lcp[i] >= lcp[k]) i = nx[i];
    nx[k] = i;
  }
}

uint32_t *gcache_next_smaller(const uint16_t *lcp, uint32_t n) {
  uint32_t *nx = malloc(sizeof *nx * (n ? n : 1));
  if (!nx) abort();
  gcache_next_smaller_range(lcp, nx, 0, n);
  return nx;
}

const uint32_t *ggroups_nx(const ggroups *gr, uint32_t i, const uint16_t *lcp, uint32_t *nx) {
  if (!gr->nx_ready) return nx;
  uint8_t st = __atomic_load_n(&gr->nx_ready[i], __ATOMIC_ACQUIRE);
  if (st == NX_READY) return nx;
  if (st == NX_BUILDING ||
      !__atomic_compare_exchange_n(&gr->nx_ready[i], &st, NX_BUILDING, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
    return NULL;
  /* a group's entries after its first share at least one byte: their next
   * smaller is inside it or its end */
  gcache_next_smaller_range(lcp, nx, gr->k[i], gr->k[i + 1]);
  __atomic_store_n(&gr->nx_ready[i], NX_READY, __ATOMIC_RELEASE);
  return nx;
}

/* Trie order's shared rest prefixes (kl: those known already, taken as the
 * array), their skips, and how many groups of entries share no first byte
 * (what a walk in this order steps at depth 0). */
static void ent_index(const gvocab *v, gcache *c, uint16_t *kl) {
  uint32_t n = c->n_ent;
  if (!n) {
    free(kl);
    return;
  }
  c->ent_lcp = kl;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t l = 0;
    if (k && kl[k] != KL_UNKNOWN) {
      l = kl[k];
    } else if (k) {
      int32_t t = c->ent_tok[k], tp = c->ent_tok[k - 1];
      uint32_t j = c->ent_j[k], p = v->pos[t];
      /* the next token in byte order, leaving at the same byte: the rests
       * share what the tokens share past j */
      if (j == c->ent_j[k - 1] && p == v->pos[tp] + 1 && v->sorted_lcp[p] >= j) {
        l = v->sorted_lcp[p] - j;
      } else {
        const uint8_t *b = v->tb[t] + j, *pb = v->tb[tp] + c->ent_j[k - 1];
        uint32_t L = v->tlen[t] - j, pL = v->tlen[tp] - c->ent_j[k - 1], m = L < pL ? L : pL;
        while (l < m && b[l] == pb[l]) l++;
      }
    }
    kl[k] = (uint16_t)l;
    c->n_ent_groups += l == 0;
  }
  groups_build(&c->grp, v, c->ent_tok, c->ent_j, c->ent_lcp, n);
  if (!(c->ent_nx = malloc(sizeof *c->ent_nx * n)) || !(c->grp.nx_ready = calloc(c->grp.n, 1))) abort();
}

const gsx *gcache_sorted(const gvocab *v, gcache *c) {
  gsx *x = __atomic_load_n(&c->sx, __ATOMIC_ACQUIRE);
  /* a sorted order steps at most 256 first bytes: not worth its sort where
   * trie order steps no more (rests after whitespace: "xyz" of " xyz" share
   * their first bytes in trie order already) */
  if (x || c->n_ent_groups <= 256) return x;
  int n = __atomic_load_n(&c->sx_state, __ATOMIC_RELAXED);
  if (n < 0) return NULL; /* another thread builds it */
  if (n == 0) { /* the first use walks in trie order */
    __atomic_compare_exchange_n(&c->sx_state, &n, 1, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return NULL;
  }
  if (!__atomic_compare_exchange_n(&c->sx_state, &n, -1, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return NULL;
  x = sx_order(v, c);
  __atomic_store_n(&c->sx, x, __ATOMIC_RELEASE);
  return x;
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

/* String characters: ASCII 0x20-0x7F but '"' and '\\' (DEL is one in JSON,
 * so JSON strings are chains), and every valid UTF-8 sequence of a code point >= 0x80, as byte-range sequences. */
static const uint8_t ascii_chars[][2] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7F}};
static const uint8_t u8_seqs[][4][2] = {
    {{0xC2, 0xDF}, {0x80, 0xBF}},
    {{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}},
    {{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}},
    {{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}},
    {{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}},
    {{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
    {{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
    {{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}},
};
static const int u8_len[] = {2, 3, 3, 3, 3, 4, 4, 4};

/* The one state every string character leads to from s, or -1 (one is
 * undefined, or two lead to different states). */
static int32_t char_step(const ga *a, int32_t s) {
  int32_t to = ga_step(a, s, 0x20);
  if (to < 0) return -1;
  for (size_t r = 0; r < 3; r++)
    for (unsigned b = ascii_chars[r][0]; b <= ascii_chars[r][1]; b++)
      if (ga_step(a, s, (uint8_t)b) != to) return -1;
  for (size_t k = 0; k < sizeof u8_len / sizeof u8_len[0]; k++)
    if (!seq_to(a, s, u8_seqs[k], u8_len[k], to)) return -1;
  return to;
}

/* char_step memoised per grammar state (g->cstep: 0 unknown, else the
 * result + 2). Caller holds g->mu. */
static int32_t char_step_memo(di_grammar *g, int32_t s) {
  if (!g->cstep && !(g->cstep = calloc(g->a.n_st, sizeof *g->cstep))) return char_step(&g->a, s);
  if (!g->cstep[s]) g->cstep[s] = char_step(&g->a, s) + 2;
  return g->cstep[s] - 2;
}

/* Whether some byte edge of s reads a byte in [lo, hi]. */
static bool reads_any(const ga *a, int32_t s, unsigned lo, unsigned hi) {
  const ga_state *S = &a->st[s];
  for (uint32_t j = 0; j < S->r_n; j++) {
    const ga_range *r = &a->ranges[S->r_off + j];
    if (r->lo <= hi && r->hi >= lo) return true;
  }
  return false;
}

/* Whether s reads every byte in [lo, hi] (its ranges are sorted and disjoint). */
static bool reads_all(const ga *a, int32_t s, unsigned lo, unsigned hi) {
  const ga_state *S = &a->st[s];
  for (uint32_t j = 0; j < S->r_n && lo <= hi; j++) {
    const ga_range *r = &a->ranges[S->r_off + j];
    if (r->hi < lo) continue;
    if (r->lo > lo) return false;
    lo = (unsigned)r->hi + 1;
  }
  return lo > hi;
}

/* Accepted tokens in a bitmap. The popcnt instruction where the CPU has it:
 * this file is built for any x86-64, where __builtin_popcount is a library
 * call per word. */
static size_t count_bits_swar(const uint32_t *w, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t x = w[i];
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    c += (((x + (x >> 4)) & 0x0F0F0F0Fu) * 0x01010101u) >> 24;
  }
  return c;
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("popcnt"))) static size_t count_bits_hw(const uint32_t *w, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++) c += (size_t)__builtin_popcount(w[i]);
  return c;
}
static size_t count_bits(const uint32_t *w, size_t n) {
  return __builtin_cpu_supports("popcnt") ? count_bits_hw(w, n) : count_bits_swar(w, n);
}
#else
static size_t count_bits(const uint32_t *w, size_t n) { return count_bits_swar(w, n); }
#endif

enum { CLOSED_MAX = 2048 }; /* states a closure check may visit */

/* Reads the byte-range sequence rng[0..n) from st through plain states only,
 * adding the states it ends in to q (seen: their index there, -1 if not);
 * false if a byte is not read, leads to a state that is not plain, or q is
 * full. Follows the states' ranges, not single bytes. */
static bool seq_into(const ga *a, int32_t st, const uint8_t (*rng)[2], int n, int32_t *q, size_t *nq, int32_t *seen) {
  if (n == 0) {
    if (seen[st] >= 0) return true;
    if (*nq == CLOSED_MAX) return false;
    seen[st] = (int32_t)*nq;
    q[(*nq)++] = st;
    return true;
  }
  const ga_state *S = &a->st[st];
  unsigned lo = rng[0][0], hi = rng[0][1];
  for (uint32_t j = 0; j < S->r_n; j++) {
    const ga_range *r = &a->ranges[S->r_off + j];
    if (r->hi < lo) continue;
    if (r->lo > lo || !plain_state(a, r->to) || !seq_into(a, r->to, rng + 1, n - 1, q, nq, seen)) return false;
    lo = (unsigned)r->hi + 1;
    if (lo > hi) return true;
  }
  return false;
}

/* Whether plain state s reads every string character into a plain state that
 * does the same (the states reachable from s by string characters are closed
 * under them): then every token of string characters only is accepted from s
 * whatever its length, as from the head of an endless chain, though the
 * characters may lead to different states (an unanchored pattern's run
 * counters). Marks the whole closed set in g->chain as such. *ctl_ok: none
 * of its states reads a control byte. Caller holds g->mu. */
static bool str_closed(di_grammar *g, int32_t s, bool *ctl_ok) {
  const ga *a = &g->a;
  *ctl_ok = false;
  /* most states fail at once: they do not read every ASCII string character */
  for (size_t r = 0; r < 3; r++)
    if (!reads_all(a, s, ascii_chars[r][0], ascii_chars[r][1])) return false;
  int32_t *q = malloc(sizeof *q * CLOSED_MAX);
  if (!q) return false;
  int32_t *seen = g->local; /* -1 everywhere between uses (state_key's scratch) */
  size_t nq = 1;
  bool ok = true, ctl = true;
  q[0] = s;
  seen[s] = 0;
  /* the byte edges >= 0x80 of the last state whose UTF-8 sequences were
   * checked: a state with the same ones reads them into the same states
   * (property-name states all lead non-ASCII characters to the body) */
  const ga_range *hi_r = NULL;
  uint32_t hi_n = 0;
  for (size_t h = 0; ok && h < nq; h++) {
    int32_t u = q[h];
    ctl = ctl && !reads_any(a, u, 0x00, 0x1F);
    for (size_t r = 0; ok && r < 3; r++) ok = seq_into(a, u, &ascii_chars[r], 1, q, &nq, seen);
    const ga_state *U = &a->st[u];
    const ga_range *ur = a->ranges + U->r_off;
    uint32_t j0 = 0;
    while (j0 < U->r_n && ur[j0].hi < 0x80) j0++;
    bool same = hi_r && U->r_n - j0 == hi_n && (j0 == U->r_n || ur[j0].lo >= 0x80);
    for (uint32_t j = 0; same && j < hi_n; j++)
      same = ur[j0 + j].lo == hi_r[j].lo && ur[j0 + j].hi == hi_r[j].hi && ur[j0 + j].to == hi_r[j].to;
    if (same) continue;
    for (size_t k = 0; ok && k < sizeof u8_len / sizeof u8_len[0]; k++) ok = seq_into(a, u, u8_seqs[k], u8_len[k], q, &nq, seen);
    if (j0 == U->r_n || ur[j0].lo >= 0x80) {
      hi_r = ur + j0;
      hi_n = U->r_n - j0;
    }
  }
  for (size_t h = 0; h < nq; h++) {
    if (ok && g->chain[q[h]] == 0) g->chain[q[h]] = (int16_t)(1 + (CHAIN_INF << 1 | ctl));
    seen[q[h]] = -1;
  }
  free(q);
  *ctl_ok = ok && ctl;
  return ok;
}

/* The string-character chain from state s: K >= 0 when s, and the states
 * every string character leads through from it, are plain (not final, no
 * calls) and, after exactly K characters, a state reads no string character
 * nor the first byte of one (CHAIN_INF: the chain goes on past any token).
 * Then a token of string characters only is accepted from s iff it has at
 * most K characters (a partial last one counting as one): it cannot leave
 * the rule, and every state on the way reads all of them. *ctl_ok: none of
 * these states reads a control byte (0x00-0x1F), so tokens holding one
 * among string characters are refused too. -1: no such chain.
 * Memoised per grammar state in g->chain: 0 unknown, -1 none, -2 on the
 * current path, else 1 + (K << 1 | ctl_ok). Caller holds g->mu. */
static int chain_len(di_grammar *g, int32_t s, bool *ctl_ok) {
  const ga *a = &g->a;
  if (!g->chain && !(g->chain = calloc(a->n_st, sizeof *g->chain))) return -1;
  int32_t path[CHAIN_INF + 1];
  bool okp[CHAIN_INF + 1];
  int n = 0, k_end = -1;
  bool ok_end = true, truncated = false;
  for (int32_t t = s;;) {
    int16_t m = g->chain[t];
    if (m > 0) {
      k_end = (m - 1) >> 1;
      ok_end = (m - 1) & 1;
      break;
    }
    if (m == -1) break;
    if (m == -2) { /* a cycle: the chain never ends */
      k_end = CHAIN_INF;
      break;
    }
    if (n == CHAIN_INF) { /* verified far enough for path[0] only */
      k_end = CHAIN_INF;
      truncated = true;
      break;
    }
    const ga_state *S = &a->st[t];
    if (S->final || S->c_n) break;
    bool ctl = !reads_any(a, t, 0x00, 0x1F);
    if (!reads_any(a, t, 0x20, 0x21) && !reads_any(a, t, 0x23, 0x5B) && !reads_any(a, t, 0x5D, 0x7F) &&
        !reads_any(a, t, 0x80, 0xFF)) {
      g->chain[t] = (int16_t)(1 + ctl);
      k_end = 0;
      ok_end = ctl;
      break;
    }
    int32_t u = char_step_memo(g, t);
    if (u < 0) {
      bool cok;
      if (str_closed(g, t, &cok)) {
        k_end = CHAIN_INF;
        ok_end = cok;
      } else {
        g->chain[t] = -1;
      }
      break;
    }
    g->chain[t] = -2;
    path[n] = t;
    okp[n++] = ctl;
    t = u;
  }
  bool ok = ok_end;
  for (int j = n; j-- > 0;) {
    ok = ok && okp[j];
    int K = k_end < 0 ? -1 : (k_end + (n - j) > CHAIN_INF ? CHAIN_INF : k_end + (n - j));
    if (truncated && j > 0) g->chain[path[j]] = 0;
    else g->chain[path[j]] = (int16_t)(K < 0 ? -1 : 1 + (K << 1 | ok));
  }
  if (n == 0) {
    if (k_end < 0 && g->chain[s] == 0) g->chain[s] = -1;
    *ctl_ok = ok_end;
    return k_end;
  }
  *ctl_ok = ok;
  return k_end < 0 ? -1 : (k_end + n > CHAIN_INF ? CHAIN_INF : k_end + n);
}

/* A reference for state s: a plain state G that every string character
 * brings back to itself (a string's body) and that s enters on a common
 * character (or one character later), or -1. Where the walks from s and from
 * G reach the same plain state (or two with the same edges) at a trie node,
 * through plain states only, every token below that node is decided alike
 * from both, so s copies G's decisions there (G's are
 * cheap: it heads an endless string-character chain). Property names that
 * exclude the declared ones are the common case: every first character but
 * the declared names' leads to the string body. */
static int32_t ref_state(di_grammar *g, int32_t s) {
  const ga *a = &g->a;
  static const uint8_t probe[] = {'e', 'x', 'q', 'Z', '0', '~'};
  for (size_t k = 0; k < sizeof probe; k++) {
    int32_t G = ga_step(a, s, probe[k]);
    if (!plain_state(a, G)) continue;
    int32_t G1 = char_step_memo(g, G); /* automata are not minimal: the body may be one character on */
    if (G1 != G && (!plain_state(a, G1) || char_step_memo(g, G1) != G1)) continue;
    bool ok;
    if (G1 == s || chain_len(g, G1, &ok) < 0) continue;
    return G1;
  }
  return -1;
}

/* Whether plain states x and y read the same bytes into the same states, or
 * each back into itself (copies of one string body, which the automaton
 * keeps apart): then {(x, y)} and equality are a bisimulation, and walks from
 * them decide every token alike. */
static bool same_edges(const ga *a, int32_t x, int32_t y) {
  const ga_state *X = &a->st[x], *Y = &a->st[y];
  if (x == y) return true;
  if (X->r_n != Y->r_n) return false;
  for (uint32_t j = 0; j < X->r_n; j++) {
    const ga_range *p = &a->ranges[X->r_off + j], *q = &a->ranges[Y->r_off + j];
    if (p->lo != q->lo || p->hi != q->hi || (p->to != q->to && !(p->to == x && q->to == y))) return false;
  }
  return true;
}

/* chain_len's K without its ctl_ok, from the memo when known (the walk asks
 * at every plain trie node). */
static inline int chain_memo(di_grammar *g, int32_t s) {
  int16_t m = g->chain ? g->chain[s] : 0;
  if (m > 0) return (m - 1) >> 1;
  if (m == -1) return -1;
  bool ok;
  return chain_len(g, s, &ok);
}

/* t's class run (class_run.c), for states that head no string-character
 * chain: those that read every string character (a string's body, property
 * names) take the string shortcuts, and their classes are schema-specific.
 * Caller holds g->mu. */
static const brun_cls *brun_memo(di_grammar *g, int32_t t, int *K) {
  if (chain_memo(g, t) >= 0) return NULL;
  return grammar_class_run(g, t, K);
}

/* The context-free decisions of one state: a walk of the vocabulary trie
 * from it. shortcuts false: node by node only (tests compare the two). */
gcache *grammar_state_compute(di_grammar *g, int32_t state, bool shortcuts) {
  const gvocab *v = g->v;
  const ga *a = &g->a;
  gp *p = &g->scratch;
  /* G's decisions first (its own walk takes the chain shortcut, never this one) */
  bool ok0;
  /* a closed set's state (chain_len's K without one successor per
   * character, e.g. a property name other than the declared ones) that has a
   * reference copies its decisions too: the walks differ below a few nodes,
   * where the closure's shortcut still walks every subtree holding a quote */
  int32_t ref = shortcuts && plain_state(a, state) && (chain_len(g, state, &ok0) < 0 || char_step_memo(g, state) < 0)
                    ? ref_state(g, state)
                    : -1;
  const gcache *rc = ref >= 0 ? grammar_state_cache_locked(g, ref) : NULL;
  size_t mark = p->n;
  uint32_t D = v->max_len + 1;
  gset *sets = calloc(D, sizeof *sets);
  bool *esc = calloc(D, 1);
  bool *pp = calloc(D, 1); /* the path from the root reads string characters only */
  int32_t *simple = malloc(sizeof *simple * D);
  simple[0] = state; /* the start is read from directly, without closure */
  gset one = {0};
  tokbuf unc = {0}, ent = {0};
  bool *pd = calloc(D, 1); /* the walk left the state's rule at this depth of the current path */
  size_t words = ((size_t)v->n_vocab + 31) / 32;
  /* accepted tokens as bits (a walk may accept most of them), in the
   * grammar's scratch bitmap; tw lists the words set (unless full: a
   * reference's or the plain bitmap's words were copied in), so a state that
   * accepts a few tokens costs no pass over the whole vocabulary */
  if (!g->acc_scratch && !(g->acc_scratch = calloc(words, sizeof *g->acc_scratch))) abort();
  if (!g->tw_scratch && !(g->tw_scratch = malloc(words * sizeof *g->tw_scratch))) abort();
  uint32_t *acc = g->acc_scratch, *tw = g->tw_scratch;
  size_t ntw = 0;
  bool full = rc != NULL;
#define ACCEPT(t)                                                     \
  do {                                                                \
    uint32_t w_ = (uint32_t)(t) >> 5;                                 \
    if (!full && !acc[w_]) tw[ntw++] = w_;                            \
    acc[w_] |= 1u << ((uint32_t)(t) & 31);                            \
  } while (0)
  /* with a reference, acc starts as its decisions: what this walk decides is cleared first */
#define CLEAR_RANGE(lo, hi)                                                                         \
  do {                                                                                            \
    if (rc)                                                                                       \
      for (uint32_t k_ = (lo); k_ < (hi); k_++) acc[v->sorted[k_] >> 5] &= ~(1u << (v->sorted[k_] & 31)); \
  } while (0)
  /* From a state at the head of a string-character chain of K, the plain
   * tokens of at most K characters are accepted (one bitmap) and every
   * subtree below a plain path that holds no '"', '\\' or invalid UTF-8 is
   * decided by that bitmap alone: its other tokens have more characters or a
   * control byte, which the chain refuses. */
  bool ctl_ok = false;
  int k0 = shortcuts && ref < 0 ? chain_len(g, state, &ctl_ok) : -1;
  pp[0] = k0 >= 0 && ctl_ok;
  /* whole uncertain tokens only for the node-by-node reference (tests): masks walk the entries */
  unc_rec ur = {.b = shortcuts ? NULL : &unc, .e = &ent, .pd = pd, .min_depth = 0};
  /* With a reference: acc starts as G's accepted set, which holds wherever
   * the two walks meet (those subtrees are skipped); every token the walk
   * visits or skips otherwise is cleared before it is decided. gst[d]: G's
   * walk along the current path (-1: gone or not plain); ru: the next of G's
   * uncertain tokens. */
  int32_t *gst = NULL;
  uint32_t ru = 0, re = 0;
  if (rc) {
    gst = malloc(sizeof *gst * D);
    gst[0] = ref;
    if (rc->acc_bits) memcpy(acc, rc->acc_bits, words * sizeof *acc);
    else
      for (uint32_t k = 0; k < rc->n_acc; k++) ACCEPT(rc->acc_list[k]);
  }
  /* A state at the head of a class run: its class-only tokens by length,
   * then a walk of each exit's subtree from the run's state at its depth
   * (xs[q]: after q class bytes); otherwise one walk of the whole trie. */
  const brun_cls *rb = NULL;
  int Kr = -1;
  uint32_t kr = 0;
  int32_t *xs = NULL;
  if (shortcuts && !rc && k0 < 0 && (rb = brun_memo(g, state, &Kr))) {
    kr = Kr == CHAIN_INF ? UINT32_MAX : (uint32_t)Kr;
    uint32_t top = kr < v->max_len ? kr : v->max_len;
    for (uint32_t k = 0; k < rb->len_end[top]; k++) ACCEPT(rb->tok[k]);
    uint8_t cb = 0;
    while (!brun_in(rb->m, cb)) cb++;
    if (!(xs = malloc(sizeof *xs * (top + 1)))) abort();
    xs[0] = state;
    for (uint32_t q = 0; q < top; q++) xs[q + 1] = ga_step(a, xs[q], cb);
    g->brun_subtrees++;
  }
  /* Otherwise, where nothing is decided before the first byte (no reference
   * state's decisions, no string-chain bitmap), only the root's children
   * that the state has an edge for are walked: the others' subtrees are
   * refused, and visiting them cost a cold load per array per child. */
  uint32_t roots[256], n_roots = 0;
  bool by_root = shortcuts && !rc && !rb && !pp[0];
  if (by_root)
    for (uint32_t r = a->st[state].r_off; r < a->st[state].r_off + a->st[state].r_n; r++)
      for (unsigned b = a->ranges[r].lo; b <= a->ranges[r].hi; b++)
        if (v->root[b] != UINT32_MAX) roots[n_roots++] = v->root[b];
  for (uint32_t sg = 0, n_seg = rb ? rb->n_exit : by_root ? n_roots : 1; sg < n_seg; sg++) {
    uint32_t i = 0, i_end = v->n_nodes;
    if (by_root) {
      i = roots[sg];
      i_end = v->end[i];
    }
    if (rb) {
      i = rb->exit[sg];
      i_end = v->end[i];
      uint32_t p0 = v->depth[i] - 1u; /* the class bytes before the exit */
      if (p0 > kr) continue; /* the run ended before: refused */
      simple[p0] = xs[p0];
      sets[p0].n = 0;
      esc[p0] = pp[p0] = false;
      for (uint32_t q = 1; q <= p0; q++) pd[q] = false;
    }
    while (i < i_end) {
      uint32_t d = v->depth[i];
      if (d - 1 < ur.min_depth) ur.min_depth = d - 1;
      pp[d] = pp[d - 1] && v->rare_cum[i + 1] == v->rare_cum[i];
      if (pp[d] && v->spec_cum[v->end[i]] == v->spec_cum[i + 1]) {
        i = v->end[i];
        continue;
      }
      bool popped = false;
      /* Fast path: while the walk is one plain state of a regular stretch
       * (no calls, not final) there is no stack to build. */
      simple[d] = -1;
      sets[d].n = 0;
      if (simple[d - 1] >= 0) {
        int32_t t = ga_step(a, simple[d - 1], v->byte[i]);
        if (rc) {
          int32_t gt = gst[d - 1] >= 0 ? ga_step(a, gst[d - 1], v->byte[i]) : -1;
          gst[d] = plain_state(a, gt) ? gt : -1;
          /* the walks meet: G's decisions below */
          if (gst[d] >= 0 && plain_state(a, t) && same_edges(a, t, gst[d])) {
            g->ref_copies++;
            uint32_t lo = v->tok_cum[i], hi = v->tok_cum[v->end[i]];
            while (ru < rc->n_unc && v->pos[rc->unc[ru]] < lo) ru++;
            if (ru < rc->n_unc && v->pos[rc->unc[ru]] < hi) {
              tb_push(&unc, rc->unc[ru], (uint16_t)(unc.n ? ur.min_depth : 0));
              for (ru++; ru < rc->n_unc && v->pos[rc->unc[ru]] < hi; ru++)
                tb_push(&unc, rc->unc[ru], rc->unc_lcp[ru]);
              ur.min_depth = 0xFFFF;
            }
            /* the paths down to here read plain states only (no rule left), so the entries are G's */
            while (re < rc->n_ent && v->pos[rc->ent_tok[re]] < lo) re++;
            for (uint32_t r0 = re; re < rc->n_ent && v->pos[rc->ent_tok[re]] < hi; re++)
              tb_push_kl(&ent, rc->ent_tok[re], rc->ent_j[re], re > r0 ? rc->ent_lcp[re] : KL_UNKNOWN);
            i = v->end[i];
            continue;
          }
        }
        if (t >= 0 && !a->st[t].c_n && !a->st[t].final) {
          simple[d] = t;
          /* a subtree of whole or partial string characters, below a node
           * that ends one, from a state at the head of a string-character
           * chain of K: its tokens of at most K more characters are accepted,
           * the others refused, without a walk */
          int K;
          if (shortcuts && v->u8[i] == U8_BOUNDARY && v->end[i] > i + 1 &&
              v->rare_cum[v->end[i]] == v->rare_cum[i + 1] && (K = chain_memo(g, t)) >= 0) {
            uint32_t base = v->ccn[i];
            if (K == CHAIN_INF || v->mcc[i] <= base + (uint32_t)K) { /* all accepted: nothing to clear first */
              for (uint32_t k = v->tok_cum[i]; k < v->tok_cum[v->end[i]]; k++) ACCEPT(v->sorted[k]);
            } else {
              CLEAR_RANGE(v->tok_cum[i], v->tok_cum[v->end[i]]);
              for (uint32_t k = v->tok_cum[i]; k < v->tok_cum[v->end[i]]; k++)
                if (v->cct[k] <= base + (uint32_t)K) ACCEPT(v->sorted[k]);
            }
            i = v->end[i];
            continue;
          }
          /* a subtree that reads only bytes of t's class run below this node */
          const brun_cls *bc;
          if (shortcuts && v->end[i] > i + 1 && (bc = brun_memo(g, t, &K)) &&
              bc->out_cum[v->end[i]] == bc->out_cum[i + 1]) {
            uint32_t base = v->depth[i];
            g->brun_subtrees++;
            CLEAR_RANGE(v->tok_cum[i], v->tok_cum[v->end[i]]);
            for (uint32_t k = v->tok_cum[i]; k < v->tok_cum[v->end[i]]; k++)
              if (K == CHAIN_INF || v->tlen[v->sorted[k]] <= base + (uint32_t)K) ACCEPT(v->sorted[k]);
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
      pd[d] = popped;
      bool alive = simple[d] >= 0 || sets[d].n > 0;
      CLEAR_RANGE(v->t_off[i], v->t_off[i] + v->t_n[i]);
      for (uint32_t k = 0; k < v->t_n[i]; k++) {
        int32_t t = v->sorted[v->t_off[i] + k];
        if (alive || popped) ACCEPT(t);
        else if (esc[d - 1]) unc_add(&ur, t, d, d - 1);
      }
      if (alive) {
        i++;
        continue;
      }
      CLEAR_RANGE(v->tok_cum[i + 1], v->tok_cum[v->end[i]]);
      if (esc[d] && ur.b) { /* the subtree reads past the rule's end: all uncertain */
        for (uint32_t j = i + 1; j < v->end[i]; j++) {
          uint32_t dj = v->depth[j];
          if (dj - 1 < ur.min_depth) ur.min_depth = dj - 1;
          for (uint32_t k = 0; k < v->t_n[j]; k++) unc_add(&ur, v->sorted[v->t_off[j] + k], dj, d);
        }
      } else if (esc[d]) { /* the same entries, token by token (a whitespace state's: tens of thousands) */
        uint16_t js[64];
        uint32_t nj = 0;
        for (uint32_t j = 1; j <= d && nj < 64; j++)
          if (pd[j]) js[nj++] = (uint16_t)j;
        for (uint32_t j = 65; j <= d; j++) nj += pd[j]; /* more than 64: the general loop below */
        uint32_t lo = v->tok_cum[i + 1], hi = v->tok_cum[v->end[i]];
        if (nj <= 64) {
          tb_reserve(&ent, ent.n + (size_t)(hi - lo) * nj);
          /* tokens of one subtree share its first d >= j bytes: with one j,
           * consecutive rests share the tokens' common prefix less j */
          for (uint32_t k = lo; k < hi; k++)
            for (uint32_t q = 0; q < nj; q++) {
              ent.v[ent.n] = v->sorted[k];
              ent.kl[ent.n] = nj == 1 && k > lo ? (uint16_t)(v->sorted_lcp[k] - js[0]) : KL_UNKNOWN;
              ent.lcp[ent.n++] = js[q];
            }
        } else {
          for (uint32_t k = lo; k < hi; k++) unc_add(&ur, v->sorted[k], d, d);
        }
      }
      i = v->end[i];
    }
  }
  free(xs);
  if (pp[0]) {
    const uint32_t *pl = v->plain[(uint32_t)k0 < v->max_cc ? (uint32_t)k0 : v->max_cc];
    for (size_t w = 0; w < words; w++) acc[w] |= pl[w];
    full = true;
  }
  free(gst);
  for (uint32_t d = 0; d < D; d++) gset_free(&sets[d]);
  free(sets);
  free(simple);
  free(pp);
  free(pd);
  gset_free(&one);
  free(esc);
  gp_truncate(p, mark);
#undef ACCEPT
#undef CLEAR_RANGE
  size_t n_acc = 0;
  if (ntw > 64) full = true; /* then whole passes cost less than sorting the words */
  if (full) {
    n_acc = count_bits(acc, words);
  } else {
    for (size_t k = 1; k < ntw; k++) /* in token order; a walk sets few words */
      for (size_t j = k; j > 0 && tw[j - 1] > tw[j]; j--) {
        uint32_t x = tw[j];
        tw[j] = tw[j - 1];
        tw[j - 1] = x;
      }
    for (size_t k = 0; k < ntw; k++) n_acc += count_bits(&acc[tw[k]], 1);
  }
  gcache *c = calloc(1, sizeof *c);
  c->n_acc = (uint32_t)n_acc;
  if (n_acc * 32 > (size_t)v->n_vocab) {
    if (!(c->acc_bits = malloc(words * sizeof *acc))) abort();
    memcpy(c->acc_bits, acc, words * sizeof *acc);
    g->cache_bytes += words * 4;
  } else {
    c->acc_list = malloc(sizeof *c->acc_list * (n_acc + 1));
    size_t k = 0;
    for (size_t i = 0, n = full ? words : ntw; i < n; i++) {
      uint32_t w = full ? (uint32_t)i : tw[i];
      for (uint32_t b = acc[w]; b; b &= b - 1) c->acc_list[k++] = (int32_t)(w * 32 + (uint32_t)__builtin_ctz(b));
    }
    g->cache_bytes += n_acc * 4;
  }
  if (full) memset(acc, 0, words * sizeof *acc);
  else
    for (size_t k = 0; k < ntw; k++) acc[tw[k]] = 0;
  c->unc = unc.v;
  c->unc_lcp = unc.lcp;
  c->n_unc = (uint32_t)unc.n;
  c->ent_tok = ent.v;
  c->ent_j = ent.lcp;
  c->n_ent = (uint32_t)ent.n;
  free(unc.kl);
  ent_index(v, c, ent.kl);
  g->cache_bytes += unc.n * 6 + ent.n * 22 + c->grp.n * 6 + sizeof *c;
  return c;
}

gcache *grammar_state_cache_fresh(di_grammar *g, int32_t state, bool shortcuts) {
  pthread_mutex_lock(&g->mu);
  gcache *c = grammar_state_compute(g, state, shortcuts);
  pthread_mutex_unlock(&g->mu);
  return c;
}
