/* Products, emptiness and embedding of call-free DFAs (see fsa.h). */
#include "grammar/fsa.h"

#include <stdlib.h>
#include <string.h>

/* pair (i, j) -> product state; j = -1 is b's dead state */
typedef struct pmap {
  uint64_t *key;
  int32_t *val;
  size_t cap, n;
} pmap;

static uint64_t pkey(int32_t i, int32_t j) { return ((uint64_t)(uint32_t)(i + 1) << 32) | (uint32_t)(j + 1); }
static size_t phash(uint64_t k, size_t cap) { return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1); }

static void pmap_grow(pmap *m) {
  size_t nc = m->cap ? m->cap * 2 : 1024;
  uint64_t *k = calloc(nc, sizeof *k);
  int32_t *v = malloc(nc * sizeof *v);
  if (!k || !v) abort();
  for (size_t i = 0; i < m->cap; i++)
    if (m->key[i]) {
      size_t h = phash(m->key[i], nc);
      while (k[h]) h = (h + 1) & (nc - 1);
      k[h] = m->key[i];
      v[h] = m->val[i];
    }
  free(m->key);
  free(m->val);
  m->key = k;
  m->val = v;
  m->cap = nc;
}

/* The id of (i, j); a new one (= m->n before the call) is queued by the caller. */
static int32_t pmap_get(pmap *m, int32_t i, int32_t j, bool *is_new) {
  if ((m->n + 1) * 2 > m->cap) pmap_grow(m);
  uint64_t k = pkey(i, j);
  size_t h = phash(k, m->cap);
  while (m->key[h]) {
    if (m->key[h] == k) {
      *is_new = false;
      return m->val[h];
    }
    h = (h + 1) & (m->cap - 1);
  }
  m->key[h] = k;
  m->val[h] = (int32_t)m->n;
  *is_new = true;
  return (int32_t)m->n++;
}

static int32_t target(const ga *a, int32_t s, uint8_t b) { return s < 0 ? -1 : ga_step(a, s, b); }

di_code fsa_product(const ga *a, const ga *b, fsa_op op, uint32_t max_states, ga *out, di_status *st) {
  memset(out, 0, sizeof *out);
  pmap m = {0};
  int32_t(*q)[2] = NULL; /* per product state: its pair */
  size_t cap_q = 0, cap_st = 0, cap_r = 0;
  bool nw;
  di_code rc = DI_OK;
  pmap_get(&m, 0, 0, &nw);
  GROW(q, cap_q, 1);
  q[0][0] = q[0][1] = 0;
  for (size_t id = 0; id < m.n; id++) {
    if (id >= max_states) {
      rc = di_errorf(st, DI_ERR_RANGE, "pattern too large: more than %u automaton states", max_states);
      break;
    }
    int32_t i = q[id][0], j = q[id][1];
    GROW(out->st, cap_st, id + 1);
    ga_state *S = &out->st[id];
    bool fa = a->st[i].final, fb = j >= 0 && b->st[j].final;
    *S = (ga_state){.rule = 0, .r_off = out->n_ranges, .final = op == FSA_AND ? fa && fb : fa && !fb};
    bool bound[257] = {0};
    const ga_state *A = &a->st[i];
    for (uint32_t k = 0; k < A->r_n; k++) bound[a->ranges[A->r_off + k].lo] = bound[a->ranges[A->r_off + k].hi + 1] = true;
    if (j >= 0) {
      const ga_state *B = &b->st[j];
      for (uint32_t k = 0; k < B->r_n; k++) bound[b->ranges[B->r_off + k].lo] = bound[b->ranges[B->r_off + k].hi + 1] = true;
    }
    for (int lo = 0; lo < 256;) {
      int hi = lo + 1;
      while (hi < 256 && !bound[hi]) hi++;
      int32_t ta = target(a, i, (uint8_t)lo), tb = target(b, j, (uint8_t)lo);
      if (ta >= 0 && (tb >= 0 || op == FSA_AND_NOT)) {
        int32_t to = pmap_get(&m, ta, tb, &nw);
        if (nw) {
          GROW(q, cap_q, m.n);
          q[to][0] = ta;
          q[to][1] = tb;
        }
        ga_range *last = out->n_ranges > out->st[id].r_off ? &out->ranges[out->n_ranges - 1] : NULL;
        if (last && last->to == to && last->hi + 1 == lo) {
          last->hi = (uint8_t)(hi - 1);
        } else {
          GROW(out->ranges, cap_r, out->n_ranges + 1);
          out->ranges[out->n_ranges++] = (ga_range){.lo = (uint8_t)lo, .hi = (uint8_t)(hi - 1), .to = to};
        }
      }
      lo = hi;
    }
    out->st[id].r_n = out->n_ranges - out->st[id].r_off;
    out->n_st = (uint32_t)id + 1;
  }
  free(m.key);
  free(m.val);
  free(q);
  if (rc) {
    ga_free(out);
    return rc;
  }
  out->n_rules = 1;
  out->rule_start = malloc(sizeof *out->rule_start);
  out->rule_start[0] = 0;
  out->rule_names = calloc(1, sizeof *out->rule_names);
  out->rule_names[0] = strdup("product");
  return DI_OK;
}

/* live[s]: a final state is reachable from s */
static bool *live_states(const ga *a) {
  bool *live = calloc(a->n_st ? a->n_st : 1, 1);
  uint32_t *cnt = calloc((size_t)a->n_st + 1, sizeof *cnt), *src = malloc(sizeof *src * (a->n_ranges + 1));
  int32_t *stack = malloc(sizeof *stack * (a->n_st + 1));
  if (!live || !cnt || !src || !stack) abort();
  /* reverse edges, CSR by target */
  for (uint32_t s = 0; s < a->n_st; s++)
    for (uint32_t k = 0; k < a->st[s].r_n; k++) cnt[a->ranges[a->st[s].r_off + k].to + 1]++;
  for (uint32_t s = 0; s < a->n_st; s++) cnt[s + 1] += cnt[s];
  uint32_t *fill = malloc(sizeof *fill * (a->n_st + 1));
  memcpy(fill, cnt, sizeof *fill * (a->n_st + 1));
  for (uint32_t s = 0; s < a->n_st; s++)
    for (uint32_t k = 0; k < a->st[s].r_n; k++) src[fill[a->ranges[a->st[s].r_off + k].to]++] = s;
  size_t sp = 0;
  for (uint32_t s = 0; s < a->n_st; s++)
    if (a->st[s].final) live[s] = true, stack[sp++] = (int32_t)s;
  while (sp) {
    int32_t t = stack[--sp];
    for (uint32_t k = cnt[t]; k < cnt[t + 1]; k++)
      if (!live[src[k]]) live[src[k]] = true, stack[sp++] = (int32_t)src[k];
  }
  free(cnt);
  free(src);
  free(stack);
  free(fill);
  return live;
}

bool fsa_empty(const ga *a) {
  if (a->n_st == 0) return true;
  bool *live = live_states(a);
  bool e = !live[0];
  free(live);
  return e;
}

bool fsa_accepts(const ga *a, const char *s, size_t n) {
  int32_t q = a->n_st ? 0 : -1;
  for (size_t i = 0; i < n && q >= 0; i++) q = ga_step(a, q, (uint8_t)s[i]);
  return q >= 0 && a->st[q].final;
}

int32_t fsa_to_gx(gx *g, const ga *a) {
  if (fsa_empty(a)) return GX_NOTHING;
  bool *live = live_states(a);
  int32_t *id = malloc(sizeof *id * a->n_st);
  uint32_t n = 0, ne = 0;
  for (uint32_t s = 0; s < a->n_st; s++) id[s] = live[s] ? (int32_t)n++ : -1;
  for (uint32_t s = 0; s < a->n_st; s++)
    if (live[s])
      for (uint32_t k = 0; k < a->st[s].r_n; k++) ne += live[a->ranges[a->st[s].r_off + k].to];
  gx_aut x = {.n_st = n, .off = malloc(sizeof *x.off * (n + 1)), .e = malloc(sizeof *x.e * (ne + 1)),
              .final = malloc(n)};
  if (!x.off || !x.e || !x.final) abort();
  uint32_t k2 = 0;
  for (uint32_t s = 0; s < a->n_st; s++) {
    if (!live[s]) continue;
    x.off[id[s]] = k2;
    x.final[id[s]] = a->st[s].final;
    for (uint32_t k = 0; k < a->st[s].r_n; k++) {
      const ga_range *r = &a->ranges[a->st[s].r_off + k];
      if (live[r->to]) x.e[k2++] = (gx_aut_edge){.lo = r->lo, .hi = r->hi, .to = id[r->to]};
    }
  }
  x.off[n] = k2;
  free(live);
  free(id);
  return gx_aut_take(g, &x);
}
