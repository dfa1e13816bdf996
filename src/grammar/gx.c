/* Internal grammar builder (see gx.h) and UTF-8 encoding of code point sets. */
#include "grammar/gx.h"
#include "tokenizer/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *grow(void *p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return p;
  size_t nc = *cap ? *cap * 2 : 64;
  while (nc < need) nc *= 2;
  void *q = realloc(p, nc * elem);
  if (!q) abort(); /* allocation failure in a bounded builder: out of memory is fatal */
  *cap = nc;
  return q;
}

static int32_t node_new(gx *g, gx_node n) {
  if (g->n_nodes + g->n_kids + g->aut_cost >= g->max_nodes) {
    g->overflow = true;
    return GX_NOTHING;
  }
  g->nodes = grow(g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes);
  g->nodes[g->n_nodes] = n;
  return (int32_t)g->n_nodes++;
}

void gx_init(gx *g, size_t max_nodes) {
  memset(g, 0, sizeof *g);
  g->max_nodes = max_nodes;
  node_new(g, (gx_node){.kind = GXK_NOTHING});
  node_new(g, (gx_node){.kind = GXK_EMPTY});
}

void gx_free(gx *g) {
  for (size_t i = 0; i < g->n_auts; i++) {
    free(g->auts[i].off);
    free(g->auts[i].e);
    free(g->auts[i].final);
  }
  free(g->auts);
  free(g->nodes);
  free(g->kids);
  free(g->rules);
  memset(g, 0, sizeof *g);
}

int32_t gx_rule_new(gx *g, const char *name) {
  g->rules = grow(g->rules, &g->cap_rules, g->n_rules + 1, sizeof *g->rules);
  gx_rule *r = &g->rules[g->n_rules];
  snprintf(r->name, sizeof r->name, "%s", name ? name : "");
  r->body = -1;
  return (int32_t)g->n_rules++;
}

void gx_rule_define(gx *g, int32_t rule, int32_t body) { g->rules[rule].body = body; }

int32_t gx_ref(gx *g, int32_t rule) { return node_new(g, (gx_node){.kind = GXK_REF, .ref = rule}); }

int32_t gx_bytes(gx *g, uint8_t lo, uint8_t hi) {
  if (lo > hi) return GX_NOTHING;
  return node_new(g, (gx_node){.kind = GXK_BYTES, .lo = lo, .hi = hi});
}

/* Appends kids; -1 past the budget. */
static int32_t push_kids(gx *g, const int32_t *items, size_t n) {
  if (g->n_nodes + g->n_kids + g->aut_cost + n >= g->max_nodes) {
    g->overflow = true;
    return -1;
  }
  g->kids = grow(g->kids, &g->cap_kids, g->n_kids + n, sizeof *g->kids);
  int32_t off = (int32_t)g->n_kids;
  memcpy(g->kids + off, items, n * sizeof *items);
  g->n_kids += n;
  return off;
}

static int32_t nary(gx *g, gx_kind kind, const int32_t *items, size_t n) {
  int32_t off = push_kids(g, items, n);
  if (off < 0) return GX_NOTHING;
  return node_new(g, (gx_node){.kind = (uint8_t)kind, .kid_off = off, .nkids = (int32_t)n});
}

int32_t gx_seq(gx *g, const int32_t *items, size_t n) {
  int32_t buf[64], *keep = n <= 64 ? buf : malloc(n * sizeof *keep);
  size_t k = 0;
  int32_t r;
  for (size_t i = 0; i < n; i++) {
    if (items[i] == GX_NOTHING) {
      k = 0;
      r = GX_NOTHING;
      goto done;
    }
    if (items[i] != GX_EMPTY) keep[k++] = items[i];
  }
  r = k == 0 ? GX_EMPTY : k == 1 ? keep[0] : nary(g, GXK_SEQ, keep, k);
done:
  if (keep != buf) free(keep);
  return r;
}

int32_t gx_alt(gx *g, const int32_t *items, size_t n) {
  int32_t buf[64], *keep = n <= 64 ? buf : malloc(n * sizeof *keep);
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (items[i] != GX_NOTHING) keep[k++] = items[i];
  int32_t r = k == 0 ? GX_NOTHING : k == 1 ? keep[0] : nary(g, GXK_ALT, keep, k);
  if (keep != buf) free(keep);
  return r;
}

int32_t gx_lit(gx *g, const char *s, size_t n) {
  if (n == 0) return GX_EMPTY;
  int32_t buf[64] = {0}, *it = n <= 64 ? buf : malloc(n * sizeof *it);
  for (size_t i = 0; i < n; i++) it[i] = gx_bytes(g, (uint8_t)s[i], (uint8_t)s[i]);
  int32_t r = gx_seq(g, it, n);
  if (it != buf) free(it);
  return r;
}

int32_t gx_str(gx *g, const char *s) { return gx_lit(g, s, strlen(s)); }
int32_t gx_seq2(gx *g, int32_t a, int32_t b) { return gx_seq(g, (int32_t[]){a, b}, 2); }
int32_t gx_seq3(gx *g, int32_t a, int32_t b, int32_t c) { return gx_seq(g, (int32_t[]){a, b, c}, 3); }
int32_t gx_alt2(gx *g, int32_t a, int32_t b) { return gx_alt(g, (int32_t[]){a, b}, 2); }

int32_t gx_rep(gx *g, int32_t e, int32_t min, int32_t max) {
  if (max >= 0 && max < min) return GX_NOTHING;
  if (max == 0) return GX_EMPTY;
  if (e == GX_EMPTY) return GX_EMPTY;
  if (e == GX_NOTHING) return min == 0 ? GX_EMPTY : GX_NOTHING;
  if (min == 1 && max == 1) return e;
  int32_t off = push_kids(g, &e, 1);
  if (off < 0) return GX_NOTHING;
  return node_new(g, (gx_node){.kind = GXK_REP, .min = min, .max = max, .kid_off = off, .nkids = 1});
}
int32_t gx_star(gx *g, int32_t e) { return gx_rep(g, e, 0, -1); }
int32_t gx_plus(gx *g, int32_t e) { return gx_rep(g, e, 1, -1); }
int32_t gx_opt(gx *g, int32_t e) { return gx_rep(g, e, 0, 1); }

int32_t gx_aut_take(gx *g, gx_aut *a) {
  size_t ne = a->n_st ? a->off[a->n_st] : 0;
  if (a->n_st == 0 || g->n_nodes + g->n_kids + g->aut_cost + ne + a->n_st >= g->max_nodes) {
    if (a->n_st) g->overflow = true;
    free(a->off);
    free(a->e);
    free(a->final);
    memset(a, 0, sizeof *a);
    return GX_NOTHING;
  }
  g->aut_cost += ne + a->n_st;
  g->auts = grow(g->auts, &g->cap_auts, g->n_auts + 1, sizeof *g->auts);
  g->auts[g->n_auts] = *a;
  memset(a, 0, sizeof *a);
  return node_new(g, (gx_node){.kind = GXK_AUT, .ref = (int32_t)g->n_auts++});
}

/* ---- code point sets ---- */

void gx_cpset_add(gx_cpset *s, uint32_t lo, uint32_t hi) {
  if (lo > hi) return;
  s->r = grow(s->r, &s->cap, s->n + 1, sizeof *s->r);
  s->r[s->n][0] = lo;
  s->r[s->n][1] = hi;
  s->n++;
}

static int cmp_range(const void *a, const void *b) {
  const uint32_t *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

void gx_cpset_normalize(gx_cpset *s) {
  if (s->n < 2) return;
  qsort(s->r, s->n, sizeof *s->r, cmp_range);
  size_t k = 0;
  for (size_t i = 1; i < s->n; i++) {
    if (s->r[i][0] <= s->r[k][1] + 1) {
      if (s->r[i][1] > s->r[k][1]) s->r[k][1] = s->r[i][1];
    } else {
      k++;
      s->r[k][0] = s->r[i][0];
      s->r[k][1] = s->r[i][1];
    }
  }
  s->n = k + 1;
}

void gx_cpset_negate(gx_cpset *s) {
  gx_cpset_normalize(s);
  gx_cpset out = {0};
  uint32_t next = 0;
  for (size_t i = 0; i < s->n; i++) {
    if (s->r[i][0] > next) gx_cpset_add(&out, next, s->r[i][0] - 1);
    next = s->r[i][1] + 1;
  }
  if (next <= 0x10FFFF) gx_cpset_add(&out, next, 0x10FFFF);
  free(s->r);
  *s = out;
}

void gx_cpset_free(gx_cpset *s) {
  free(s->r);
  memset(s, 0, sizeof *s);
}

/* The tokenizer's encoder: one UTF-8 encoder in the project. */
size_t gx_utf8_encode(uint32_t cp, char out[4]) { return (size_t)di_utf8_encode(cp, out); }

static int utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

/* [lo, hi] with the same encoded length: split until each piece is a
 * product of per-byte ranges (the classic utf8-ranges construction). */
static void utf8_same_len(gx *g, uint32_t lo, uint32_t hi, int32_t **alts, size_t *n, size_t *cap) {
  int len = utf8_len(lo);
  for (int i = 1; i < len; i++) {
    uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_same_len(g, lo, lo | m, alts, n, cap);
        utf8_same_len(g, (lo | m) + 1, hi, alts, n, cap);
        return;
      }
      if ((hi & m) != m) {
        utf8_same_len(g, lo, (hi & ~m) - 1, alts, n, cap);
        utf8_same_len(g, hi & ~m, hi, alts, n, cap);
        return;
      }
    }
  }
  char a[4], b[4];
  gx_utf8_encode(lo, a);
  gx_utf8_encode(hi, b);
  int32_t seq[4];
  for (int i = 0; i < len; i++) seq[i] = gx_bytes(g, (uint8_t)a[i], (uint8_t)b[i]);
  *alts = grow(*alts, cap, *n + 1, sizeof **alts);
  (*alts)[(*n)++] = gx_seq(g, seq, (size_t)len);
}

static void utf8_any(gx *g, uint32_t lo, uint32_t hi, int32_t **alts, size_t *n, size_t *cap) {
  static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  if (hi > 0x10FFFF) hi = 0x10FFFF;
  if (lo <= 0xDFFF && hi >= 0xD800) { /* surrogates have no UTF-8 form */
    if (lo < 0xD800) utf8_any(g, lo, 0xD7FF, alts, n, cap);
    if (hi > 0xDFFF) utf8_any(g, 0xE000, hi, alts, n, cap);
    return;
  }
  for (int b = 0; b < 4 && lo <= hi; b++) {
    if (lo > bounds[b]) continue;
    uint32_t top = hi < bounds[b] ? hi : bounds[b];
    utf8_same_len(g, lo, top, alts, n, cap);
    lo = top + 1;
  }
}

int32_t gx_utf8_range(gx *g, uint32_t lo, uint32_t hi) {
  int32_t *alts = NULL;
  size_t n = 0, cap = 0;
  if (lo <= hi) utf8_any(g, lo, hi, &alts, &n, &cap);
  int32_t r = gx_alt(g, alts, n);
  free(alts);
  return r;
}

int32_t gx_utf8_class(gx *g, const gx_cpset *s) {
  int32_t *alts = NULL;
  size_t n = 0, cap = 0;
  for (size_t i = 0; i < s->n; i++) utf8_any(g, s->r[i][0], s->r[i][1], &alts, &n, &cap);
  int32_t r = gx_alt(g, alts, n);
  free(alts);
  return r;
}
