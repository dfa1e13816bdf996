#include "util/mem.h"

#include <stdlib.h>
#include <sys/mman.h>

#define DI_HUGE_MIN (4u << 20)

void *di_alloc_aligned(size_t size, bool huge) {
  if (size == 0) size = 1;
  if (size >= DI_HUGE_MIN) {
    /* Large blocks are anonymous mappings (page-aligned, returned to the OS on
     * free); with `huge` THP may back them with 2 MiB pages, which cuts TLB
     * misses when streaming weights. */
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    if (huge) madvise(p, size, MADV_HUGEPAGE);
#endif
    return p;
  }
  void *p = NULL;
  if (posix_memalign(&p, 64, size) != 0) return NULL;
  return p;
}

void di_free_aligned(void *p, size_t size) {
  if (!p) return;
  if (size == 0) size = 1;
  /* Must mirror the choice made in di_alloc_aligned. */
  if (size >= DI_HUGE_MIN) {
    munmap(p, size);
    return;
  }
  free(p);
}
