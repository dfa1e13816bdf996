/* Per-thread scratch buffers: kept between calls and grown as needed, freed
 * at thread exit. For work split across a thread pool whose size per call
 * varies (a kernel's staging panels, one token's attention keys): no
 * allocation per call and no shared buffer to size for every thread.
 *
 * Each user declares one set with a fixed number of slots:
 *   static di_tscratch g_s = DI_TSCRATCH_INIT;
 *   float *buf = di_tscratch_get(&g_s, SLOT, bytes);   (NULL: out of memory) */
#ifndef DI_UTIL_TSCRATCH_H
#define DI_UTIL_TSCRATCH_H

#include <pthread.h>
#include <stddef.h>

#define DI_TSCRATCH_SLOTS 5

typedef struct di_tscratch {
  pthread_once_t once;
  pthread_key_t key;
  int key_ok;
} di_tscratch;

#define DI_TSCRATCH_INIT {PTHREAD_ONCE_INIT, 0, 0}

/* At least bytes of 64-byte aligned memory owned by the calling thread in
 * slot (< DI_TSCRATCH_SLOTS) of set s: the same buffer as its previous call
 * for that slot when large enough, so earlier contents may remain; NULL if
 * memory runs out. */
void *di_tscratch_get(di_tscratch *s, int slot, size_t bytes);

#endif
