/* gx (rules of expressions) -> ga (one DFA per rule over bytes and rule
 * calls). Thompson construction per rule, subset construction over byte
 * intervals and callee rules, then pruning of everything that cannot reach
 * the end of its rule (so every live matcher state can still complete, which
 * keeps masks exact) and rejection of left recursion and empty languages. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "grammar/automaton.h"

enum { E_EPS, E_BYTES, E_CALL };
typedef struct nedge {
  int32_t from, to, rule;
  uint8_t kind, lo, hi;
} nedge;

typedef struct nfa {
  nedge *e;
  size_t n_e, cap_e;
  int32_t n_st;
  uint32_t max_st;
  bool overflow;
} nfa;

static int32_t nst(nfa *n) {
  if ((uint32_t)n->n_st >= n->max_st) n->overflow = true;
  return n->n_st++;
}

static void edge(nfa *n, int32_t from, int32_t to, uint8_t kind, uint8_t lo, uint8_t hi, int32_t rule) {
  GROW(n->e, n->cap_e, n->n_e + 1);
  n->e[n->n_e++] = (nedge){.from = from, .to = to, .kind = kind, .lo = lo, .hi = hi, .rule = rule};
}

static void build(nfa *n, const gx *g, int32_t x, int32_t from, int32_t to) {
  if (n->overflow) return;
  const gx_node *d = &g->nodes[x];
  const int32_t *k = g->kids ? g->kids + d->kid_off : NULL;
  switch (d->kind) {
  case GXK_NOTHING:
    return;
  case GXK_EMPTY:
    edge(n, from, to, E_EPS, 0, 0, 0);
    return;
  case GXK_BYTES:
    edge(n, from, to, E_BYTES, d->lo, d->hi, 0);
    return;
  case GXK_REF:
    edge(n, from, to, E_CALL, 0, 0, d->ref);
    return;
  case GXK_AUT: {
    const gx_aut *A = &g->auts[d->ref];
    int32_t base = n->n_st;
    for (uint32_t i = 0; i < A->n_st; i++) nst(n);
    if (n->overflow) return;
    edge(n, from, base, E_EPS, 0, 0, 0);
    for (uint32_t i = 0; i < A->n_st; i++) {
      for (uint32_t j = A->off[i]; j < A->off[i + 1]; j++)
        edge(n, base + (int32_t)i, base + A->e[j].to, E_BYTES, A->e[j].lo, A->e[j].hi, 0);
      if (A->final[i]) edge(n, base + (int32_t)i, to, E_EPS, 0, 0, 0);
    }
    return;
  }
  case GXK_ALT:
    for (int32_t i = 0; i < d->nkids; i++) build(n, g, k[i], from, to);
    return;
  case GXK_SEQ: {
    int32_t cur = from;
    for (int32_t i = 0; i < d->nkids; i++) {
      int32_t nx = i + 1 == d->nkids ? to : nst(n);
      build(n, g, k[i], cur, nx);
      cur = nx;
    }
    return;
  }
  case GXK_REP: {
    int32_t cur = from;
    for (int32_t i = 0; i < d->min && !n->overflow; i++) {
      int32_t nx = nst(n);
      build(n, g, k[0], cur, nx);
      cur = nx;
    }
    if (d->max < 0) {
      int32_t loop = nst(n);
      edge(n, cur, loop, E_EPS, 0, 0, 0);
      build(n, g, k[0], loop, loop);
      edge(n, loop, to, E_EPS, 0, 0, 0);
    } else {
      for (int32_t i = d->min; i < d->max && !n->overflow; i++) {
        int32_t nx = nst(n);
        edge(n, cur, to, E_EPS, 0, 0, 0);
        build(n, g, k[0], cur, nx);
        cur = nx;
      }
      edge(n, cur, to, E_EPS, 0, 0, 0);
    }
    return;
  }
  }
}

/* ---- subset construction ---- */

typedef struct dfa_build {
  /* NFA adjacency (CSR by from): state s's epsilon edges are
   * e[off[s] .. mid[s]), its byte and call edges e[mid[s] .. off[s + 1]) */
  uint32_t *off, *mid;
  nedge *e;
  /* interned DFA state sets */
  int32_t *pool;
  size_t n_pool, cap_pool;
  uint32_t *set_off, *set_len;
  size_t n_sets, cap_sets, cap_len;
  int32_t *tab; /* open addressing: DFA id or -1 */
  size_t tab_cap;
  /* scratch */
  uint32_t *mark;
  uint32_t stamp;
  int32_t *stack, *tmp;
  size_t cap_stack, cap_tmp;
} dfa_build;

static int cmp_i32(const void *x, const void *y) {
  int32_t a = *(const int32_t *)x, c = *(const int32_t *)y;
  return a < c ? -1 : a > c;
}

static uint64_t set_hash(const int32_t *s, size_t n) { return XXH3_64bits(s, n * sizeof *s); }

static void tab_rehash(dfa_build *b) {
  size_t nc = b->tab_cap ? b->tab_cap * 2 : 1024;
  free(b->tab);
  b->tab = malloc(nc * sizeof *b->tab);
  if (!b->tab) abort();
  memset(b->tab, 0xff, nc * sizeof *b->tab);
  b->tab_cap = nc;
  for (size_t i = 0; i < b->n_sets; i++) {
    size_t h = set_hash(b->pool + b->set_off[i], b->set_len[i]) & (nc - 1);
    while (b->tab[h] >= 0) h = (h + 1) & (nc - 1);
    b->tab[h] = (int32_t)i;
  }
}

/* eps-closure of b->tmp[0..n) into a sorted set; returns its DFA id (new ids
 * are appended). */
static int32_t intern_closure(dfa_build *b, size_t n, bool *is_new) {
  b->stamp++;
  size_t sp = 0, outn = 0;
  GROW(b->stack, b->cap_stack, n + 1);
  for (size_t i = 0; i < n; i++)
    if (b->mark[b->tmp[i]] != b->stamp) {
      b->mark[b->tmp[i]] = b->stamp;
      b->stack[sp++] = b->tmp[i];
    }
  size_t pool0 = b->n_pool;
  while (sp) {
    int32_t s = b->stack[--sp];
    GROW(b->pool, b->cap_pool, b->n_pool + 1);
    b->pool[b->n_pool++] = s;
    outn++;
    for (uint32_t j = b->off[s]; j < b->mid[s]; j++)
      if (b->mark[b->e[j].to] != b->stamp) {
        b->mark[b->e[j].to] = b->stamp;
        GROW(b->stack, b->cap_stack, sp + 1);
        b->stack[sp++] = b->e[j].to;
      }
  }
  int32_t *set = b->pool + pool0;
  /* insertion sort is fine: sets are small; qsort for big ones */
  if (outn > 32) {
    qsort(set, outn, sizeof *set, cmp_i32);
  } else {
    for (size_t i = 1; i < outn; i++) {
      int32_t v = set[i];
      size_t j = i;
      while (j && set[j - 1] > v) {
        set[j] = set[j - 1];
        j--;
      }
      set[j] = v;
    }
  }
  if ((b->n_sets + 1) * 2 > b->tab_cap) tab_rehash(b);
  size_t h = set_hash(set, outn) & (b->tab_cap - 1);
  while (b->tab[h] >= 0) {
    int32_t id = b->tab[h];
    if (b->set_len[id] == outn && !memcmp(b->pool + b->set_off[id], set, outn * sizeof *set)) {
      b->n_pool = pool0;
      *is_new = false;
      return id;
    }
    h = (h + 1) & (b->tab_cap - 1);
  }
  GROW(b->set_off, b->cap_sets, b->n_sets + 1);
  GROW(b->set_len, b->cap_len, b->n_sets + 1);
  b->set_off[b->n_sets] = (uint32_t)pool0;
  b->set_len[b->n_sets] = (uint32_t)outn;
  b->tab[h] = (int32_t)b->n_sets;
  *is_new = true;
  return (int32_t)b->n_sets++;
}

static int cmp_call(const void *x, const void *y) {
  const nedge *a = x, *c = y;
  return a->rule != c->rule ? (a->rule < c->rule ? -1 : 1) : (a->to < c->to ? -1 : a->to > c->to);
}

typedef struct out_buf {
  ga_state *st;
  size_t n_st, cap_st;
  ga_range *r;
  size_t n_r, cap_r;
  ga_call *c;
  size_t n_c, cap_c;
} out_buf;

/* Determinises the NFA of one rule (start ns, end ne); DFA ids are global
 * (base + local id). */
static di_code determinize(dfa_build *b, int32_t rule, int32_t ns, int32_t ne, out_buf *o,
                           const ga_limits *lim, di_status *st) {
  b->n_sets = 0;
  b->n_pool = 0;
  if (b->tab) memset(b->tab, 0xff, b->tab_cap * sizeof *b->tab);
  int32_t base = (int32_t)o->n_st;
  bool nw;
  b->tmp[0] = ns;
  intern_closure(b, 1, &nw);
  nedge *ed = NULL;
  size_t cap_ed = 0;
  for (size_t id = 0; id < b->n_sets; id++) {
    if (o->n_st + 1 > lim->max_dfa_states) {
      free(ed);
      return di_errorf(st, DI_ERR_RANGE, "grammar too large: more than %u automaton states",
                       lim->max_dfa_states);
    }
    GROW(o->st, o->cap_st, o->n_st + 1);
    ga_state *S = &o->st[o->n_st++];
    *S = (ga_state){.rule = rule, .r_off = (uint32_t)o->n_r, .c_off = (uint32_t)o->n_c};
    /* gather edges */
    size_t ne_ = 0;
    uint64_t bound[5] = {1, 0, 0, 0, 1}; /* byte-interval boundaries as bits: 0 and 256 */
    for (uint32_t i = 0; i < b->set_len[id]; i++) {
      int32_t s = b->pool[b->set_off[id] + i];
      if (s == ne) S->final = true;
      for (uint32_t j = b->mid[s]; j < b->off[s + 1]; j++) {
        GROW(ed, cap_ed, ne_ + 1);
        ed[ne_++] = b->e[j];
        if (b->e[j].kind == E_BYTES) {
          unsigned lo = b->e[j].lo, hi = b->e[j].hi + 1u;
          bound[lo >> 6] |= 1ull << (lo & 63);
          bound[hi >> 6] |= 1ull << (hi & 63);
        }
      }
    }
    /* byte intervals: between consecutive boundaries, found by bit scans (a
     * state has few edges; scanning all 256 bytes per state dominated compile
     * time) */
    for (int lo = 0; lo < 256;) {
      int k = (lo + 1) >> 6; /* the next boundary above lo (256 always is one) */
      uint64_t w = bound[k] & (~0ull << ((lo + 1) & 63));
      while (!w) w = bound[++k];
      int hi = (k << 6) + __builtin_ctzll(w);
      size_t nt = 0;
      for (size_t j = 0; j < ne_; j++)
        if (ed[j].kind == E_BYTES && ed[j].lo <= lo && lo <= ed[j].hi) {
          GROW(b->tmp, b->cap_tmp, nt + 1);
          b->tmp[nt++] = ed[j].to;
        }
      if (nt) {
        int32_t to = base + intern_closure(b, nt, &nw);
        ga_range *last = o->n_r > S->r_off ? &o->r[o->n_r - 1] : NULL;
        if (last && last->to == to && last->hi + 1 == lo) {
          last->hi = (uint8_t)(hi - 1);
        } else {
          GROW(o->r, o->cap_r, o->n_r + 1);
          o->r[o->n_r++] = (ga_range){.lo = (uint8_t)lo, .hi = (uint8_t)(hi - 1), .to = to};
        }
        S = &o->st[o->n_st - 1];
      }
      lo = hi;
    }
    /* calls grouped by callee */
    size_t nc = 0;
    for (size_t j = 0; j < ne_; j++)
      if (ed[j].kind == E_CALL) ed[nc++] = ed[j];
    if (nc > 1) qsort(ed, nc, sizeof *ed, cmp_call);
    for (size_t j = 0; j < nc;) {
      size_t k = j, nt = 0;
      while (k < nc && ed[k].rule == ed[j].rule) {
        GROW(b->tmp, b->cap_tmp, nt + 1);
        b->tmp[nt++] = ed[k++].to;
      }
      int32_t to = base + intern_closure(b, nt, &nw);
      GROW(o->c, o->cap_c, o->n_c + 1);
      o->c[o->n_c++] = (ga_call){.rule = ed[j].rule, .ret = to};
      j = k;
    }
    S = &o->st[o->n_st - 1];
    S->r_n = (uint32_t)(o->n_r - S->r_off);
    S->c_n = (uint32_t)(o->n_c - S->c_off);
  }
  free(ed);
  return DI_OK;
}

/* ---- analysis ---- */

static di_code analyse(ga *a, di_status *st) {
  uint32_t n = a->n_st;
  bool *live = calloc(n, 1), *nl = calloc(n, 1), *prod = calloc(a->n_rules, 1),
       *nullable = calloc(a->n_rules, 1);
  di_code rc = DI_OK;
  /* live: can reach the end of its rule; productive rules: live start */
  for (bool ch = true; ch;) {
    ch = false;
    for (uint32_t i = n; i-- > 0;) {
      if (live[i]) continue;
      const ga_state *S = &a->st[i];
      bool v = S->final;
      for (uint32_t j = 0; !v && j < S->r_n; j++) v = live[a->ranges[S->r_off + j].to];
      for (uint32_t j = 0; !v && j < S->c_n; j++) {
        const ga_call *c = &a->calls[S->c_off + j];
        v = prod[c->rule] && live[c->ret];
      }
      if (v) {
        live[i] = ch = true;
        if (a->rule_start[S->rule] == (int32_t)i) prod[S->rule] = true;
      }
    }
  }
  if (!prod[a->root]) {
    rc = di_errorf(st, DI_ERR_INVALID, "grammar admits no string (rule '%s' can never complete)",
                   a->rule_names[a->root]);
    goto out;
  }
  /* drop edges into dead states / unproductive rules */
  for (uint32_t i = 0; i < n; i++) {
    ga_state *S = &a->st[i];
    uint32_t k = 0;
    for (uint32_t j = 0; j < S->r_n; j++)
      if (live[a->ranges[S->r_off + j].to]) a->ranges[S->r_off + k++] = a->ranges[S->r_off + j];
    S->r_n = k;
    k = 0;
    for (uint32_t j = 0; j < S->c_n; j++) {
      ga_call c = a->calls[S->c_off + j];
      if (prod[c.rule] && live[c.ret]) a->calls[S->c_off + k++] = c;
    }
    S->c_n = k;
  }
  /* nullable rules */
  bool *nr = nullable;
  for (bool ch = true; ch;) {
    ch = false;
    for (uint32_t i = n; i-- > 0;) {
      if (nl[i]) continue;
      const ga_state *S = &a->st[i];
      bool v = S->final;
      for (uint32_t j = 0; !v && j < S->c_n; j++) {
        const ga_call *c = &a->calls[S->c_off + j];
        v = nr[c->rule] && nl[c->ret];
      }
      if (v) {
        nl[i] = ch = true;
        if (a->rule_start[S->rule] == (int32_t)i) nr[S->rule] = true;
      }
    }
  }
  /* left recursion: rule r calls q with nothing consumed before; look for a cycle */
  {
    uint32_t R = a->n_rules;
    uint8_t *adj = calloc((size_t)R * R, 1);
    int32_t *stack = malloc(sizeof *stack * (n + 1));
    uint32_t *seen = calloc(n, sizeof *seen);
    for (uint32_t r = 0; r < R; r++) {
      if (a->rule_start[r] < 0) continue;
      size_t sp = 0;
      stack[sp++] = a->rule_start[r];
      seen[a->rule_start[r]] = r + 1;
      while (sp) {
        const ga_state *S = &a->st[stack[--sp]];
        for (uint32_t j = 0; j < S->c_n; j++) {
          const ga_call *c = &a->calls[S->c_off + j];
          adj[(size_t)r * R + c->rule] = 1;
          if (nr[c->rule] && seen[c->ret] != r + 1) {
            seen[c->ret] = r + 1;
            stack[sp++] = c->ret;
          }
        }
      }
    }
    /* cycle detection by DFS colours */
    uint8_t *col = calloc(R, 1);
    int32_t *it = calloc(R, sizeof *it);
    for (uint32_t r0 = 0; r0 < R && rc == DI_OK; r0++) {
      if (col[r0]) continue;
      size_t sp = 0;
      stack[sp++] = (int32_t)r0;
      col[r0] = 1;
      while (sp && rc == DI_OK) {
        int32_t r = stack[sp - 1];
        if (it[r] >= (int32_t)R) {
          col[r] = 2;
          sp--;
          continue;
        }
        int32_t q = it[r]++;
        if (!adj[(size_t)r * R + q]) continue;
        if (col[q] == 1)
          rc = di_errorf(st, DI_ERR_INVALID, "left recursion through rule '%s' is not supported",
                         a->rule_names[q]);
        else if (col[q] == 0) {
          col[q] = 1;
          stack[sp++] = q;
        }
      }
    }
    free(col);
    free(it);
    free(adj);
    free(stack);
    free(seen);
  }
out:
  free(live);
  free(nl);
  free(prod);
  free(nullable);
  return rc;
}

/* CSR adjacency of n's edges (sorted in place) and scratch for determinize. */
static void dfa_build_init(dfa_build *b, nfa *n) {
  /* a counting sort by source state, epsilon edges first (stable: edges
   * keep their build order) */
  size_t ns = (size_t)n->n_st;
  b->off = calloc(ns + 1, sizeof *b->off);
  b->mid = calloc(ns + 1, sizeof *b->mid);
  uint32_t *at = malloc((ns + 1) * sizeof *at);
  nedge *sorted = malloc((n->n_e ? n->n_e : 1) * sizeof *sorted);
  if (!b->off || !b->mid || !at || !sorted) abort();
  for (size_t i = 0; i < n->n_e; i++) {
    b->off[n->e[i].from + 1]++;
    if (n->e[i].kind == E_EPS) b->mid[n->e[i].from]++;
  }
  for (size_t i = 0; i < ns; i++) b->off[i + 1] += b->off[i];
  for (size_t i = 0; i < ns; i++) {
    at[i] = b->off[i];                /* next epsilon edge */
    b->mid[i] += b->off[i];           /* next other edge */
  }
  uint32_t *oat = malloc((ns + 1) * sizeof *oat);
  if (!oat) abort();
  memcpy(oat, b->mid, (ns + 1) * sizeof *oat);
  for (size_t i = 0; i < n->n_e; i++) {
    const nedge *x = &n->e[i];
    sorted[x->kind == E_EPS ? at[x->from]++ : oat[x->from]++] = *x;
  }
  free(at);
  free(oat);
  free(n->e);
  n->e = sorted;
  n->cap_e = n->n_e ? n->n_e : 1;
  b->e = n->e;
  b->mark = calloc((size_t)n->n_st, sizeof *b->mark);
  GROW(b->tmp, b->cap_tmp, 16);
}

static void dfa_build_free(dfa_build *b) {
  free(b->off);
  free(b->mid);
  free(b->mark);
  free(b->pool);
  free(b->set_off);
  free(b->set_len);
  free(b->tab);
  free(b->stack);
  free(b->tmp);
}

di_code ga_expr_dfa(const gx *g, int32_t x, uint32_t max_states, ga *a, di_status *st) {
  memset(a, 0, sizeof *a);
  if (g->overflow) return di_errorf(st, DI_ERR_RANGE, "grammar too large (expression budget exceeded)");
  nfa n = {.max_st = max_states * 8};
  int32_t s0 = nst(&n), s1 = nst(&n);
  build(&n, g, x, s0, s1);
  di_code rc = DI_OK;
  out_buf o = {0};
  dfa_build b = {0};
  if (n.overflow) {
    rc = di_errorf(st, DI_ERR_RANGE, "pattern too large: more than %u NFA states", n.max_st);
    goto out;
  }
  for (size_t i = 0; i < n.n_e; i++)
    if (n.e[i].kind == E_CALL) {
      rc = di_errorf(st, DI_ERR_UNSUPPORTED, "expression is not regular (it calls rule '%s')", g->rules[n.e[i].rule].name);
      goto out;
    }
  dfa_build_init(&b, &n);
  ga_limits lim = {.max_dfa_states = max_states};
  rc = determinize(&b, 0, s0, s1, &o, &lim, st);
  if (rc) goto out;
  a->st = o.st;
  a->n_st = (uint32_t)o.n_st;
  a->ranges = o.r;
  a->n_ranges = (uint32_t)o.n_r;
  a->calls = o.c;
  a->n_rules = 1;
  a->rule_start = malloc(sizeof *a->rule_start);
  a->rule_start[0] = 0;
  a->rule_names = calloc(1, sizeof *a->rule_names);
  a->rule_names[0] = strdup("expr");
  memset(&o, 0, sizeof o);
out:
  free(o.st);
  free(o.r);
  free(o.c);
  dfa_build_free(&b);
  free(n.e);
  return rc;
}

di_code ga_compile(const gx *g, int32_t root, const ga_limits *lim, ga *a, di_status *st) {
  memset(a, 0, sizeof *a);
  if (g->overflow) return di_errorf(st, DI_ERR_RANGE, "grammar too large (expression budget exceeded)");
  for (size_t r = 0; r < g->n_rules; r++)
    if (g->rules[r].body < 0)
      return di_errorf(st, DI_ERR_INVALID, "rule '%s' is used but never defined", g->rules[r].name);
  if (g->n_rules > 20000) return di_errorf(st, DI_ERR_RANGE, "grammar too large: %zu rules", g->n_rules);
  nfa n = {.max_st = lim->max_nfa_states};
  int32_t *rs = malloc(sizeof *rs * g->n_rules * 2);
  for (size_t r = 0; r < g->n_rules; r++) {
    rs[2 * r] = nst(&n);
    rs[2 * r + 1] = nst(&n);
    build(&n, g, g->rules[r].body, rs[2 * r], rs[2 * r + 1]);
    if (n.overflow) break;
  }
  di_code rc = DI_OK;
  out_buf o = {0};
  dfa_build b = {0};
  if (n.overflow) {
    rc = di_errorf(st, DI_ERR_RANGE, "grammar too large: more than %u NFA states (large repetition counts?)",
                   lim->max_nfa_states);
    goto out;
  }
  dfa_build_init(&b, &n);
  a->n_rules = (uint32_t)g->n_rules;
  a->rule_start = malloc(sizeof *a->rule_start * g->n_rules);
  a->rule_names = calloc(g->n_rules, sizeof *a->rule_names);
  for (size_t r = 0; r < g->n_rules; r++) {
    a->rule_start[r] = (int32_t)o.n_st;
    a->rule_names[r] = strdup(g->rules[r].name);
    rc = determinize(&b, (int32_t)r, rs[2 * r], rs[2 * r + 1], &o, lim, st);
    if (rc) goto out;
  }
  a->st = o.st;
  a->n_st = (uint32_t)o.n_st;
  a->ranges = o.r;
  a->n_ranges = (uint32_t)o.n_r;
  a->calls = o.c;
  a->n_calls = (uint32_t)o.n_c;
  a->root = root;
  memset(&o, 0, sizeof o);
  rc = analyse(a, st);
out:
  free(o.st);
  free(o.r);
  free(o.c);
  dfa_build_free(&b);
  free(n.e);
  free(rs);
  if (rc) ga_free(a);
  return rc;
}

void ga_free(ga *a) {
  if (a->rule_names)
    for (uint32_t r = 0; r < a->n_rules; r++) free(a->rule_names[r]);
  free(a->rule_names);
  free(a->st);
  free(a->ranges);
  free(a->calls);
  free(a->rule_start);
  memset(a, 0, sizeof *a);
}
