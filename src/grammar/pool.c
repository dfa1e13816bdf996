/* Hash-consed stack nodes and the pushdown step (see pool.h). */
#include "grammar/pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static size_t hsh(int32_t s, int32_t p, size_t mask) {
  uint64_t h = ((uint64_t)(uint32_t)s << 32 | (uint32_t)p) * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 29) & mask;
}

static void *xre(void *p, size_t n) {
  void *q = realloc(p, n);
  if (!q && n) abort();
  return q;
}

static void node_reserve(gp *p, size_t need) {
  if (need <= p->cap) return;
  size_t nc = p->cap ? p->cap * 2 : 256;
  while (nc < need) nc *= 2;
  p->state = xre(p->state, nc * sizeof *p->state);
  p->parent = xre(p->parent, nc * sizeof *p->parent);
  p->next = xre(p->next, nc * sizeof *p->next);
  p->seen = xre(p->seen, nc * sizeof *p->seen);
  memset(p->seen + p->cap, 0, (nc - p->cap) * sizeof *p->seen);
  p->cap = nc;
}

static void rehash(gp *p, size_t hcap) {
  free(p->head);
  p->head = malloc(hcap * sizeof *p->head);
  if (!p->head) abort();
  memset(p->head, 0xff, hcap * sizeof *p->head);
  p->hcap = hcap;
  for (size_t i = 1; i < p->n; i++) { /* in id order: chain heads stay the newest */
    size_t h = hsh(p->state[i], p->parent[i], hcap - 1);
    p->next[i] = p->head[h];
    p->head[h] = (int32_t)i;
  }
}

void gp_init(gp *p) {
  memset(p, 0, sizeof *p);
  node_reserve(p, 256);
  p->state[0] = -1;
  p->parent[0] = -1;
  p->next[0] = -1;
  p->n = 1;
  rehash(p, 512);
}

void gp_free(gp *p) {
  free(p->state);
  free(p->parent);
  free(p->next);
  free(p->seen);
  free(p->head);
  memset(p, 0, sizeof *p);
}

bool gp_copy(gp *d, const gp *s) {
  memset(d, 0, sizeof *d);
  node_reserve(d, s->cap);
  memcpy(d->state, s->state, s->n * sizeof *d->state);
  memcpy(d->parent, s->parent, s->n * sizeof *d->parent);
  memcpy(d->next, s->next, s->n * sizeof *d->next);
  d->n = s->n;
  d->head = malloc(s->hcap * sizeof *d->head);
  if (!d->head) abort();
  memcpy(d->head, s->head, s->hcap * sizeof *d->head);
  d->hcap = s->hcap;
  return true;
}

int32_t gp_intern(gp *p, int32_t state, int32_t parent) {
  size_t h = hsh(state, parent, p->hcap - 1);
  for (int32_t i = p->head[h]; i >= 0; i = p->next[i])
    if (p->state[i] == state && p->parent[i] == parent) return i;
  node_reserve(p, p->n + 1);
  int32_t id = (int32_t)p->n++;
  p->state[id] = state;
  p->parent[id] = parent;
  p->seen[id] = 0;
  if (p->n * 2 > p->hcap) {
    rehash(p, p->hcap * 2);
  } else {
    p->next[id] = p->head[h];
    p->head[h] = id;
  }
  return id;
}

void gp_truncate(gp *p, size_t n) {
  while (p->n > n) {
    int32_t i = (int32_t)--p->n;
    p->head[hsh(p->state[i], p->parent[i], p->hcap - 1)] = p->next[i];
  }
}

void gset_push(gset *s, int32_t x) {
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 16;
    s->v = xre(s->v, s->cap * sizeof *s->v);
  }
  s->v[s->n++] = x;
}

void gset_free(gset *s) {
  free(s->v);
  memset(s, 0, sizeof *s);
}

/* Worklist closure; the worklist reuses out's tail beyond out->n. */
static void close_into(gp *p, const ga *a, gset *work, gset *out, bool *popped) {
  while (work->n) {
    int32_t x = work->v[--work->n];
    const ga_state *S = &a->st[p->state[x]];
    if (S->r_n) gset_push(out, x);
    if (S->c_n) {
      int32_t par = p->parent[x];
      for (uint32_t j = 0; j < S->c_n; j++) {
        const ga_call *c = &a->calls[S->c_off + j];
        /* a call in tail position returns straight to our caller: no frame,
         * so right recursion (member lists, nested values) keeps stacks short */
        const ga_state *R = &a->st[c->ret];
        int32_t ret = R->final && !R->r_n && !R->c_n ? par : gp_intern(p, c->ret, par);
        int32_t y = gp_intern(p, a->rule_start[c->rule], ret);
        if (p->seen[y] != p->stamp) {
          p->seen[y] = p->stamp;
          gset_push(work, y);
        }
      }
    }
    if (S->final) {
      int32_t par = p->parent[x];
      if (par == 0) {
        *popped = true;
      } else if (p->seen[par] != p->stamp) {
        p->seen[par] = p->stamp;
        gset_push(work, par);
      }
    }
  }
}

/* per thread: gp_step runs on many requests' threads at once. A thread
 * that ends (the server's connection threads do) frees its set through the
 * key's destructor, which runs while the thread's TLS is still there. */
static _Thread_local gset work_tls;
static _Thread_local bool work_registered;
static pthread_key_t work_key;
static pthread_once_t work_once = PTHREAD_ONCE_INIT;

static void work_release(void *w) { gset_free(w); }
static void work_key_make(void) {
  if (pthread_key_create(&work_key, work_release)) abort();
}

static gset *work_set(void) {
  if (!work_registered) {
    pthread_once(&work_once, work_key_make);
    pthread_setspecific(work_key, &work_tls);
    work_registered = true;
  }
  return &work_tls;
}

void gp_step(gp *p, const ga *a, const gset *in, uint8_t b, gset *out, bool *popped) {
  out->n = 0;
  *popped = false;
  if (++p->stamp == 0) {
    memset(p->seen, 0, p->cap * sizeof *p->seen);
    p->stamp = 1;
  }
  gset *work = work_set();
  work->n = 0;
  for (size_t i = 0; i < in->n; i++) {
    int32_t x = in->v[i];
    int32_t t = ga_step(a, p->state[x], b);
    if (t < 0) continue;
    int32_t y = gp_intern(p, t, p->parent[x]);
    if (p->seen[y] == p->stamp) continue;
    p->seen[y] = p->stamp;
    gset_push(work, y);
    close_into(p, a, work, out, popped);
  }
}

void gp_close(gp *p, const ga *a, int32_t node, gset *out, bool *popped) {
  out->n = 0;
  *popped = false;
  if (++p->stamp == 0) {
    memset(p->seen, 0, p->cap * sizeof *p->seen);
    p->stamp = 1;
  }
  gset *work = work_set();
  work->n = 0;
  p->seen[node] = p->stamp;
  gset_push(work, node);
  close_into(p, a, work, out, popped);
}
