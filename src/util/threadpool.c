#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "util/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
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

/* A task's nth parts are claimed, not assigned: the caller takes part 0 and
 * then, like every worker, claims the next unclaimed part until none is left.
 * So the caller never waits for a worker that has not started (asleep, or
 * preempted on a loaded machine): it runs that part itself, and waits only
 * for parts a worker is running. A part's work depends on its index alone,
 * never on the thread that runs it, so the results are the same bits. */
struct di_threadpool {
  int n;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* task generation << 32 | its parts << 16 | next part to claim: one word,
   * so a claim on a finished task's generation can never read the next
   * task's part count (a worker late for task g would otherwise claim parts
   * of g+1 before it is published, and run them twice) */
  _Atomic uint64_t state;
  atomic_int done;        /* parts of the current task finished */
  atomic_int sleepers;    /* workers blocked on cv: a publish wakes them only if any */
  atomic_bool quit;
  di_task_fn fn;
  void *ctx;
};

int di_cpu_count(void) {
  /* the CPUs this process may run on (taskset, cgroups, mpirun's binding of a rank) */
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

#define MAX_PARTS 0xffff

static inline uint32_t gen_of(uint64_t s) { return (uint32_t)(s >> 32); }
static inline int parts_of(uint64_t s) { return (int)(s >> 16 & MAX_PARTS); }
static inline int next_of(uint64_t s) { return (int)(s & MAX_PARTS); }

/* The next part of task `gen` (of *parts), or -1 when all are claimed or the task is over. */
static int claim(di_threadpool *tp, uint32_t gen, int *parts) {
  uint64_t s = atomic_load_explicit(&tp->state, memory_order_acquire);
  for (;;) {
    if (gen_of(s) != gen || next_of(s) >= parts_of(s)) return -1;
    if (atomic_compare_exchange_weak_explicit(&tp->state, &s, s + 1, memory_order_acquire, memory_order_acquire)) {
      *parts = parts_of(s);
      return next_of(s);
    }
  }
}

/* Runs parts of task `gen` until none is left; the parts run. */
static int run_parts(di_threadpool *tp, uint32_t gen) {
  int ran = 0, parts;
  for (int part; (part = claim(tp, gen, &parts)) >= 0; ran++) tp->fn(tp->ctx, part, parts);
  return ran;
}

static void *worker(void *p) {
  di_threadpool *tp = p;
  uint32_t seen = 0;
  for (;;) {
    uint32_t g;
    int spins = 0;
    while ((g = gen_of(atomic_load_explicit(&tp->state, memory_order_acquire))) == seen &&
           !atomic_load_explicit(&tp->quit, memory_order_relaxed)) {
      if (++spins < SPIN_ITERS) {
        cpu_relax();
        continue;
      }
      /* seq_cst with the publish in di_threadpool_run: either it sees this
       * sleeper and wakes it, or this load sees its generation */
      atomic_fetch_add(&tp->sleepers, 1);
      pthread_mutex_lock(&tp->mu);
      while (gen_of(atomic_load(&tp->state)) == seen && !atomic_load(&tp->quit)) pthread_cond_wait(&tp->cv, &tp->mu);
      pthread_mutex_unlock(&tp->mu);
      atomic_fetch_sub(&tp->sleepers, 1);
      spins = 0;
    }
    if (atomic_load(&tp->quit)) return NULL;
    seen = g;
    int ran = run_parts(tp, g);
    if (ran) atomic_fetch_add_explicit(&tp->done, ran, memory_order_release);
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
    if (pthread_create(&tp->threads[i], NULL, worker, tp) != 0) {
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

void di_threadpool_run_parts(di_threadpool *tp, di_task_fn fn, void *ctx, int parts) {
  if (parts > MAX_PARTS) parts = MAX_PARTS; /* any count is a valid split */
  if (tp->n == 1 || parts <= 1) {
    for (int i = 0; i < parts; i++) fn(ctx, i, parts);
    return;
  }
  tp->fn = fn;
  tp->ctx = ctx;
  atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
  const uint32_t gen = gen_of(atomic_load_explicit(&tp->state, memory_order_relaxed)) + 1;
  atomic_store(&tp->state, (uint64_t)gen << 32 | (uint64_t)parts << 16 | 1); /* part 0 is the caller's */
  if (atomic_load(&tp->sleepers) > 0) {
    pthread_mutex_lock(&tp->mu);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
  }
  fn(ctx, 0, parts);
  const int ran = 1 + run_parts(tp, gen);
  for (int spins = 0; atomic_load_explicit(&tp->done, memory_order_acquire) + ran < parts; spins++) {
    if (spins < SPIN_ITERS) cpu_relax();
    else sched_yield();
  }
}

void di_threadpool_run(di_threadpool *tp, di_task_fn fn, void *ctx) { di_threadpool_run_parts(tp, fn, ctx, tp->n); }
