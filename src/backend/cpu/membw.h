/* Measures the machine's read bandwidth the way decode uses it: every thread
 * streams its own slice of a buffer much larger than the caches. */
#ifndef DI_BACKEND_CPU_MEMBW_H
#define DI_BACKEND_CPU_MEMBW_H

#include <stddef.h>

/* Median GB/s (1e9 bytes/s) of `reps` passes over `bytes` with `threads`. */
double di_cpu_read_bandwidth(size_t bytes, int threads, int reps);

#endif
