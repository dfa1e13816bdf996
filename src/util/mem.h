/* Aligned allocations for weights, KV and scratch (64-byte aligned; large
 * ones are advised to use transparent huge pages). */
#ifndef DI_UTIL_MEM_H
#define DI_UTIL_MEM_H

#include <stdbool.h>
#include <stddef.h>

void *di_alloc_aligned(size_t size, bool huge);
void di_free_aligned(void *p, size_t size);

#endif
