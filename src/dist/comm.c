/* Collectives over Open MPI, each started nonblocking and polled against a
 * deadline (see comm.h): MPI's own blocking calls would wait forever on a
 * rank that hangs, and on a rank that died they either abort the job without
 * a word from us or hang too, depending on the transport. */
#include "dist/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DI_HAVE_MPI
#include <hwloc.h>
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static struct {
  bool started, active;
  int rank, size;
  double timeout;
  bool failed;
  char err[400];
  di_dist_stats stats;
  int *cnt, *dsp, *cnt2, *dsp2; /* [size] MPI's int counts and displacements */
  volatile int interrupted;
} g = {.size = 1};

void di_dist_interrupt(void) { g.interrupted = 1; }

bool di_dist_built(void) { return true; }
bool di_dist_active(void) { return g.active; }
int di_dist_rank(void) { return g.rank; }
int di_dist_size(void) { return g.size; }
bool di_dist_failed(void) { return g.failed || g.interrupted; }
di_dist_stats di_dist_get_stats(void) { return g.stats; }

di_code di_dist_init(int want, di_status *st) {
  if (g.started) return DI_OK;
  int provided = 0;
  /* The engine's step may run on a thread other than main (serve), one at a time. */
  if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
    return di_errorf(st, DI_ERR_IO, "--tp %d: MPI_Init failed", want);
  g.started = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g.size);
  const char *t = getenv("DI_TP_TIMEOUT_MS");
  g.timeout = (t && atoi(t) > 0 ? atoi(t) : 5000) / 1000.0;
  if (provided < MPI_THREAD_SERIALIZED)
    return di_errorf(st, DI_ERR_UNSUPPORTED, "--tp %d: this MPI library does not allow calls from several threads", want);
  if (g.size != want)
    return di_errorf(st, DI_ERR_INVALID, "--tp %d: the job has %d MPI rank%s (start it with mpirun -np %d)", want,
                     g.size, g.size == 1 ? "" : "s", want);
  g.cnt = calloc((size_t)g.size * 4, sizeof(int));
  if (!g.cnt) return di_errorf(st, DI_ERR_NOMEM, "--tp %d: out of memory", want);
  g.dsp = g.cnt + g.size, g.cnt2 = g.dsp + g.size, g.dsp2 = g.cnt2 + g.size;
  g.active = g.size > 1;
  return DI_OK;
}

void di_dist_finalize(void) {
  if (g.started && !g.failed) MPI_Finalize();
  free(g.cnt);
  g.cnt = NULL;
  g.started = g.active = false;
}

static void *exit_later(void *p) {
  (void)p;
  sleep(1); /* the engine hands the error to the requests in flight meanwhile */
  fprintf(stderr, "deepinfer: tensor parallel job stopped: %s\n", g.err);
  _exit(1);
}

/* The job cannot go on: rank 0 fails every later operation with the message
 * and exits a second later; another rank exits now (rank 0 reports). */
static di_code fail(di_status *st) {
  if (!g.failed) {
    g.failed = true;
    fprintf(stderr, "deepinfer: rank %d: %s\n", g.rank, g.err);
    if (g.rank != 0) _exit(1);
    pthread_t th;
    if (pthread_create(&th, NULL, exit_later, NULL) == 0) pthread_detach(th);
    else _exit(1);
  }
  return di_errorf(st, DI_ERR_IO, "tensor parallel: %s", g.err);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Polls r to completion: spinning for 100 us (a step's exchanges are short),
 * then napping between polls (the timer's slack makes a nap ~50 us; a 1 us
 * slack, PR_SET_TIMERSLACK, made TP2 decode 5-8x slower here: the waiting
 * rank then polls ~20x as often against the rank it waits for) so a rank
 * that shares a core with the one it waits for lets that one run (on this
 * loaded 2-core host, naps instead of sched_yield took a TP2 decode from 8 to
 * 13 tok/s; a 20 us spin was slower still), and in idle waits sleeping. */
static di_code wait_req(MPI_Request *r, const char *what, bool idle, size_t bytes, di_status *st) {
  if (g.failed) return di_errorf(st, DI_ERR_IO, "tensor parallel: %s", g.err);
  double t0 = now(), t = t0;
  for (unsigned i = 0;; i++) {
    int done = 0;
    if (MPI_Test(r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      snprintf(g.err, sizeof g.err, "%s failed: a rank exited or cannot be reached", what);
      return fail(st);
    }
    if (done) break;
    if (g.interrupted) {
      snprintf(g.err, sizeof g.err, "%s: the job is being stopped (a signal; mpirun sends one when a rank exits)", what);
      return fail(st);
    }
    if ((i & 63) == 0) t = now();
    if (t - t0 < 1e-4) continue;
    if (!idle && t - t0 > g.timeout) {
      snprintf(g.err, sizeof g.err, "%s: no answer from every rank within %.1f s (a rank exited or hangs)", what,
               g.timeout);
      return fail(st);
    }
    /* an idle follower of an idle server: 100 us naps, 1 ms after a second */
    if (idle && t - t0 > 2e-3) nanosleep(&(struct timespec){0, t - t0 > 1 ? 1000000 : 100000}, NULL);
    else nanosleep(&(struct timespec){0, 1000}, NULL);
  }
  if (!idle) {
    g.stats.ops++;
    g.stats.bytes += bytes;
    g.stats.seconds += now() - t0;
  }
  return DI_OK;
}

static di_code started(int rc, const char *what, di_status *st) {
  if (rc == MPI_SUCCESS) return DI_OK;
  snprintf(g.err, sizeof g.err, "%s could not start (MPI error %d)", what, rc);
  return fail(st);
}

/* size_t byte counts as MPI's ints, with displacements in rank order. */
static di_code counts(const size_t *bytes, int *cnt, int *dsp, size_t *total, di_status *st) {
  size_t off = 0;
  for (int r = 0; r < g.size; r++) {
    if (bytes[r] > INT_MAX || off > INT_MAX)
      return di_errorf(st, DI_ERR_RANGE, "tensor parallel: an exchange of %zu bytes is over MPI's limit", bytes[r]);
    cnt[r] = (int)bytes[r], dsp[r] = (int)off;
    off += bytes[r];
  }
  *total = off;
  return DI_OK;
}

di_code di_dist_bcast(void *buf, size_t bytes, bool idle, di_status *st) {
  if (!g.active) return DI_OK;
  if (g.failed) return di_errorf(st, DI_ERR_IO, "tensor parallel: %s", g.err);
  if (bytes > INT_MAX) return di_errorf(st, DI_ERR_RANGE, "tensor parallel: a broadcast of %zu bytes is too big", bytes);
  MPI_Request r;
  di_code rc = started(MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &r), "broadcast", st);
  /* only the followers wait idly: for the leader a late follower is a fault */
  return rc ? rc : wait_req(&r, "broadcast", idle && g.rank != 0, bytes, st);
}

di_code di_dist_agree(bool ok, bool *all_ok, di_status *st) {
  *all_ok = ok;
  if (!g.active) return DI_OK;
  if (g.failed) return di_errorf(st, DI_ERR_IO, "tensor parallel: %s", g.err);
  int in = ok, out = 0;
  MPI_Request r;
  di_code rc = started(MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &r), "agreement", st);
  if (!rc) rc = wait_req(&r, "agreement", true, 0, st);
  *all_ok = out != 0;
  return rc;
}

/* The start of the variable-size gathers: with one rank its own part is the
 * whole result (*local); otherwise the failure check and MPI's counts. */
static di_code gather_start(const void *send, void *recv, const size_t *bytes, size_t *total, bool *local,
                            di_status *st) {
  *local = !g.active;
  if (*local) {
    if (send && send != recv) memcpy(recv, send, bytes[0]);
    return DI_OK;
  }
  if (g.failed) return di_errorf(st, DI_ERR_IO, "tensor parallel: %s", g.err);
  return counts(bytes, g.cnt, g.dsp, total, st);
}

di_code di_dist_allgatherv(const void *send, void *recv, const size_t *bytes, di_status *st) {
  size_t total;
  bool local;
  di_code rc = gather_start(send, recv, bytes, &total, &local, st);
  if (rc || local) return rc;
  MPI_Request r;
  rc = started(MPI_Iallgatherv(send ? send : MPI_IN_PLACE, g.cnt[g.rank], MPI_BYTE, recv, g.cnt, g.dsp, MPI_BYTE,
                              MPI_COMM_WORLD, &r),
               "all-gather", st);
  return rc ? rc : wait_req(&r, "all-gather", false, total, st);
}

di_code di_dist_gatherv(const void *send, void *recv, const size_t *bytes, di_status *st) {
  size_t total;
  bool local;
  di_code rc = gather_start(send, recv, bytes, &total, &local, st);
  if (rc || local) return rc;
  MPI_Request r;
  const void *s = send ? send : g.rank == 0 ? MPI_IN_PLACE : recv;
  rc = started(MPI_Igatherv(s, g.cnt[g.rank], MPI_BYTE, recv, g.cnt, g.dsp, MPI_BYTE, 0, MPI_COMM_WORLD, &r),
               "gather", st);
  return rc ? rc : wait_req(&r, "gather", false, g.rank == 0 ? total : bytes[g.rank], st);
}

di_code di_dist_alltoallv(const void *send, const size_t *sbytes, void *recv, const size_t *rbytes, di_status *st) {
  if (!g.active) {
    memcpy(recv, send, sbytes[0]);
    return DI_OK;
  }
  if (g.failed) return di_errorf(st, DI_ERR_IO, "tensor parallel: %s", g.err);
  size_t ts, tr;
  di_code rc = counts(sbytes, g.cnt, g.dsp, &ts, st);
  if (!rc) rc = counts(rbytes, g.cnt2, g.dsp2, &tr, st);
  if (rc) return rc;
  MPI_Request r;
  rc = started(MPI_Ialltoallv(send, g.cnt, g.dsp, MPI_BYTE, recv, g.cnt2, g.dsp2, MPI_BYTE, MPI_COMM_WORLD, &r),
               "all-to-all", st);
  return rc ? rc : wait_req(&r, "all-to-all", false, ts + tr, st);
}

void di_dist_placement(char *buf, size_t len) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) || hwloc_topology_load(topo)) {
    snprintf(buf, len, "hwloc: topology unavailable");
    return;
  }
  hwloc_bitmap_t cpus = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc();
  char c[128] = "?", n[64] = "?";
  if (hwloc_get_cpubind(topo, cpus, HWLOC_CPUBIND_PROCESS) == 0) {
    hwloc_bitmap_list_snprintf(c, sizeof c, cpus);
    hwloc_cpuset_to_nodeset(topo, cpus, nodes);
    hwloc_bitmap_list_snprintf(n, sizeof n, nodes);
  }
  int ncore = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE), npu = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  int ncov = hwloc_get_nbobjs_inside_cpuset_by_type(topo, cpus, HWLOC_OBJ_CORE);
  char host[64] = "?";
  gethostname(host, sizeof host);
  host[sizeof host - 1] = 0;
  snprintf(buf, len, "host %s, bound to PUs %s (%d of %d cores, %d PUs on the host), NUMA node %s", host, c, ncov,
           ncore, npu, n);
  hwloc_bitmap_free(cpus);
  hwloc_bitmap_free(nodes);
  hwloc_topology_destroy(topo);
}

di_code di_dist_pingpong(size_t bytes, int reps, double *one_way, di_status *st) {
  *one_way = 0;
  if (!g.active) return DI_OK;
  char *buf = calloc(bytes ? bytes : 1, 1);
  if (!buf) return di_errorf(st, DI_ERR_NOMEM, "ping-pong: out of memory");
  double total = 0;
  for (int peer = 1; peer < g.size; peer++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (int i = 0; i < reps && (g.rank == 0 || g.rank == peer); i++) {
      if (g.rank == 0) {
        MPI_Send(buf, (int)bytes, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
        MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, (int)bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
      }
    }
    total += (now() - t0) / (2.0 * reps);
  }
  free(buf);
  if (g.rank == 0) *one_way = total / (g.size - 1);
  return DI_OK;
}

#else /* built without MPI: one rank */

bool di_dist_built(void) { return false; }
bool di_dist_active(void) { return false; }
int di_dist_rank(void) { return 0; }
int di_dist_size(void) { return 1; }
bool di_dist_failed(void) { return false; }
void di_dist_interrupt(void) {}
di_dist_stats di_dist_get_stats(void) { return (di_dist_stats){0}; }
void di_dist_finalize(void) {}

di_code di_dist_init(int want, di_status *st) {
  if (want <= 1) return DI_OK;
  return di_errorf(st, DI_ERR_UNSUPPORTED,
                   "--tp %d: this deepinfer was built without MPI (install libopenmpi-dev and libhwloc-dev, rebuild)",
                   want);
}

di_code di_dist_bcast(void *buf, size_t bytes, bool idle, di_status *st) {
  (void)buf, (void)bytes, (void)idle, (void)st;
  return DI_OK;
}

di_code di_dist_agree(bool ok, bool *all_ok, di_status *st) {
  (void)st;
  *all_ok = ok;
  return DI_OK;
}

di_code di_dist_allgatherv(const void *send, void *recv, const size_t *bytes, di_status *st) {
  (void)st;
  if (send && send != recv) memcpy(recv, send, bytes[0]);
  return DI_OK;
}

di_code di_dist_gatherv(const void *send, void *recv, const size_t *bytes, di_status *st) {
  (void)st;
  if (send && send != recv) memcpy(recv, send, bytes[0]);
  return DI_OK;
}

di_code di_dist_alltoallv(const void *send, const size_t *sbytes, void *recv, const size_t *rbytes, di_status *st) {
  (void)rbytes, (void)st;
  memcpy(recv, send, sbytes[0]);
  return DI_OK;
}

void di_dist_placement(char *buf, size_t len) { snprintf(buf, len, "built without MPI/hwloc"); }

di_code di_dist_pingpong(size_t bytes, int reps, double *one_way, di_status *st) {
  (void)bytes, (void)reps, (void)st;
  *one_way = 0;
  return DI_OK;
}

#endif
