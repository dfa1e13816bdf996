#include "server/think.h"

#include <stdlib.h>
#include <string.h>

static const char OPEN[] = "<think>", CLOSE[] = "</think>";

void di_srv_think_init(di_srv_think *t, int open) {
  memset(t, 0, sizeof *t);
  t->state = open ? 1 : 0;
  t->skip_ws = open;
  t->opened = open;
}

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* Output order is always reasoning before content (the state only moves
 * forward), so one delta's pieces are gathered per kind and emitted in order. */
typedef struct run {
  char *p;
  size_t n;
} run;

static void put(di_srv_think *t, run *r, char c) {
  if (t->skip_ws && is_ws(c)) return;
  t->skip_ws = 0;
  r->p[r->n++] = c;
}

void di_srv_think_feed(di_srv_think *t, const char *s, size_t n, int final,
                       void (*emit)(void *user, int reasoning, const char *s, size_t n), void *user) {
  size_t cap = n + sizeof t->held + 1;
  char *mem = malloc(2 * cap);
  if (!mem) return;
  run rs = {mem, 0}, cs = {mem + cap, 0};
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (t->state == 2) {
      put(t, &cs, c);
      continue;
    }
    const char *tag = t->state == 0 ? OPEN : CLOSE;
    size_t tl = strlen(tag);
    t->held[t->n_held++] = c;
    while (t->n_held && memcmp(t->held, tag, t->n_held) != 0) {
      if (t->state == 0) { /* output does not open with <think>: all content */
        for (size_t j = 0; j < t->n_held; j++) put(t, &cs, t->held[j]);
        t->n_held = 0;
        t->state = 2;
        break;
      }
      put(t, &rs, t->held[0]);
      memmove(t->held, t->held + 1, --t->n_held);
    }
    if (t->n_held == tl) {
      t->n_held = 0;
      if (t->state == 0) t->opened = 1;
      t->state = t->state == 0 ? 1 : 2;
      t->skip_ws = 1;
    }
  }
  if (final && t->n_held) {
    for (size_t j = 0; j < t->n_held; j++) put(t, t->state == 1 ? &rs : &cs, t->held[j]);
    t->n_held = 0;
  }
  if (rs.n) emit(user, 1, rs.p, rs.n);
  if (cs.n) emit(user, 0, cs.p, cs.n);
  free(mem);
}
