#include "backend/cpu/scratch.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct {
  void *p[DI_SCRATCH_SLOTS];
  size_t cap[DI_SCRATCH_SLOTS];
} scratch_set;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static int g_key_ok;

static void scratch_free(void *v) {
  scratch_set *s = v;
  for (int i = 0; i < DI_SCRATCH_SLOTS; i++) free(s->p[i]);
  free(s);
}

static void scratch_init(void) { g_key_ok = pthread_key_create(&g_key, scratch_free) == 0; }

void *di_cpu_scratch(di_scratch_slot slot, size_t bytes) {
  pthread_once(&g_once, scratch_init);
  if (!g_key_ok) return NULL;
  scratch_set *s = pthread_getspecific(g_key);
  if (!s) {
    if (!(s = calloc(1, sizeof *s))) return NULL;
    if (pthread_setspecific(g_key, s)) {
      free(s);
      return NULL;
    }
  }
  if (s->cap[slot] < bytes) {
    free(s->p[slot]);
    s->cap[slot] = (bytes + 4095) / 4096 * 4096;
    if (!(s->p[slot] = aligned_alloc(64, s->cap[slot]))) s->cap[slot] = 0;
  }
  return s->p[slot];
}
