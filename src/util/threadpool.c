#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "util/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

/* Spin about a few hundred microseconds before sleeping: long enough to catch
 * the next op of a decode step, short enough not to burn a core that another
 * process (or an oversubscribed machine) needs. */
#define SPIN_ITERS 20000

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

struct di_threadpool {
  int n;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_uint gen;     /* bumped to publish a task */
  atomic_int pending;  /* workers still running the current task */
  atomic_bool quit;
  di_task_fn fn;
  void *ctx;
};

typedef struct worker_arg {
  di_threadpool *tp;
  int ith;
} worker_arg;

int di_cpu_count(void) {
  /* the CPUs this process may run on (taskset, cgroups, mpirun's binding of a rank) */
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static void *worker(void *p) {
  worker_arg *a = p;
  di_threadpool *tp = a->tp;
  int ith = a->ith;
  free(a);
  unsigned seen = 0;
  for (;;) {
    unsigned g;
    int spins = 0;
    while ((g = atomic_load_explicit(&tp->gen, memory_order_acquire)) == seen && !atomic_load(&tp->quit)) {
      if (++spins < SPIN_ITERS) {
        cpu_relax();
        continue;
      }
      pthread_mutex_lock(&tp->mu);
      while (atomic_load(&tp->gen) == seen && !atomic_load(&tp->quit)) pthread_cond_wait(&tp->cv, &tp->mu);
      pthread_mutex_unlock(&tp->mu);
    }
    if (atomic_load(&tp->quit)) return NULL;
    seen = g;
    tp->fn(tp->ctx, ith, tp->n);
    atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_acq_rel);
  }
}

di_threadpool *di_threadpool_create(int n_threads) {
  if (n_threads <= 0) n_threads = di_cpu_count();
  di_threadpool *tp = calloc(1, sizeof *tp);
  if (!tp) return NULL;
  tp->n = n_threads;
  pthread_mutex_init(&tp->mu, NULL);
  pthread_cond_init(&tp->cv, NULL);
  tp->threads = calloc((size_t)n_threads, sizeof *tp->threads);
  if (!tp->threads) {
    free(tp);
    return NULL;
  }
  for (int i = 1; i < n_threads; i++) {
    worker_arg *a = malloc(sizeof *a);
    a->tp = tp;
    a->ith = i;
    if (pthread_create(&tp->threads[i], NULL, worker, a) != 0) {
      free(a);
      tp->n = i; /* run with the threads we got */
      break;
    }
  }
  return tp;
}

void di_threadpool_free(di_threadpool *tp) {
  if (!tp) return;
  pthread_mutex_lock(&tp->mu);
  atomic_store(&tp->quit, true);
  pthread_cond_broadcast(&tp->cv);
  pthread_mutex_unlock(&tp->mu);
  for (int i = 1; i < tp->n; i++) pthread_join(tp->threads[i], NULL);
  pthread_mutex_destroy(&tp->mu);
  pthread_cond_destroy(&tp->cv);
  free(tp->threads);
  free(tp);
}

int di_threadpool_size(const di_threadpool *tp) { return tp->n; }

void di_threadpool_run(di_threadpool *tp, di_task_fn fn, void *ctx) {
  if (tp->n == 1) {
    fn(ctx, 0, 1);
    return;
  }
  tp->fn = fn;
  tp->ctx = ctx;
  atomic_store(&tp->pending, tp->n - 1);
  pthread_mutex_lock(&tp->mu);
  atomic_fetch_add_explicit(&tp->gen, 1, memory_order_release);
  pthread_cond_broadcast(&tp->cv);
  pthread_mutex_unlock(&tp->mu);
  fn(ctx, 0, tp->n);
  for (int spins = 0; atomic_load_explicit(&tp->pending, memory_order_acquire) > 0; spins++) {
    if (spins < SPIN_ITERS) cpu_relax();
    else sched_yield();
  }
}
