/* A fixed pool of worker threads that run one parallel task at a time.
 * Workers spin briefly between tasks (decode issues dozens of small
 * parallel ops per token) and then sleep on a condition variable. A task's
 * parts are claimed by whichever thread is free (threadpool.c), so a part's
 * work must depend on its index alone, never on the thread running it. */
#ifndef DI_UTIL_THREADPOOL_H
#define DI_UTIL_THREADPOOL_H

typedef struct di_threadpool di_threadpool;
typedef void (*di_task_fn)(void *ctx, int ith, int nth);

/* n_threads includes the calling thread; <= 0 means the number of cores. */
di_threadpool *di_threadpool_create(int n_threads);
void di_threadpool_free(di_threadpool *tp);
int di_threadpool_size(const di_threadpool *tp);
/* Runs fn(ctx, ith, nth) for ith = 0..nth-1 (nth = the pool's size; part 0
 * on the caller, any other part on a worker or, if none has taken it by
 * then, on the caller too) and waits for all of them. */
void di_threadpool_run(di_threadpool *tp, di_task_fn fn, void *ctx);
/* The same with nth = parts (any count: more parts than threads balance
 * uneven progress, since a free thread takes the next one; 1 runs inline). */
void di_threadpool_run_parts(di_threadpool *tp, di_task_fn fn, void *ctx, int parts);
int di_cpu_count(void);

#endif
