/* The thread pool (util/threadpool.c): a task's parts are claimed by whichever
 * thread is free. Checked:
 * - every part of every task runs exactly once, with its own index and the
 *   task's part count, for pools of 1-4 threads and 1-37 parts, thousands of
 *   tasks back to back (workers spinning) and after pauses long enough that
 *   the workers fall asleep (a publish must wake them);
 * - the workers take parts while the caller is inside part 0 (a part 0 that
 *   waits for all the others completes), and a part that waits for part 0
 *   completes whichever thread claims it.
 * Races (a late worker claiming the next task's parts before it is
 * published) show far more surely under ThreadSanitizer: gcc -O1 -g
 * -fsanitize=thread -Isrc -Iinclude -Itests/unit tests/unit/test_threadpool.c
 * src/util/threadpool.c -lpthread, run a dozen times. */
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "check.h"
#include "util/threadpool.h"

#define MAXP 64

typedef struct count_task {
  atomic_int hits[MAXP];
  atomic_int bad_nth;
  int parts;
} count_task;

static void count_run(void *p, int ith, int nth) {
  count_task *t = p;
  if (nth != t->parts || ith < 0 || ith >= nth) atomic_fetch_add(&t->bad_nth, 1);
  else atomic_fetch_add(&t->hits[ith], 1);
}

static bool all_once(count_task *t) {
  for (int i = 0; i < t->parts; i++)
    if (atomic_load(&t->hits[i]) != 1) return false;
  return atomic_load(&t->bad_nth) == 0;
}

static void reset(count_task *t, int parts) {
  for (int i = 0; i < MAXP; i++) atomic_store(&t->hits[i], 0);
  atomic_store(&t->bad_nth, 0);
  t->parts = parts;
}

/* part 0 waits until the others have all run; part 1 waits until part 0 is done */
typedef struct order_task {
  atomic_int done;
  int parts;
  bool zero_waits;
} order_task;

static void order_run(void *p, int ith, int nth) {
  order_task *t = p;
  (void)nth;
  if (t->zero_waits && ith == 0)
    while (atomic_load(&t->done) < t->parts - 1) {
    }
  if (!t->zero_waits && ith == 1)
    while (atomic_load(&t->done) < 1) {
    }
  atomic_fetch_add(&t->done, 1);
}

int main(void) {
  static count_task t;
  for (int n = 1; n <= 4; n++) {
    di_threadpool *tp = di_threadpool_create(n);
    CHECK(tp && di_threadpool_size(tp) == n);
    if (!tp) continue;
    int bad = 0;
    for (int it = 0; it < 4000; it++) { /* back to back: the workers spin between tasks */
      const int parts = 1 + it % 37;
      reset(&t, parts);
      di_threadpool_run_parts(tp, count_run, &t, parts);
      bad += !all_once(&t);
    }
    for (int it = 0; it < 6; it++) { /* after a pause past the spin: the workers sleep */
      struct timespec ms = {0, 3 * 1000 * 1000};
      nanosleep(&ms, NULL);
      reset(&t, n);
      di_threadpool_run(tp, count_run, &t);
      bad += !all_once(&t);
    }
    CHECKF(bad == 0, "%d threads: %d tasks ran some part not exactly once", n, bad);
    if (n > 1) {
      order_task o = {.parts = 2 * n, .zero_waits = true};
      di_threadpool_run_parts(tp, order_run, &o, o.parts);
      CHECK(atomic_load(&o.done) == o.parts);
      order_task o2 = {.parts = n, .zero_waits = false};
      di_threadpool_run_parts(tp, order_run, &o2, o2.parts);
      CHECK(atomic_load(&o2.done) == o2.parts);
    }
    di_threadpool_free(tp);
  }
  printf("test_threadpool: every part once, for 1-4 threads and 1-37 parts, spinning and asleep\n");
  return di_test_finish("test_threadpool");
}
