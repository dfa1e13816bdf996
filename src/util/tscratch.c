#include "util/tscratch.h"

#include <stdlib.h>

typedef struct {
  void *p[DI_TSCRATCH_SLOTS];
  size_t cap[DI_TSCRATCH_SLOTS];
} slots;

static void slots_free(void *v) {
  slots *s = v;
  for (int i = 0; i < DI_TSCRATCH_SLOTS; i++) free(s->p[i]);
  free(s);
}

/* pthread_once takes no argument: the set being initialised is handed over
 * through this thread-local (every caller of one set's once runs the same code). */
static _Thread_local di_tscratch *g_init;

static void key_init(void) { g_init->key_ok = pthread_key_create(&g_init->key, slots_free) == 0; }

void *di_tscratch_get(di_tscratch *ts, int slot, size_t bytes) {
  g_init = ts;
  pthread_once(&ts->once, key_init);
  if (!ts->key_ok || slot < 0 || slot >= DI_TSCRATCH_SLOTS) return NULL;
  slots *s = pthread_getspecific(ts->key);
  if (!s) {
    if (!(s = calloc(1, sizeof *s))) return NULL;
    if (pthread_setspecific(ts->key, s)) {
      free(s);
      return NULL;
    }
  }
  if (s->cap[slot] < bytes) {
    /* at least a quarter more: buffers that grow with the context (a decode
     * token's keys) are then replaced, and their pages faulted in afresh,
     * every few hundred steps rather than every few */
    const size_t grown = s->cap[slot] + s->cap[slot] / 4;
    free(s->p[slot]);
    s->cap[slot] = ((bytes > grown ? bytes : grown) + 4095) / 4096 * 4096;
    if (!(s->p[slot] = aligned_alloc(64, s->cap[slot]))) s->cap[slot] = 0;
  }
  return s->p[slot];
}
